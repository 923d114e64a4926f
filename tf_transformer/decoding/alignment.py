"""Word alignments from the encoder-decoder attention: which source word each output word was translated from.

    model, tokenizer, _ = tf_transformer.checkpoints.load_translation_model("runs/multi30k")
    results = TextTranslator(model, tokenizer, with_alignments=True)(["A dog runs in the snow."])
    text, score, links = results[0][0]   # "Ein Hund rennt im Schnee.", -0.33, [(0, 0), (1, 1), (2, 2), ...]
    format_alignment(links)              # "0-0 1-1 2-2 3-3 5-4": source word i - target word j

How (the method of fairseq's `--print-alignment` and OpenNMT-tf's `with_alignments`): after decoding, one
teacher-forced pass of the model over the chosen output (`align_ids`; the decoders' cached steps equal that
pass, tests/decoding/test_greedy.py) gives the cross-attention probabilities of one decoder layer, averaged over
its heads. Row j is the attention of the position that predicts target piece j (decoder input BOS + target[:j]).

Layer: the penultimate decoder layer by default (the last one of a one-layer decoder): Garg et al. (2019),
"Jointly Learning to Align and Translate with Transformer Models", found the penultimate layer's attention the
best-aligned of a 6-layer Transformer's, and fairseq's alignment models default to it. On the Multi30k recipe's
4-layer model the second layer did better (85.5% of 179 hand-aligned test_2016 words against 78.2% for the
penultimate and 70.9% for the last; `benchmarks/alignment_layers.py`), so `layer` / `tft-translate
--alignment_layer` choose another. Averaged heads, because single heads specialise and which head aligns best
differs from layer to layer and model to model; there the average was within a point of the best head or above
it in layers 1 to 3.

Pieces to words: words are the whitespace-separated tokens of the source line and of the detokenized
translation. A source word's weight is the SUM of the weights of its pieces (the probability mass on the word),
a target word's row the MEAN of its pieces' rows (a distribution again); each target word is linked to the
source word of largest weight (the first on ties), so every target word has exactly one link. The EOS row and
column (and padding) are left out; a source word cut off by the model's `max_length` gets no link.
"""

from __future__ import annotations

import re
from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tf_transformer.decoding.constraints import as_source_ids
from tf_transformer.errors import require_tensorflow_backend

Link = Tuple[int, int]  # (source word i, target word j), 0-based

_WORD = re.compile(r"\S+")  # str.split()'s words, with their positions
_TOKENIZE_CHUNK = 1024  # strings a tokenizer call, as in text.py


def alignment_layer(num_decoder_layers: int, layer: Optional[int] = None) -> int:
    """The 0-based decoder layer whose attention aligns: `layer` (negative counts from the top, as in Python),
    or by default the penultimate one (the only one of a one-layer decoder). ValueError if out of range."""
    if layer is None:
        return max(num_decoder_layers - 2, 0)
    if (
        isinstance(layer, bool)
        or not isinstance(layer, (int, np.integer))
        or not (-num_decoder_layers <= layer < num_decoder_layers)
    ):
        raise ValueError(
            f"alignment_layer: {layer!r} is not a layer of a {num_decoder_layers}-layer decoder. Fix: use an int from "
            f"{-num_decoder_layers} to {num_decoder_layers - 1}, or None for the penultimate layer."
        )
    return int(layer) % num_decoder_layers


def align_ids(model, source_ids, target_ids, layer: Optional[int] = None) -> tf.Tensor:
    """Soft piece alignments: the head-averaged cross-attention of one decoder layer over `target_ids`, teacher-forced.

    Args:
        model: a `Transformer` (or anything with its `attention_weights` and a `config`).
        source_ids, target_ids: int `[batch, len]`, 0 = padding, tokens + EOS (a row of `translate(...).ids` as it
            is); another rank raises a ValueError, as does a `layer` out of range (`alignment_layer`).
        layer: the decoder layer; default the penultimate.

    Returns:
        float32 `[batch, target_len, source_len]`: row j is the attention of the position that predicts
        `target_ids[:, j]`, a distribution over the source positions (EOS included); 0 in padded rows and columns.
    """
    require_tensorflow_backend("tft.decoding")
    config = model.config
    index = alignment_layer(config.num_decoder_layers, layer)
    source_ids = as_source_ids(source_ids)
    target_ids = as_source_ids(target_ids, "target_ids", "target_len")
    bos = tf.fill([tf.shape(target_ids)[0], 1], tf.constant(config.bos_id, tf.int32))
    # As in scoring: what follows a row's EOS cannot change the rows before it (causal mask); it is zeroed below.
    decoder_input = tf.concat([bos, target_ids[:, :-1]], axis=1)
    weights = model.attention_weights(source_ids, decoder_input)["decoder_cross"][index]
    weights = tf.reduce_mean(tf.cast(weights, tf.float32), axis=1)  # [batch, target_len, source_len]
    real_rows = tf.not_equal(target_ids, config.pad_id)[:, :, tf.newaxis]
    real_columns = tf.not_equal(source_ids, config.pad_id)[:, tf.newaxis, :]
    return tf.where(real_rows & real_columns, weights, 0.0)


