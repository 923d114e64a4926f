"""Decoding a trained Transformer: greedy search, beam search (length penalty, n-best) and sampling.

Every decoder encodes the source once and runs a `tf.while_loop` over the model's incremental decoder
(`encode`, `init_cache`, `decode`), with fixed-size output buffers: one code path for eager calls,
`tf.function` (also with `input_signature=[tf.TensorSpec([None, None], tf.int32)]`), XLA
(`jit_compile=True`) and SavedModels. The self-attention caches grow by one position a step, except under
XLA, which needs fixed shapes and gets fixed buffers. Wrap a decoder in a `tf.function` for speed.

Output convention (all decoders):

- ids are int32, without BOS, include EOS, and are 0 (padding) after it. Padding is never emitted.
- Length: each sentence emits at most `max_decode_length` tokens (EOS included) if given, else its source
  length (non-padding tokens) + `extra_decode_length` (the paper: input length + 50); always at most
  `config.max_length`. A sentence that reaches its limit gets EOS as its last token, scored with the
  model's log-probability of EOS, so every output ends with EOS.
- The last axis T is `max_decode_length` (capped at `config.max_length`) if given, else
  `min(source_ids.shape[1] + extra_decode_length, config.max_length)`: the same in every mode (XLA needs
  a static size); columns that no sentence reached are 0. `trim_padding` drops them in eager code.
- Scores are float32: greedy and sampling give the sum of the model's log-probabilities of the emitted
  tokens; beam search gives that sum divided by the length penalty ((5 + length) / 6) ** alpha.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tf_transformer.decoding.beam_search import beam_search
from tf_transformer.decoding.greedy import greedy_decode
from tf_transformer.decoding.sampling import sample_decode

METHODS = ("beam", "greedy", "sample")


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
    beam_size=4,
    length_penalty=0.6,
    n_best=1,
    max_decode_length=None,
    extra_decode_length=50,
    min_decode_length=0,
    method="beam",
    **sampling_kwargs,
):
    """Translates a batch of source ids with beam search (the paper's default), greedy search or sampling.

    Args:
        model: a `Transformer`.
        source_ids: int `[batch, source_len]`, 0 = padding.
        beam_size, length_penalty, n_best: beam search settings (the paper: 4 and 0.6). `beam_size=1`
            is greedy search (scores still length-penalised).
        max_decode_length, extra_decode_length: the output length rule (see the package docstring).
        min_decode_length: the fewest output tokens (EOS included); EOS is not allowed earlier.
        method: "beam", "greedy" or "sample".
        **sampling_kwargs: `temperature`, `top_k`, `top_p`, `seed` of `sample_decode` (method "sample" only).

    Returns:
        A `DecodeResult(ids [batch, n_best, T], scores [batch, n_best])`, see the package docstring.

    Raises:
        ValueError: an unknown method, sampling arguments without method="sample", n_best > 1 without beam
            search, or an invalid setting of the chosen decoder.

    Example:

    >>> import numpy as np
    >>> import tf_transformer as tft
    >>> from tf_transformer.decoding import translate
    >>> config = tft.TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=4,
    ...     num_encoder_layers=2, num_decoder_layers=2, max_length=64, dropout=0.0)
    >>> model = tft.Transformer(config)
    >>> result = translate(model, np.array([[5, 6, 7, 2]]), beam_size=2, max_decode_length=5)
    >>> result.ids.shape, result.scores.shape
    (TensorShape([1, 1, 5]), TensorShape([1, 1]))

    References: Vaswani et al., 2017, https://arxiv.org/abs/1706.03762; Wu et al., 2016 (length
    penalty), https://arxiv.org/abs/1609.08144; Holtzman et al., 2019 (top-p), https://arxiv.org/abs/1904.09751
    """
    if method not in METHODS:
        raise ValueError(f"method: unknown decoding method {method!r}. Fix: use one of {', '.join(METHODS)}.")
    if sampling_kwargs and method != "sample":
        raise ValueError(
            f"{', '.join(sorted(sampling_kwargs))}: sampling arguments need method='sample', got method={method!r}."
        )
    if method != "beam" and n_best != 1:
        raise ValueError(
            f"n_best: {method} decoding gives one hypothesis, got n_best={n_best}. Fix: use method='beam'."
        )
    lengths = dict(
        max_decode_length=max_decode_length,
        extra_decode_length=extra_decode_length,
        min_decode_length=min_decode_length,
    )
    if method == "beam":
        ids, scores = beam_search(
            model, source_ids, beam_size=beam_size, length_penalty=length_penalty, n_best=n_best, **lengths
        )
        return DecodeResult(ids, scores)
    if method == "greedy":
        ids, scores = greedy_decode(model, source_ids, **lengths)
    else:
        ids, scores = sample_decode(model, source_ids, **sampling_kwargs, **lengths)
    return DecodeResult(ids[:, tf.newaxis], scores[:, tf.newaxis])


def trim_padding(ids):
    """Eager helper: drops the trailing columns of `ids` `[..., T]` that are 0 in every row (numpy out)."""
    ids = np.asarray(ids)
    used = np.flatnonzero(ids.reshape(-1, ids.shape[-1]).any(axis=0))
    return ids[..., : used[-1] + 1 if used.size else 0]


__all__ = [
    "DecodeResult", "METHODS", "TextTranslator", "beam_search", "greedy_decode", "sample_decode", "translate",
    "translate_texts", "trim_padding",
]  # fmt: skip


# After translate: text.py builds on it.
from tf_transformer.decoding.text import TextTranslator, translate_texts  # noqa: E402
