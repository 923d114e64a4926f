"""Ancestral sampling with temperature, top-k and nucleus (top-p) filtering, reproducible from a seed."""

from __future__ import annotations

import numbers

import numpy as np
import tensorflow as tf

from tf_transformer import rules
from tf_transformer.decoding import _common
from tf_transformer.decoding.contract import DecodableModel

_TINY = float(np.finfo(np.float32).tiny)  # uniform noise in [tiny, 1): the Gumbel transform stays finite


def sample_decode(
    model: DecodableModel,
    source_ids,
    temperature=1.0,
    top_k=0,
    top_p=1.0,
    seed=None,
    max_decode_length=None,
    extra_decode_length=rules.EXTRA_DECODE_LENGTH,
    min_decode_length=0,
    jit_compile=False,
    no_repeat_ngram_size=0,
    max_decode_length_ratio=1.0,
    target_prefix_ids=None,
):
    """Samples one output per sentence, token by token, from the cached decoder.

    At each step the model's log-probabilities are divided by `temperature`, restricted to the `top_k`
    most probable tokens (0: no limit), then to the smallest set of most probable tokens whose probability
    reaches `top_p` (nucleus sampling, Holtzman et al., 2019), renormalised and sampled. The sample is
    Gumbel-max with stateless Philox noise seeded with `(seed, step)`: a given seed gives the same outputs
    eagerly and in `tf.function`; under XLA the outputs are reproducible as well, but XLA's Philox stream
    differs, so they are other samples. `temperature=0` or `top_k=1` is greedy search; a tiny `top_p`
    keeps only the most probable token and is greedy as well. Stops early when every sentence has emitted
    EOS. Works eagerly, in `tf.function` (also with an unknown batch and source length) and under XLA
    (`tf.function(jit_compile=True)`, passing `jit_compile=True` here too).

    Args:
        model: a `DecodableModel` (`encode`, `init_cache`, `decode`, `config`), e.g. a `Transformer`.
        source_ids: int `[batch, source_len]`, 0 = padding.
        temperature: float >= 0; < 1 sharpens, > 1 flattens the distribution, 0 takes the argmax.
        top_k: int >= 0; sample among the k most probable tokens only (0 = all).
        top_p: float in (0, 1]; nucleus size (1 = no nucleus filtering).
        seed: int or int scalar tensor; None draws a fresh seed at every call.
        max_decode_length: the most output tokens (EOS included) per sentence, an int or an int scalar
            tensor; None means the sentence's source length (non-padding tokens) + `extra_decode_length`.
            Always capped at `model.config.max_length`.
        extra_decode_length: see `max_decode_length`.
        min_decode_length: the fewest output tokens (EOS included) per sentence: EOS is not allowed
            earlier (as in OpenNMT and CTranslate2); never more than a sentence's maximum. 0: no minimum.
        jit_compile: True when the caller compiles this decoder with XLA (`tf.function(jit_compile=True)`):
            the self-attention caches are then fixed buffers, which XLA needs, instead of growing ones, which
            are faster elsewhere. TensorFlow cannot tell a trace that XLA will compile, so say it here;
            True also works outside XLA (the same outputs up to float rounding), only slower.
        no_repeat_ngram_size, max_decode_length_ratio, target_prefix_ids: as in `greedy_decode`.

    Returns:
        `(ids, scores)`: ids int32 `[batch, T]` without BOS, ending with EOS, 0 after it (T as in
        `greedy_decode`); scores float32 `[batch]`, the sum of the model's own log-probabilities (before
        temperature and filtering) of the emitted tokens, EOS included, so they compare with greedy scores.
        A sentence that reaches its cap gets EOS as its last token; padding is never emitted.

    Raises:
        ValueError: temperature < 0, top_k < 0, top_p outside (0, 1], or jit_compile not a bool.

    Example:

    >>> import numpy as np
    >>> import tf_transformer as tft
    >>> from tf_transformer.decoding import sample_decode
    >>> config = tft.TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=4,
    ...     num_encoder_layers=2, num_decoder_layers=2, max_length=64, dropout=0.0)
    >>> model = tft.Transformer(config)
    >>> source = np.array([[5, 6, 7, 2]])
    >>> first, _ = sample_decode(model, source, top_p=0.9, seed=7, max_decode_length=6)
    >>> again, _ = sample_decode(model, source, top_p=0.9, seed=7, max_decode_length=6)
    >>> bool((first.numpy() == again.numpy()).all())
    True

    References: Vaswani et al., 2017, https://arxiv.org/abs/1706.03762; Holtzman et al., "The Curious Case
    of Neural Text Degeneration", 2019, https://arxiv.org/abs/1904.09751
    """
    _check_sampling_arguments(temperature, top_k, top_p)
    rules.check_length_arguments(max_decode_length, extra_decode_length, min_decode_length, max_decode_length_ratio)
    rules.check_no_repeat_ngram_size(no_repeat_ngram_size)
    _common.check_jit_compile(jit_compile)
    temperature, top_k, top_p = float(temperature), int(top_k), float(top_p)
    if temperature == 0 or top_k == 1:
        select = _argmax
    else:
        if seed is None:
            # A tensor, not a Python number: a traced function then draws a new seed at every call.
            seed = tf.random.uniform([], maxval=tf.int32.max, dtype=tf.int32)
        seed = tf.cast(seed, tf.int64)
        vocab_size = model.config.output_vocab_size

        def select(log_probs, allowed, step):
            logits = tf.where(allowed, log_probs / temperature, _common.NEG_INF)
            if 0 < top_k < vocab_size:
                kth_best = tf.math.top_k(logits, k=top_k).values[:, -1:]
                logits = tf.where(logits >= kth_best, logits, _common.NEG_INF)
            if top_p < 1.0:
                logits = _nucleus(logits, top_p)
            # Gumbel-max: argmax(logits + Gumbel noise) is a sample of softmax(logits). Unlike
            # tf.random.stateless_categorical it compiles with XLA, and stateless uniform noise seeded with
            # (seed, step) makes every step reproducible.
            uniform = tf.random.stateless_uniform(
                tf.shape(logits), seed=tf.stack([seed, tf.cast(step, tf.int64)]), minval=_TINY, maxval=1.0, alg="philox"
            )
            return tf.argmax(logits - tf.math.log(-tf.math.log(uniform)), axis=-1, output_type=tf.int32)

    return _common.decode_one_hypothesis(
        model, source_ids, select, max_decode_length, extra_decode_length, min_decode_length, jit_compile,
        no_repeat_ngram_size, max_decode_length_ratio, target_prefix_ids,
    )  # fmt: skip


