"""Scoring: the log-probability a model gives a given target for a source, teacher-forced (no search).

    model, tokenizer, _ = tf_transformer.checkpoints.load_translation_model("runs/multi30k_tiny")
    results = score_texts(model, tokenizer, ["A dog runs."], ["Ein Hund rennt."])
    results[0]            # PairScore(log_prob=-4.2109, num_tokens=5)
    results[0].average    # -0.8422, the log-probability per token

What is scored: the natural-log probability of the target's tokens and the final EOS given the source, as
training sees a pair (source = tokens + EOS, decoder input = BOS + tokens, labels = tokens + EOS), normalised
over the whole output vocabulary: exactly the log-probabilities the decoders add up. Beam search forbids
padding (always) and EOS (before `min_decode_length`) without renormalising over the tokens left: its
`best_allowed_tokens` subtracts the log-sum-exp of every logit, padding and EOS included. So greedy search's
and sampling's scores of their own outputs equal `score_ids` of those outputs, and beam search's equal
`score_ids` divided by the length penalty ((5 + num_tokens) / 6) ** alpha (with `length_penalty=0`, equal), up to
float rounding (the decoders run the cached decoder a step at a time, scoring runs the full pass once).
"""

from __future__ import annotations

import logging
from typing import Callable, List, NamedTuple, Optional, Sequence

import numpy as np
import tensorflow as tf

from tf_transformer.decoding.constraints import as_source_ids
from tf_transformer.decoding.settings import is_int
from tf_transformer.decoding.text import batch_by_tokens, check_sentences, encode_sentences
from tf_transformer.errors import require_tensorflow_backend

logger = logging.getLogger("tf_transformer")


class ScoreResult(NamedTuple):
    """What `score_ids` returns.

    log_probs: float32 `[batch]`, each target's total log-probability (its tokens, EOS included).
    num_tokens: int32 `[batch]`, the tokens scored (the non-padding target ids, EOS included).
    token_log_probs: float32 `[batch, target_len]`, each token's log-probability, 0 at padding.
    """

    log_probs: tf.Tensor
    num_tokens: tf.Tensor
    token_log_probs: tf.Tensor


class PairScore(NamedTuple):
    """One pair's score from `score_texts`: `log_prob` (natural log, the target's tokens and its EOS) and
    `num_tokens` (EOS included, so at least 1)."""

    log_prob: float
    num_tokens: int

    @property
    def average(self) -> float:
        """The log-probability per token, `log_prob / num_tokens`."""
        return self.log_prob / self.num_tokens


def score_ids(model, source_ids, target_ids) -> ScoreResult:
    """The log-probabilities of `target_ids` given `source_ids` under `model`, in one teacher-forced pass.

    Args:
        model: a `Transformer` (or anything called as `model((source_ids, decoder_input_ids), training=False)`
            for float logits `[batch, target_len, vocab]`, with a `config`).
        source_ids: int `[batch, source_len]`, 0 = padding: tokens + EOS, as translation builds them.
        target_ids: int `[batch, target_len]`, target_len <= `config.max_length`, 0 = padding: tokens + EOS (a
            row of `translate(...).ids` as it is). Every non-padding id is scored, EOS or not.

    Returns:
        `ScoreResult(log_probs [batch], num_tokens [batch], token_log_probs [batch, target_len])`: natural logs
        over the whole output vocabulary, the sums the decoders report. Ids of another rank raise a ValueError.
    """
    require_tensorflow_backend("tft.decoding")
    config = model.config
    source_ids = as_source_ids(source_ids)
    target_ids = as_source_ids(target_ids, "target_ids", "target_len")
    bos = tf.fill([tf.shape(target_ids)[0], 1], tf.constant(config.bos_id, tf.int32))
    # The decoder input is BOS + the target shifted right; what follows a row's EOS is masked out below and,
    # by the causal mask, changes nothing before it.
    decoder_input = tf.concat([bos, target_ids[:, :-1]], axis=1)
    logits = tf.cast(model((source_ids, decoder_input), training=False), tf.float32)
    # log_softmax(logits)[target] without a second [batch, target_len, vocab] tensor: the fused kernel.
    token_log_probs = -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=target_ids, logits=logits)
    real = tf.not_equal(target_ids, config.pad_id)
    token_log_probs = tf.where(real, token_log_probs, 0.0)
    return ScoreResult(
        tf.reduce_sum(token_log_probs, axis=1), tf.reduce_sum(tf.cast(real, tf.int32), axis=1), token_log_probs
    )


