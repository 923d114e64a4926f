"""Greedy search: at every step emit the most probable token, with the decoder's key/value cache."""

from __future__ import annotations

from tf_transformer import rules
from tf_transformer.decoding import _common
from tf_transformer.decoding.contract import DecodableModel


def greedy_decode(
    model: DecodableModel,
    source_ids,
    max_decode_length=None,
    extra_decode_length=rules.EXTRA_DECODE_LENGTH,
    min_decode_length=0,
    jit_compile=False,
    no_repeat_ngram_size=0,
    max_decode_length_ratio=1.0,
    target_prefix_ids=None,
):
    """Greedy decoding of a batch of sources with the incremental (cached) decoder.

    The encoder runs once; each step feeds only the previous token and reads earlier positions from the
    cache, and the loop stops as soon as every sentence has emitted EOS. Pure TensorFlow: works eagerly,
    in `tf.function` (also with `input_signature=[tf.TensorSpec([None, None], tf.int32)]`), under XLA
    (`tf.function(jit_compile=True)`, passing `jit_compile=True` here too) and in a SavedModel. Wrap it in a
    `tf.function` for speed.

    Args:
        model: a `DecodableModel` (`encode`, `init_cache`, `decode`, `config`), e.g. a `Transformer`.
        source_ids: int `[batch, source_len]`, 0 = padding.
        max_decode_length: the most output tokens (EOS included) of every sentence, an int or an int
            scalar tensor (e.g. a SavedModel input); None means `floor(max_decode_length_ratio *
            source_length) + extra_decode_length`, source_length counting each sentence's non-padding ids.
            Always capped at `model.config.max_length`.
        extra_decode_length: see `max_decode_length` (the paper: input length + 50).
        max_decode_length_ratio: see `max_decode_length` (the paper: 1; fairseq's max_len_a).
        min_decode_length: the fewest output tokens (EOS included) per sentence: EOS is not allowed
            earlier (as in OpenNMT and CTranslate2); never more than a sentence's maximum. 0: no minimum.
        jit_compile: True when the caller compiles this decoder with XLA (`tf.function(jit_compile=True)`):
            the self-attention caches are then fixed buffers, which XLA needs, instead of growing ones, which
            are faster elsewhere. TensorFlow cannot tell a trace that XLA will compile, so say it here;
            True also works outside XLA (the same outputs up to float rounding), only slower.
        no_repeat_ngram_size: N > 0 forbids a token that would complete an N-gram the output already holds
            (fairseq's NGramRepeatBlock, Hugging Face's no_repeat_ngram_size); 0: off.
        target_prefix_ids: int `[batch, prefix_len]`, 0-padded at the end, or None: each output starts with
            its row's tokens (forced; a row of zeros forces nothing), which count in the score; the length cap
            is raised to fit a prefix and EOS. The rest is decoded as usual after them.

    Returns:
        `(ids, scores)`: ids int32 `[batch, T]` without BOS, ending with EOS, 0 after it; scores float32
        `[batch]`, the sum of the log-probabilities of the emitted tokens (EOS included). T is
        `max_decode_length` (capped at `config.max_length`) if given, else
        `min(source_ids.shape[1] + extra_decode_length, config.max_length)`; columns that no sentence
        reached are 0. A sentence that reaches its cap gets EOS as its last token (scored with the model's
        log-probability of EOS); padding is never emitted.

    Example:

    >>> import numpy as np
    >>> import tf_transformer as tft
    >>> from tf_transformer.decoding import greedy_decode
    >>> config = tft.TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=4,
    ...     num_encoder_layers=2, num_decoder_layers=2, max_length=64, dropout=0.0)
    >>> model = tft.Transformer(config)
    >>> ids, scores = greedy_decode(model, np.array([[5, 6, 7, 2], [8, 9, 2, 0]]), max_decode_length=6)
    >>> ids.shape, scores.shape
    (TensorShape([2, 6]), TensorShape([2]))

    Reference: Vaswani et al., "Attention Is All You Need", 2017, https://arxiv.org/abs/1706.03762
    """
    rules.check_length_arguments(max_decode_length, extra_decode_length, min_decode_length, max_decode_length_ratio)
    rules.check_no_repeat_ngram_size(no_repeat_ngram_size)
    _common.check_jit_compile(jit_compile)
    return _common.decode_one_hypothesis(
        model, source_ids, None, max_decode_length, extra_decode_length, min_decode_length, jit_compile,
        no_repeat_ngram_size, max_decode_length_ratio, target_prefix_ids,
    )  # fmt: skip
