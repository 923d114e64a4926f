"""`translate`: one entry point to the three decoders, with the output convention of the package docstring."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tf_transformer import rules
from tf_transformer.decoding.beam_search import beam_search
from tf_transformer.decoding.greedy import greedy_decode
from tf_transformer.decoding.sampling import sample_decode
from tf_transformer.decoding_settings import METHODS  # defined without TensorFlow, for the commands' flags


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
    extra_decode_length=rules.EXTRA_DECODE_LENGTH,
    min_decode_length=0,
    method="beam",
    jit_compile=False,
    no_repeat_ngram_size=0,
    max_decode_length_ratio=1.0,
    target_prefix_ids=None,
    **sampling_kwargs,
):
    """Translates a batch of source ids with beam search (the paper's default), greedy search or sampling.

    Args:
        model: a `Transformer`.
        source_ids: int `[batch, source_len]`, 0 = padding.
        beam_size, length_penalty, n_best: beam search settings (the paper: 4 and 0.6). `beam_size=1`
            is greedy search (scores still length-penalised).
        max_decode_length, extra_decode_length, max_decode_length_ratio: the output length rule (see the package
            docstring): at most `max_decode_length` tokens, else `floor(max_decode_length_ratio * source_length)
            + extra_decode_length` (fairseq's max_len_a and max_len_b; the paper: 1 and 50).
        min_decode_length: the fewest output tokens (EOS included); EOS is not allowed earlier.
        method: "beam", "greedy" or "sample".
        jit_compile: True when the caller compiles this call with XLA (`tf.function(jit_compile=True)`):
            fixed-size caches, which XLA needs (see `greedy_decode`).
        no_repeat_ngram_size: N > 0 forbids a token that would complete an N-gram already in the output
            (fairseq's NGramRepeatBlock); 0: off.
        target_prefix_ids: int `[batch, prefix_len]`, 0-padded at the end, or None: each output starts with its
            row's tokens (forced; counted in the score; a row of zeros: no prefix). See `greedy_decode`.
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
    rules.check_single_hypothesis(n_best, method)
    shared = dict(
        max_decode_length=max_decode_length,
        extra_decode_length=extra_decode_length,
        min_decode_length=min_decode_length,
        jit_compile=jit_compile,
        no_repeat_ngram_size=no_repeat_ngram_size,
        max_decode_length_ratio=max_decode_length_ratio,
        target_prefix_ids=target_prefix_ids,
    )
    if method == "beam":
        ids, scores = beam_search(
            model, source_ids, beam_size=beam_size, length_penalty=length_penalty, n_best=n_best, **shared
        )
        return DecodeResult(ids, scores)
    if method == "greedy":
        ids, scores = greedy_decode(model, source_ids, **shared)
    else:
        ids, scores = sample_decode(model, source_ids, **sampling_kwargs, **shared)
    return DecodeResult(ids[:, tf.newaxis], scores[:, tf.newaxis])


def trim_padding(ids):
    """Eager helper: drops the trailing columns of `ids` `[..., T]` that are 0 in every row (numpy out)."""
    ids = np.asarray(ids)
    used = np.flatnonzero(ids.reshape(-1, ids.shape[-1]).any(axis=0))
    return ids[..., : used[-1] + 1 if used.size else 0]
