"""Greedy search: at every step emit the most probable token, with the decoder's key/value cache."""

from __future__ import annotations

from tf_transformer.decoding.loop import DecodableModel, check_jit_compile, decode_one_hypothesis
from tf_transformer.decoding.settings import PAPER, DecodingSettings, require_settings
from tf_transformer.errors import require_tensorflow_backend


def greedy_decode(
    model: DecodableModel,
    source_ids,
    settings: DecodingSettings = PAPER,
    *,
    jit_compile: bool = False,
    target_prefix_ids=None,
):
    """Greedy decoding of a batch of sources with the incremental (cached) decoder.

    Args:
        model: a `DecodableModel` (`encode`, `init_cache`, `decode`, `config`), e.g. a `Transformer`.
        source_ids: int `[batch, source_len]`, 0 = padding.
        settings: a `DecodingSettings`; its no_repeat_ngram_size, max_decode_length and min_decode_length apply.
        jit_compile: True when the caller compiles this call with XLA (`tf.function(jit_compile=True)`): fixed
            self-attention buffers, which XLA needs (TensorFlow cannot tell a trace is for XLA); slower outside it.
        target_prefix_ids: int `[batch, prefix_len]`, 0-padded at the end, or None: each output starts with
            its row's tokens (forced, counted in the score; the length cap is raised to fit them and EOS; a row
            of zeros forces nothing).

    Returns:
        `(ids, scores)`: ids int32 `[batch, T]` (the package docstring's convention); scores float32 `[batch]`,
        the sum of the log-probabilities of the emitted tokens, EOS included.

    Example:

    >>> import numpy as np
    >>> import tf_transformer as tft
    >>> from tf_transformer.decoding import DecodingSettings, greedy_decode
    >>> config = tft.TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=4,
    ...     num_encoder_layers=2, num_decoder_layers=2, max_length=64, dropout=0.0)
    >>> model = tft.Transformer(config)
    >>> sources = np.array([[5, 6, 7, 2], [8, 9, 2, 0]])
    >>> ids, scores = greedy_decode(model, sources, DecodingSettings(max_decode_length=6))
    >>> ids.shape, scores.shape
    (TensorShape([2, 6]), TensorShape([2]))

    Reference: Vaswani et al., "Attention Is All You Need", 2017, https://arxiv.org/abs/1706.03762
    """
    require_tensorflow_backend("tft.decoding")
    require_settings(settings)
    check_jit_compile(jit_compile)
    return decode_one_hypothesis(
        model, source_ids, settings, jit_compile=jit_compile, target_prefix_ids=target_prefix_ids
    )