def _argmax(log_probs, allowed, step):
    del step
    return tf.argmax(tf.where(allowed, log_probs, _common.NEG_INF), axis=-1, output_type=tf.int32)


def _nucleus(logits, top_p):
    """Keeps the smallest set of most probable tokens whose probability sum reaches `top_p`."""
    ordered = tf.sort(logits, axis=-1, direction="DESCENDING")
    # Probability of all better tokens: a token is kept while that is still below top_p (the first always).
    before = tf.math.cumsum(tf.nn.softmax(ordered, axis=-1), axis=-1, exclusive=True)
    threshold = tf.reduce_min(tf.where(before < top_p, ordered, ordered[:, :1]), axis=-1, keepdims=True)
    return tf.where(logits >= threshold, logits, _common.NEG_INF)


def _check_sampling_arguments(temperature, top_k, top_p):
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or temperature < 0:
        raise ValueError(
            f"temperature: must be a number >= 0, got {temperature!r}. Fix: use 1.0 to sample from the "
            "model, < 1 for sharper outputs, 0 for greedy."
        )
    if not rules.is_int(top_k) or top_k < 0:
        raise ValueError(f"top_k: must be an int >= 0 (0 = no limit), got {top_k!r}. Fix: use e.g. 0 or 40.")
    if isinstance(top_p, bool) or not isinstance(top_p, numbers.Real) or not 0 < top_p <= 1:
        raise ValueError(f"top_p: must be in (0, 1], got {top_p!r}. Fix: use 1.0 (off) or e.g. 0.9.")
