"""Sentences in, translations out: tokenize, batch by source tokens, decode in one traced graph, detokenize.

model, tokenizer, config = tf_transformer.checkpoints.load_translation_model("runs/multi30k_tiny")
results = translate_texts(model, tokenizer, ["A dog runs.", "Two men talk."], DecodingSettings(beam_size=4))
results[0]   # [("Ein Hund rennt.", -0.42)]: n_best (text, score) pairs, best first
"""

from __future__ import annotations

import logging
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tf_transformer.data.source_ids import source_token_limit, truncate_source
from tf_transformer.decoding import alignment
from tf_transformer.decoding.settings import PAPER, DecodingSettings, is_int, require_settings
from tf_transformer.decoding.translation import translate
from tf_transformer.errors import require_tensorflow_backend

logger = logging.getLogger("tf_transformer")

# Strings tokenized per op call (tf-text ops cost per call, so batches amortise that).
_TOKENIZE_CHUNK = 1024


class TextTranslator:
    """Translates lists of sentences with one decoder, traced once (see `translate_texts` for the rules).

    The decoder is a `tf.function` with `input_signature=[tf.TensorSpec([None, None], tf.int32)]`, traced
    when the translator is created (so a model that cannot decode fails at once) and reused for every batch
    shape and every call. Keep one translator to translate several inputs with the same settings.

    Args: `model`, `tokenizer`, `settings`, `batch_tokens` as in `translate_texts`; `with_alignments`: also give
    each hypothesis its word alignment (`tf_transformer.decoding.alignment`: one teacher-forced pass over the
    output, the cross-attention of `alignment_layer`, default the penultimate decoder layer, averaged over its
    heads). `XlaTextTranslator` (`tf_transformer.decoding.xla_batches`) is the same under XLA. Call it as
    `translator(sentences, progress=None, target_prefixes=None)`; `progress(done, total)` (sentences) is called
    after each batch. With alignments, each hypothesis is a `(text, score, links)` triple:
    `(i, j)` links of source word i (of `sentence.split()`) to target word j (of `text.split()`), one per target
    word, in target order (`[]` for an empty sentence); `alignment.format_alignment` writes them as `i-j ...`.

    Attributes:
        decode: the `tf.function`: int32 source ids `[batch, source_len]` -> (ids `[batch, n_best, T]`,
            scores `[batch, n_best]`), the `tf_transformer.decoding.translate` convention.
        decode_with_prefix: the same with a second argument, int32 target prefix ids `[batch, prefix_len]`
            (0-padded), traced the first time a call has a prefix.
        align: with `with_alignments`, the `tf.function` of `alignment.align_ids` (source ids, target ids), else
            None.
    """

    # Whether `decode` and `decode_with_prefix` compile under XLA (fixed-size caches); `XlaTextTranslator` sets it.
    jit_compile = False

    def __init__(
        self,
        model,
        tokenizer,
        settings: DecodingSettings = PAPER,
        *,
        batch_tokens: int = 4096,
        with_alignments: bool = False,
        alignment_layer: Optional[int] = None,
    ):
        require_tensorflow_backend("tft.decoding")
        require_settings(settings)
        if not is_int(batch_tokens) or batch_tokens < 1:
            raise ValueError(f"batch_tokens: must be an int >= 1, got {batch_tokens!r}. Fix: use e.g. 4096.")
        self.model = model
        self.tokenizer = tokenizer
        self.settings = settings
        self.n_best = settings.n_best
        self.batch_tokens = batch_tokens
        self.max_source_tokens = source_token_limit(model.config.max_length)

        def decode(source_ids, target_prefix_ids=None):
            result = translate(
                model, source_ids, settings, jit_compile=self.jit_compile, target_prefix_ids=target_prefix_ids
            )
            return result.ids, result.scores

        spec = tf.TensorSpec([None, None], tf.int32)
        self.decode = tf.function(decode, input_signature=[spec], autograph=False, jit_compile=self.jit_compile)
        self.decode_with_prefix = tf.function(
            decode, input_signature=[spec, spec], autograph=False, jit_compile=self.jit_compile
        )
        # Traced (under XLA not yet compiled) now: a model that cannot decode fails here, not mid-input.
        self.decode.get_concrete_function()
        self.align = None
        if with_alignments:
            alignment.alignment_layer(model.config.num_decoder_layers, alignment_layer)  # a bad layer fails here
            spec = tf.TensorSpec([None, None], tf.int32)
            self.align = tf.function(
                lambda source_ids, target_ids: alignment.align_ids(model, source_ids, target_ids, alignment_layer),
                input_signature=[spec, spec],
                autograph=False,
            )

    def __call__(
        self,
        sentences: Sequence[str],
        progress: Optional[Callable[[int, int], None]] = None,
        target_prefixes: Optional[Sequence[str]] = None,
    ) -> List[List[Tuple[str, float]]]:
        """Translations of `sentences` in input order; see `translate_texts`."""
        sentences = check_sentences(sentences)
        sources = self._encode(sentences)
        prefixes = None
        if target_prefixes is not None:
            prefixes = encode_prefixes(self.tokenizer, check_prefixes(target_prefixes, len(sentences)),
                                       self.model.config.max_length)  # fmt: skip
        source_words = alignment.source_word_maps(self.tokenizer, sentences) if self.align is not None else None

        def translate_batch(batch):
            width = len(sources[batch[0]])  # the longest: sorted by length, longest first
            source_ids = np.zeros((len(batch), width), np.int32)
            for row, index in enumerate(batch):
                source_ids[row, : len(sources[index])] = sources[index]
            ids, scores = self._decode_batch(source_ids, prefix_batch(prefixes, batch))
            texts = self.tokenizer.detokenize(tf.constant(ids.reshape(-1, ids.shape[-1]))).numpy()
            texts = texts.reshape(len(batch), self.n_best)
            results = [
                [(texts[row, k].decode("utf-8", errors="replace"), float(scores[row, k])) for k in range(self.n_best)]
                for row in range(len(batch))
            ]
            if self.align is not None:
                links = self._word_alignments(source_ids, ids, [source_words[index] for index in batch])
                results = [
                    [hypothesis + (links[row * self.n_best + k],) for k, hypothesis in enumerate(hypotheses)]
                    for row, hypotheses in enumerate(results)
                ]
            return results

        lengths = [len(source) for source in sources]
        empty = ("", 0.0) if self.align is None else ("", 0.0, [])
        return translate_in_batches(lengths, self.n_best, self.batch_tokens, translate_batch, progress, empty)

    def _decode_batch(self, source_ids: np.ndarray, prefix_ids: Optional[np.ndarray]):
        """NumPy `(ids [batch, n_best, T], scores [batch, n_best])` of one batch (prefix ids or None)."""
        if prefix_ids is None:
            ids, scores = self.decode(tf.constant(source_ids))
        else:
            ids, scores = self.decode_with_prefix(tf.constant(source_ids), tf.constant(prefix_ids))
        return ids.numpy(), scores.numpy()

    def _word_alignments(self, source_ids: np.ndarray, ids: np.ndarray, source_words: List[np.ndarray]):
        """Word links of each hypothesis, `[batch * n_best]` lists (`alignment.word_alignment`), from one
        teacher-forced pass over the decoded `ids` `[batch, n_best, T]`."""
        eos = self.model.config.eos_id
        targets = ids.reshape(-1, ids.shape[-1])
        repeated = np.repeat(source_ids, self.n_best, axis=0)
        weights = self.align(tf.constant(repeated), tf.constant(targets)).numpy()
        # The decoders end every output with one EOS: the pieces are what precedes it.
        pieces = [row[: np.flatnonzero(row == eos)[0]] if (row == eos).any() else row[row != 0] for row in targets]
        target_words = alignment.target_word_maps(self.tokenizer, pieces)
        links = []
        for number, (row_weights, words) in enumerate(zip(weights, target_words, strict=True)):
            # Source columns: the pieces the model saw (cut to max_length - 1), then the EOS, left out.
            seen = int((repeated[number] != 0).sum()) - 1
            by_piece = np.concatenate([source_words[number // self.n_best][:seen], [-1]])
            links.append(alignment.word_alignment(row_weights, by_piece, words))
        return links

    def _encode(self, sentences: List[str]) -> List[np.ndarray]:
        """Each sentence's source ids, as training builds them (`truncate_source`)."""
        config = self.model.config
        sources, truncated = encode_sentences(self.tokenizer, sentences, config.max_length, config.eos_id)
        warn_truncated(truncated, len(sentences), config.max_length)
        return sources


def encode_sentences(tokenizer, sentences: List[str], max_length: int, eos_id: int) -> Tuple[List[np.ndarray], int]:
    """`(ids, truncated)`: each sentence tokenized, cut to its first `max_length - 1` tokens and ended with
    `eos_id` (`truncate_source`: training's source rule), and how many were cut. Tokenized
    `_TOKENIZE_CHUNK` sentences a call (tf-text ops cost per call)."""
    encoded, truncated = [], 0
    limit = source_token_limit(max_length)
    for start in range(0, len(sentences), _TOKENIZE_CHUNK):
        tokens = tokenizer.tokenize(sentences[start : start + _TOKENIZE_CHUNK])
        flat = tokens.flat_values.numpy()
        ends = np.cumsum(tokens.row_lengths().numpy())
        for row in np.split(flat, ends[:-1]) if len(ends) else []:
            if len(row) > limit:
                truncated += 1
            encoded.append(truncate_source(row, max_length, eos_id))
    return encoded, truncated


def check_prefixes(target_prefixes: Sequence[str], count: int) -> List[str]:
    """`target_prefixes` as a list of str, one per sentence: a ValueError when the counts differ, a TypeError
    naming the first item that is not a str."""
    target_prefixes = list(target_prefixes)
    if len(target_prefixes) != count:
        raise ValueError(
            f"target_prefixes: {len(target_prefixes)} prefixes for {count} sentences. Fix: give one prefix per "
            'sentence, "" for none.'
        )
    for index, prefix in enumerate(target_prefixes):
        if not isinstance(prefix, str):
            raise TypeError(f"target_prefixes[{index}]: expected a str, got {type(prefix).__name__}.")
    return target_prefixes


def encode_prefixes(tokenizer, target_prefixes: List[str], max_length: int) -> List[np.ndarray]:
    """Each prefix's target ids, without EOS, cut to its first `max_length - 1` tokens (room for the EOS; a
    warning counts the cut ones); an empty or blank prefix gives no ids."""
    encoded, truncated = [], 0
    limit = source_token_limit(max_length)
    for start in range(0, len(target_prefixes), _TOKENIZE_CHUNK):
        tokens = tokenizer.tokenize(target_prefixes[start : start + _TOKENIZE_CHUNK])
        flat = tokens.flat_values.numpy().astype(np.int32)
        ends = np.cumsum(tokens.row_lengths().numpy())
        for row in np.split(flat, ends[:-1]) if len(ends) else []:
            truncated += len(row) > limit
            encoded.append(row[:limit])
    if truncated:
        logger.warning("%d target prefixes have more than %d tokens: cut to their first %d.", truncated, limit, limit)
    return encoded


def prefix_batch(prefixes: Optional[List[np.ndarray]], batch: List[int]) -> Optional[np.ndarray]:
    """int32 `[len(batch), longest]`, the prefixes of the sentences `batch` 0-padded, or None when none of them
    has one (the decoder without prefixes then runs)."""
    if prefixes is None:
        return None
    width = max(len(prefixes[index]) for index in batch)
    if width == 0:
        return None
    prefix_ids = np.zeros((len(batch), width), np.int32)
    for row, index in enumerate(batch):
        prefix_ids[row, : len(prefixes[index])] = prefixes[index]
    return prefix_ids


def check_sentences(sentences: Sequence[str]) -> List[str]:
    """`sentences` as a list, with a TypeError naming the first item that is not a str."""
    sentences = list(sentences)
    for index, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(f"sentences[{index}]: expected a str, got {type(sentence).__name__}.")
    return sentences


def translate_in_batches(
    lengths: Sequence[int],
    n_best: int,
    batch_tokens: int,
    translate_batch: Callable[[List[int]], List[List[Tuple[str, float]]]],
    progress: Optional[Callable[[int, int], None]] = None,
    empty: Tuple = ("", 0.0),
) -> List[List[Tuple[str, float]]]:
    """The batching shared by `TextTranslator` and translating through a SavedModel.

    `lengths` are the source lengths the model sees, EOS included: a sentence of length 1 has no tokens and
    gets `n_best` `empty` hypotheses (default ("", 0.0) pairs) without decoding. The others go to
    `translate_batch(indices)` in the batches of `batch_by_tokens`, which returns their `n_best` (text, score)
    lists in the same order.
    `progress(done, total)` is called after the empty sentences and after each batch.
    """
    total = len(lengths)
    results: List[Optional[List[Tuple[str, float]]]] = [None] * total
    pending = []
    for index, length in enumerate(lengths):
        if length == 1:  # only the EOS
            results[index] = [empty] * n_best
        else:
            pending.append(index)
    done = total - len(pending)
    if progress is not None and done:
        progress(done, total)
    for batch in batch_by_tokens(pending, lengths, batch_tokens):
        for index, hypotheses in zip(batch, translate_batch(batch), strict=True):
            results[index] = hypotheses
        done += len(batch)
        if progress is not None:
            progress(done, total)
    return results


def warn_truncated(truncated: int, total: int, max_length: int) -> None:
    """The warning, on the "tf_transformer" logger, that `truncated` of `total` sentences were cut to the first
    `max_length - 1` tokens (nothing when none were)."""
    if truncated:
        logger.warning(
            "%d of %d sentences have more than %d tokens (the model's max_length %d, less the EOS): "
            "translated from their first %d tokens.",
            truncated, total, max_length - 1, max_length, max_length - 1,
        )  # fmt: skip


def batch_by_tokens(pending: Sequence[int], lengths: Sequence[int], batch_tokens: int) -> List[List[int]]:
    """The indices `pending` (into `lengths`, source lengths with the EOS) sorted longest first (input order
    among equals) and cut into batches of at most `batch_tokens` padded source tokens, at least one sentence
    each (see `translate_in_batches`)."""
    order = sorted(pending, key=lambda index: (-lengths[index], index))
    batches, batch = [], []
    for index in order:
        width = lengths[batch[0]] if batch else lengths[index]
        if batch and (len(batch) + 1) * width > batch_tokens:
            batches.append(batch)
            batch = []
        batch.append(index)
    if batch:
        batches.append(batch)
    return batches


def format_results(results: List[List[Tuple[str, float]]], scored: bool) -> List[str]:
    """Output lines of translation results: the best translation of each sentence, or with `scored` every
    hypothesis as `i ||| text ||| score` (i: the 0-based sentence number; the n-best format). Hypotheses with
    word alignments (`with_alignments`: (text, score, links)) get ` ||| i-j i-j ...` appended to each line."""

    def aligned(line, hypothesis):
        return line if len(hypothesis) == 2 else f"{line} ||| {alignment.format_alignment(hypothesis[2])}"

    if not scored:
        return [aligned(hypotheses[0][0], hypotheses[0]) for hypotheses in results]
    return [
        aligned(f"{i} ||| {hypothesis[0]} ||| {hypothesis[1]:.6f}", hypothesis)
        for i, hypotheses in enumerate(results)
        for hypothesis in hypotheses
    ]


def translate_texts(
    model,
    tokenizer,
    sentences: Sequence[str],
    settings: DecodingSettings = PAPER,
    *,
    batch_tokens: int = 4096,
    target_prefixes: Optional[Sequence[str]] = None,
) -> List[List[Tuple[str, float]]]:
    """Translates sentences with a trained `Transformer` and its `Tokenizer`: one call of a `TextTranslator`
    (make one to translate several inputs, to report progress, or for word alignments).

    Each sentence is tokenized and gets an EOS, as in training; one of more than `config.max_length - 1` tokens
    is cut to its first `max_length - 1` (a warning counts them). A sentence without tokens (empty or blank) is
    not decoded: it gets `n_best` empty translations with score 0.0.

    Args:
        model: a `Transformer`; tokenizer: its `Tokenizer`.
        sentences: str sentences, one per translation.
        settings: a `DecodingSettings`, as `translate` takes it (default `PAPER`).
        batch_tokens: source positions per batch, padding included (sentences are batched by length; a longer
            sentence gets a batch of its own).
        target_prefixes: None, or one str per sentence ("" for none): each translation starts with its prefix's
            tokens (forced, as CTranslate2's target_prefix; counted in the score; an empty sentence still gets "").
            The prefix is tokenized and cut as a sentence is, so the text starts with it up to the detokenizer's
            spacing.

    Returns:
        One list per sentence, in input order, of `n_best` `(text, score)` pairs, best first; scores as
        `translate` gives them.

    Raises:
        ValueError: a bad batch_tokens. TypeError: `settings` is not a `DecodingSettings`,
            or a sentence is not a str.

    Example:

        model, tokenizer, _ = tf_transformer.checkpoints.load_translation_model("runs/multi30k")
        results = translate_texts(model, tokenizer, ["A dog runs."], DecodingSettings(beam_size=5, n_best=2))
        results[0]  # [("Ein Hund rennt.", -0.42), (...)]: n_best (text, score) pairs, best first
    """
    translator = TextTranslator(model, tokenizer, settings, batch_tokens=batch_tokens)
    return translator(sentences, target_prefixes=target_prefixes)
