"""`translate`: one entry point to the three decoders, with the output convention of the package docstring."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tf_transformer.decoding.beam_search import beam_search
from tf_transformer.decoding.greedy import greedy_decode
from tf_transformer.decoding.sampling import sample_decode
from tf_transformer.decoding.settings import PAPER, DecodingSettings, require_settings


class DecodeResult(NamedTuple):
    """What `translate` returns.

    ids: int32 `[batch, n_best, T]`, best first (n_best is 1 for greedy and sampling).
    scores: float32 `[batch, n_best]`: length-penalised for beam search, log-probability sums otherwise.
    """

    ids: tf.Tensor
    scores: tf.Tensor


def translate(
    model,
    source_ids,
    settings: DecodingSettings = PAPER,
    *,
    jit_compile: bool = False,
    target_prefix_ids=None,
) -> DecodeResult:
    """Translates a batch of source ids with the decoder `settings.method` names: beam search (the paper's
    default), greedy search or sampling.

    Args:
        model: a `Transformer` (any `DecodableModel`).
        source_ids: int `[batch, source_len]`, 0 = padding.
        settings: a `DecodingSettings` (default `PAPER`, the paper's decoding).
        jit_compile, target_prefix_ids: as in `greedy_decode`.

    Returns:
        A `DecodeResult(ids [batch, n_best, T], scores [batch, n_best])`, see the package docstring.

    Raises:
        TypeError: `settings` is not a `DecodingSettings`.

    Example:

    >>> import numpy as np
    >>> import tf_transformer as tft
    >>> from tf_transformer.decoding import DecodingSettings, translate
    >>> config = tft.TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=4,
    ...     num_encoder_layers=2, num_decoder_layers=2, max_length=64, dropout=0.0)
    >>> model = tft.Transformer(config)
    >>> result = translate(model, np.array([[5, 6, 7, 2]]), DecodingSettings(beam_size=2, max_decode_length=5))
    >>> result.ids.shape, result.scores.shape
    (TensorShape([1, 1, 5]), TensorShape([1, 1]))

    References: Vaswani et al., 2017, https://arxiv.org/abs/1706.03762; Wu et al., 2016 (length
    penalty), https://arxiv.org/abs/1609.08144; Holtzman et al., 2019 (top-p), https://arxiv.org/abs/1904.09751
    """
    require_settings(settings)
    arguments = dict(jit_compile=jit_compile, target_prefix_ids=target_prefix_ids)
    if settings.method == "beam":
        ids, scores = beam_search(model, source_ids, settings, **arguments)
        return DecodeResult(ids, scores)
    decoder = greedy_decode if settings.method == "greedy" else sample_decode
    ids, scores = decoder(model, source_ids, settings, **arguments)
    return DecodeResult(ids[:, tf.newaxis], scores[:, tf.newaxis])


def trim_padding(ids):
    """Eager helper: drops the trailing columns of `ids` `[..., T]` that are 0 in every row (numpy out)."""
    ids = np.asarray(ids)
    used = np.flatnonzero(ids.reshape(-1, ids.shape[-1]).any(axis=0))
    return ids[..., : used[-1] + 1 if used.size else 0]
