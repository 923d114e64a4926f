"""Ancestral sampling with temperature, top-k and nucleus (top-p) filtering, reproducible from a seed."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tf_transformer.decoding.constraints import NEG_INF
from tf_transformer.decoding.loop import DecodableModel, check_jit_compile, decode_one_hypothesis
from tf_transformer.decoding.settings import PAPER, DecodingSettings, require_settings
from tf_transformer.errors import require_tensorflow_backend

_TINY = float(np.finfo(np.float32).tiny)  # uniform noise in [tiny, 1): the Gumbel transform stays finite


def sample_decode(
    model: DecodableModel,
    source_ids,
    settings: DecodingSettings = PAPER,
    *,
    jit_compile: bool = False,
    target_prefix_ids=None,
):
    """Samples one output per sentence, token by token, from the cached decoder.

    Each step's log-probabilities are divided by `settings.temperature`, kept to the `top_k` best (0: all), then
    to the smallest set whose probability reaches `top_p` (nucleus sampling, Holtzman et al., 2019), and
    sampled with stateless noise seeded by `(seed, step)`: a seed gives the same outputs eagerly and in
    `tf.function`; under XLA other, equally reproducible ones (XLA's Philox stream differs). `temperature=0`
    or `top_k=1` is greedy search.

    Args:
        model: a `DecodableModel` (`encode`, `init_cache`, `decode`, `config`), e.g. a `Transformer`.
        source_ids: int `[batch, source_len]`, 0 = padding.
        settings: a `DecodingSettings` (method "sample" for non-default sampling settings); its temperature,
            top_k, top_p, seed, no_repeat_ngram_size, max_decode_length and min_decode_length apply.
        jit_compile, target_prefix_ids: as in `greedy_decode`.

    Returns:
        `(ids, scores)`: ids as in `greedy_decode`; scores float32 `[batch]`, the sum of the model's own
        log-probabilities (before temperature and filtering) of the emitted tokens, EOS included: greedy's measure.

    Example:

    >>> import numpy as np
    >>> import tf_transformer as tft
    >>> from tf_transformer.decoding import DecodingSettings, sample_decode
    >>> config = tft.TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=4,
    ...     num_encoder_layers=2, num_decoder_layers=2, max_length=64, dropout=0.0)
    >>> model = tft.Transformer(config)
    >>> source = np.array([[5, 6, 7, 2]])
    >>> settings = DecodingSettings(method="sample", top_p=0.9, seed=7, max_decode_length=6)
    >>> first, _ = sample_decode(model, source, settings)
    >>> again, _ = sample_decode(model, source, settings)
    >>> bool((first.numpy() == again.numpy()).all())
    True

    References: Vaswani et al., 2017, https://arxiv.org/abs/1706.03762; Holtzman et al., "The Curious Case
    of Neural Text Degeneration", 2019, https://arxiv.org/abs/1904.09751
    """
    require_tensorflow_backend("tft.decoding")
    require_settings(settings)
    check_jit_compile(jit_compile)
    temperature, top_k, top_p = float(settings.temperature), int(settings.top_k), float(settings.top_p)
    seed = settings.seed
    if temperature == 0 or top_k == 1:
        select = _argmax
    else:
        if seed is None:
            # A tensor, not a Python number: a traced function then draws a new seed at every call.
            seed = tf.random.uniform([], maxval=tf.int32.max, dtype=tf.int32)
        seed = tf.cast(seed, tf.int64)
        vocab_size = model.config.output_vocab_size

        def select(log_probs, allowed, step):
            logits = tf.where(allowed, log_probs / temperature, NEG_INF)
            if 0 < top_k < vocab_size:
                kth_best = tf.math.top_k(logits, k=top_k).values[:, -1:]
                logits = tf.where(logits >= kth_best, logits, NEG_INF)
            if top_p < 1.0:
                logits = _nucleus(logits, top_p)
            # Gumbel-max: argmax(logits + Gumbel noise) is a sample of softmax(logits). Unlike
            # tf.random.stateless_categorical it compiles with XLA, and stateless uniform noise seeded with
            # (seed, step) makes every step reproducible.
            uniform = tf.random.stateless_uniform(
                tf.shape(logits), seed=tf.stack([seed, tf.cast(step, tf.int64)]), minval=_TINY, maxval=1.0, alg="philox"
            )
            return tf.argmax(logits - tf.math.log(-tf.math.log(uniform)), axis=-1, output_type=tf.int32)

    return decode_one_hypothesis(
        model, source_ids, settings, select, jit_compile=jit_compile, target_prefix_ids=target_prefix_ids
    )


def _argmax(log_probs, allowed, step):
    del step
    return tf.argmax(tf.where(allowed, log_probs, NEG_INF), axis=-1, output_type=tf.int32)


def _nucleus(logits, top_p):
    """Keeps the smallest set of most probable tokens whose probability sum reaches `top_p`."""
    ordered = tf.sort(logits, axis=-1, direction="DESCENDING")
    # Probability of all better tokens: a token is kept while that is still below top_p (the first always).
    before = tf.math.cumsum(tf.nn.softmax(ordered, axis=-1), axis=-1, exclusive=True)
    threshold = tf.reduce_min(tf.where(before < top_p, ordered, ordered[:, :1]), axis=-1, keepdims=True)
    return tf.where(logits >= threshold, logits, NEG_INF)