def word_alignment(weights, source_words, target_words) -> List[Link]:
    """Hard word links from soft piece alignments (NumPy; see the module docstring for the rule).

    Args:
        weights: float `[target_pieces, source_pieces]`, e.g. one row of `align_ids` (more rows or columns than
            the maps below are ignored).
        source_words: int `[source_pieces']`, the word of each source piece, -1 for a piece to leave out (EOS);
            source piece k's weight goes to word `source_words[k]`.
        target_words: int `[target_pieces']`, the same for the target pieces (-1: the EOS row).

    Returns:
        `(i, j)` links, source word i to target word j, one for each target word that has a piece, in target
        order; none when no source piece has a word.
    """
    source_words = np.asarray(source_words, np.int64)
    target_words = np.asarray(target_words, np.int64)
    weights = np.asarray(weights, np.float64)[: len(target_words), : len(source_words)]
    if not (source_words >= 0).any() or not (target_words >= 0).any():
        return []
    # by_source[t, i]: the weight of target piece t on source word i, the sum over the word's pieces.
    by_source = np.zeros((len(target_words), source_words.max() + 1))
    kept = source_words >= 0
    np.add.at(by_source.T, source_words[kept], weights[:, kept].T)
    links = []
    for j in range(target_words.max() + 1):
        rows = target_words == j
        if rows.any():
            links.append((int(np.argmax(by_source[rows].mean(axis=0))), j))
    return links


def format_alignment(links: Sequence[Link]) -> str:
    """Pharaoh format: `"i-j i-j ..."` (fast_align's, fairseq's and OpenNMT-tf's)."""
    return " ".join(f"{i}-{j}" for i, j in links)


def source_word_maps(tokenizer, sentences: Sequence[str]) -> List[np.ndarray]:
    """For each sentence, the word (of `sentence.split()`) of each of its pieces, from the tokenizer's byte offsets.

    A piece belongs to the first word that ends after the piece starts: its own word, or, for a piece that starts
    on whitespace (SentencePiece's word-start marker, or a lone marker before a word of its own), the next one.
    Returns int64 arrays, one per sentence, as long as its `tokenizer.tokenize` ids (no EOS).
    """
    sentences = list(sentences)
    starts = []
    for first in range(0, len(sentences), _TOKENIZE_CHUNK):  # tf-text ops cost per call, and memory per string
        starts += tokenizer.tokenize_with_offsets(sentences[first : first + _TOKENIZE_CHUNK])[1].to_list()
    maps = []
    for sentence, piece_starts in zip(sentences, starts, strict=True):
        # The UTF-8 byte offset of each character offset, to compare word ends with the pieces' byte offsets.
        byte_offsets = np.cumsum([0] + [len(char.encode("utf-8", errors="surrogatepass")) for char in sentence])
        ends = [byte_offsets[match.end()] for match in _WORD.finditer(sentence)]
        words = np.searchsorted(np.asarray(ends, np.int64), np.asarray(piece_starts, np.int64), side="right")
        maps.append(np.minimum(words, max(len(ends) - 1, 0)) if ends else np.full(len(piece_starts), -1, np.int64))
    return maps


def target_word_maps(tokenizer, pieces: Sequence[Sequence[int]]) -> List[np.ndarray]:
    """For each id sequence (tokens, no BOS or EOS), the word of `tokenizer.detokenize(ids).split()` of each piece.

    Read from the detokenized prefixes (one detokenize call for all): piece k belongs to the last word of the
    text of pieces 0..k when that text ends in a character of it, else (the piece added only whitespace, or
    nothing) to the next word; a trailing piece with no word of its own (a last lone space marker) goes to the
    last word. Returns int64 arrays as long as the sequences.
    """
    prefixes = [list(ids[: k + 1]) for ids in pieces for k in range(len(ids))]
    texts = []
    if prefixes:
        ragged = tf.ragged.constant(prefixes, dtype=tf.int32, ragged_rank=1)
        texts = [text.decode("utf-8", errors="replace") for text in tokenizer.detokenize(ragged).numpy()]
    maps, position = [], 0
    for ids in pieces:
        words = np.empty(len(ids), np.int64)
        for k in range(len(ids)):
            text = texts[position + k]
            count = len(text.split())
            words[k] = count - 1 if text and not text[-1].isspace() else count
        last = len(texts[position + len(ids) - 1].split()) - 1 if len(ids) else -1
        maps.append(np.minimum(words, last) if last >= 0 else np.full(len(ids), -1, np.int64))
        position += len(ids)
    return maps