class TextScorer:
    """Scores lists of sentence pairs with one `score_ids` function, traced once (see `score_texts` for the
    rules). Keep one scorer to score several inputs without tracing again.

    Attributes:
        score: the `tf.function`: int32 source ids `[batch, source_len]` and target ids `[batch, target_len]`
            -> (log_probs `[batch]`, num_tokens `[batch]`), as `score_ids` gives them.
    """

    def __init__(self, model, tokenizer, batch_tokens: int = 4096):
        require_tensorflow_backend("tft.decoding")
        if not is_int(batch_tokens) or batch_tokens < 1:
            raise ValueError(f"batch_tokens: must be an int >= 1, got {batch_tokens!r}. Fix: use e.g. 4096.")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_tokens = batch_tokens

        def score(source_ids, target_ids):
            result = score_ids(model, source_ids, target_ids)
            return result.log_probs, result.num_tokens

        spec = tf.TensorSpec([None, None], tf.int32)
        self.score = tf.function(score, input_signature=[spec, spec], autograph=False)

    def __call__(
        self,
        sources: Sequence[str],
        targets: Sequence[str],
        progress: Optional[Callable[[int, int], None]] = None,
    ) -> List[PairScore]:
        """The pairs' scores in input order; see `score_texts`."""
        sources, targets = check_sentences(sources), check_sentences(targets)
        if len(sources) != len(targets):
            raise ValueError(
                f"sources and targets: {len(sources)} sources but {len(targets)} targets. Fix: give one target per "
                "source."
            )
        config = self.model.config
        source_ids = self._encode(sources, "sources")
        target_ids = self._encode(targets, "targets")
        total = len(sources)
        results: List[Optional[PairScore]] = [None] * total
        lengths = [max(len(source), len(target)) for source, target in zip(source_ids, target_ids, strict=True)]
        done = 0
        for batch in batch_by_tokens(range(total), lengths, self.batch_tokens):
            source_batch = _pad([source_ids[index] for index in batch], config.pad_id)
            target_batch = _pad([target_ids[index] for index in batch], config.pad_id)
            log_probs, num_tokens = self.score(tf.constant(source_batch), tf.constant(target_batch))
            for index, log_prob, count in zip(batch, log_probs.numpy(), num_tokens.numpy(), strict=True):
                results[index] = PairScore(float(log_prob), int(count))
            done += len(batch)
            if progress is not None:
                progress(done, total)
        return results

    def _encode(self, sentences: List[str], side: str) -> List[np.ndarray]:
        """Each sentence's ids, tokens + EOS, cut as translation cuts sources (a warning counts them)."""
        config = self.model.config
        ids, cut = encode_sentences(self.tokenizer, sentences, config.max_length, config.eos_id)
        if cut:
            logger.warning(
                "%d of %d %s have more than %d tokens (the model's max_length %d, less the EOS): scored from their "
                "first %d tokens.",
                cut, len(sentences), side, config.max_length - 1, config.max_length, config.max_length - 1,
            )  # fmt: skip
        return ids


def score_texts(
    model,
    tokenizer,
    sources: Sequence[str],
    targets: Sequence[str],
    batch_tokens: int = 4096,
    progress: Optional[Callable[[int, int], None]] = None,
) -> List[PairScore]:
    """Scores each (source, target) sentence pair with a trained `Transformer` and its `Tokenizer`.

    Both sides are tokenized and get an EOS; a side longer than `config.max_length - 1` tokens is cut to its first
    `max_length - 1` (a warning counts them), as no longer output fits the model. An empty target is scored as EOS
    alone (log P(EOS | source): the empty translation), an empty source as [EOS], what the model sees for it
    (`translate_texts` gives "" with score 0.0 for it, without decoding).

    Args:
        model: a `Transformer`; tokenizer: its `Tokenizer`.
        sources, targets: str sentences, one target per source.
        batch_tokens: positions per batch of the longer side, padding included (pairs are batched by length).
        progress: called as `progress(done, total)` (pairs) after each batch.

    Returns:
        One `PairScore(log_prob, num_tokens)` per pair, in input order; `.average` is the per-token value.

    Raises:
        ValueError: different numbers of sources and targets, or batch_tokens < 1.
        TypeError: a sentence that is not a str.

    Example:
        model, tokenizer, _ = load_translation_model("runs/multi30k")
        [pair] = score_texts(model, tokenizer, ["Ein Hund läuft."], ["A dog runs."])
        pair.log_prob, pair.num_tokens, pair.average  # natural log; tokens + EOS; log_prob / num_tokens
    """
    return TextScorer(model, tokenizer, batch_tokens=batch_tokens)(sources, targets, progress=progress)


def _pad(rows: List[np.ndarray], pad_id: int) -> np.ndarray:
    """int32 `[len(rows), longest]`, each row followed by `pad_id`s."""
    padded = np.full((len(rows), max(len(row) for row in rows)), pad_id, np.int32)
    for number, row in enumerate(rows):
        padded[number, : len(row)] = row
    return padded


def format_scores(results: Sequence[PairScore]) -> List[str]:
    """`tft-score`'s lines: `log_prob<TAB>average<TAB>num_tokens` per pair, 6 decimals."""
    return [f"{result.log_prob:.6f}\t{result.average:.6f}\t{result.num_tokens}" for result in results]
