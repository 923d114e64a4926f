"""The training input pipeline: sentence pairs -> subword ids -> token-bucketed, padded batches; and its report.

make_dataset yields `((source_ids, target_input_ids), target_output_ids)`, int32, 0-padded, which is what
`Transformer` and `model.fit` take:

    source_ids        = tokens(source) + [EOS]
    target_input_ids  = [BOS] + tokens(target)
    target_output_ids = tokens(target) + [EOS]
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
from typing import Optional, Union

import numpy as np
import tensorflow as tf

from tf_transformer.data.batching import BatchReplay, batch_by_tokens, bucket_boundaries
from tf_transformer.data.config import DataConfig
from tf_transformer.data.corpus import ParallelCorpus, both_non_empty, clean_batch
from tf_transformer.data.dataset_options import package_options
from tf_transformer.data.source_ids import end_with_eos, source_token_limit, start_with_bos
from tf_transformer.data.sources import open_corpus
from tf_transformer.data.tokenizer import BOS_ID, EOS_ID, Tokenizer
from tf_transformer.files import write_atomically

# Strings tokenized per op call: tf-text ops cost per call, so batches amortise that.
_TOKENIZE_BATCH = 256
# The map functions here branch on Python values only, so autograph's conversion of them (and of everything they
# call: parsing and rewriting each function's source) is left out; it costs seconds of CPU in every new process.
_graph_only = tf.autograph.experimental.do_not_convert
# Epoch e of a run with seed s is shuffled with seed s * stride + e: distinct for every epoch of every seed.
_EPOCH_SEED_STRIDE = 1_000_003
_EPOCH_GRAPH_SEED = 1


def encode_batch(tokenizer: Tokenizer, max_length: int, long_pairs: str = "drop"):
    """A tf.data map function: a batch of (source, target) strings -> ragged (source, target_in, target_out).

    Pairs with a side longer than `max_length` (EOS / BOS included) are removed ("drop") or cut to fit
    ("truncate": the first max_length - 1 tokens, then EOS: `tf_transformer.data.source_ids.truncate_source_ragged`).

    The EOS and BOS are the tokenizer's fixed ids (`vocab.EOS_ID`, `vocab.BOS_ID`), not a model config's.
    """
    limit = source_token_limit(max_length)  # room for the EOS (source, target_out) or BOS (target_in)

    @_graph_only
    def encode(source: tf.Tensor, target: tf.Tensor):
        source_tokens, target_tokens = tokenizer.tokenize(source), tokenizer.tokenize(target)
        if long_pairs == "drop":
            fits = (source_tokens.row_lengths() <= limit) & (target_tokens.row_lengths() <= limit)
            source_tokens, target_tokens = _keep_rows(source_tokens, fits), _keep_rows(target_tokens, fits)
        else:
            source_tokens, target_tokens = source_tokens[:, :limit], target_tokens[:, :limit]
        # Rows fit now (dropped or cut above), so this is the source rule `truncate_source_ragged` (and the
        # same rule for target_out).
        return (
            end_with_eos(source_tokens, EOS_ID),
            start_with_bos(target_tokens, BOS_ID),
            end_with_eos(target_tokens, EOS_ID),
        )

    return encode


def _keep_rows(tokens: tf.RaggedTensor, keep: tf.Tensor) -> tf.RaggedTensor:
    """The rows of `tokens` where `keep` `[batch]` is true (a gather: one kernel, not boolean_mask's ~150 ops)."""
    return tf.gather(tokens, tf.where(keep)[:, 0])


def make_dataset(
    data_config: DataConfig,
    tokenizer: Tokenizer,
    split: str = "train",
    training: bool = True,
    *,
    repeat: Optional[bool] = None,
    corpus: Optional[ParallelCorpus] = None,
    batch_multiple: Optional[int] = None,
    skip_batches: int = 0,
) -> tf.data.Dataset:
    """Token-batched `((source_ids, target_input_ids), target_output_ids)` int32 batches of one split (the
    module docstring has the layout), each tensor padded with 0 to its batch's longest row.

    Pairs are stripped, empty ones skipped, over-long ones dropped or truncated (`long_pairs`), and bucketed
    into batches of at most `batch_tokens` source + target positions (`batch_by_tokens`). The corpus is opened
    and its files validated now, so bad input fails here, not in the first training step.

    Order: `training=False` gives one pass in a fixed order. Training repeats the corpus, each epoch shuffled
    (`shuffle_buffer` > 0) with a seed of its own derived from the config's seed. With `deterministic=True`
    every run and every iterator get the same batches (seed `seed`, or 0), so `skip_batches=n` resumes the
    stream at its batch n; otherwise the parallel map may reorder pairs, and without a seed each call draws one.

    Args:
        data_config: the data, batching and length settings.
        tokenizer: the vocabulary (see `build_vocabulary`, `Tokenizer.from_directory`).
        split: "train", "valid" or "test".
        training: shuffle and repeat.
        repeat: overrides repeating; `repeat=False` with `training=True` gives one shuffled epoch.
        corpus: an already opened corpus of `split` (default: `open_corpus(data_config, split, training)`).
        batch_multiple: full batches hold a multiple of this many pairs (default: the config's
            `batch_multiple`); the trainer passes a multiple of the number of replicas so that a distribution
            strategy splits every batch evenly.
        skip_batches: leave out the first this many batches (a resumed run's input position,
            `tf_transformer.training.resume_state`): the stream then goes on where an earlier run stopped. The
            skipped batches are still made (tokenized and bucketed), not trained on.

    Raises:
        DataError: the split's data is missing or invalid.
        ValueError: `skip_batches` is not an int >= 0.

    Example:
        data_config = DataConfig(dataset="multi30k", data_dir="../shared/data/multi30k")
        train = make_dataset(data_config, Tokenizer.from_directory("runs/multi30k/vocab"))
    """
    config = data_config
    if isinstance(skip_batches, bool) or not isinstance(skip_batches, int) or skip_batches < 0:
        raise ValueError(f"skip_batches must be an int >= 0, got {skip_batches!r}.")
    corpus = corpus or open_corpus(config, split, training)
    repeat = training if repeat is None else repeat
    encode = encode_batch(tokenizer, config.max_length, config.long_pairs)

    def tokenized(pairs: tf.data.Dataset) -> tf.data.Dataset:
        # Cleaning (strip, skip empty pairs) and tokenizing whole batches: tf.data and tf-text cost per call.
        pairs = pairs.batch(_TOKENIZE_BATCH).map(
            _graph_only(lambda source, target: encode(*clean_batch(source, target))),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        # A 1-D element of an unbatched ragged batch has a RaggedTensorSpec; passing it through a map makes it
        # the plain tensor padded_batch needs.
        return pairs.unbatch().map(_graph_only(lambda source, target_in, target_out: (source, target_in, target_out)))

    shuffle = training and config.shuffle_buffer > 0
    raw = corpus.raw_dataset()
    if repeat and not _has_usable_pair(tokenized(raw)):
        repeat = False  # nothing to repeat: the stream ends instead of looking for a pair forever
    if shuffle or repeat:
        # Epoch e is shuffled by seed (seed, e), not reshuffled per iteration: the stream is then the same from
        # every new iterator (Keras' fit opens one to peek at a batch) and in every process, so a resumed run can
        # skip to where it stopped. Strings shuffle more cheaply than ragged ids.
        base_seed = config.shuffle_seed if config.shuffle_seed is not None else random.SystemRandom().randrange(1 << 31)
        epochs = tf.data.Dataset.counter() if repeat else tf.data.Dataset.range(1)

        @_graph_only
        def epoch_pairs(epoch):
            pairs = raw
            if shuffle:
                # A graph seed of its own: the order then depends on the data config's seed alone. It also avoids
                # a TensorFlow failure: under a global seed of 0 (`keras.utils.set_random_seed(0)`), `get_seed`
                # needs the truth value of the op seed, a tensor here.
                tf.random.set_seed(_EPOCH_GRAPH_SEED)
                pairs = pairs.shuffle(
                    config.shuffle_buffer, seed=base_seed * _EPOCH_SEED_STRIDE + epoch, reshuffle_each_iteration=False
                )
            return pairs

        # Repeating before bucketing lets buckets fill across epoch ends instead of flushing small batches.
        dataset = tokenized(epochs.flat_map(epoch_pairs))
    else:
        dataset = tokenized(raw)
    multiple = config.batch_multiple if batch_multiple is None else batch_multiple
    dataset = batch_by_tokens(dataset, config.batch_tokens, config.max_length, batch_multiple=multiple)
    if skip_batches:
        dataset = dataset.skip(skip_batches)
    dataset = dataset.map(_graph_only(lambda source, target_in, target_out: ((source, target_in), target_out)))
    dataset = dataset.prefetch(tf.data.AUTOTUNE)
    return package_options(dataset, deterministic=bool(config.deterministic or not training))


def _has_usable_pair(dataset: tf.data.Dataset) -> bool:
    """Whether a tokenized corpus keeps any pair (read up to the first one: the whole corpus if it keeps none)."""
    return bool(list(package_options(dataset.take(1)).as_numpy_iterator()))


@dataclasses.dataclass(frozen=True)
class DataReport:
    """What the pipeline does to one split, from one cheap pass over it (`scan_lengths`).

    Lengths count EOS / BOS (a sentence of n tokens has length n + 1 on each side).

    Attributes:
        corpus, split: what was read.
        pairs_read: lines (pairs) read, empty ones included.
        empty_skipped: pairs left out because a side was empty (after stripping whitespace).
        kept: pairs that reach the batches.
        dropped: over-long pairs left out (long_pairs "drop").
        truncated: over-long pairs cut to max_length (long_pairs "truncate").
        max_length, long_pairs, batch_tokens: the settings the report is for.
        source_tokens, target_tokens: real (non-pad) positions of the kept pairs, EOS / BOS included.
        longest_source, longest_target: the longest lengths read, before dropping or truncating.
        mean_source_length, mean_target_length: over the kept pairs, after truncating.
        num_batches: batches in one pass in corpus order (`make_dataset(..., training=False)`).
        padding_fraction: padding among all source + target positions of those batches; shuffled
            training batches have about the same.
    """

    corpus: str
    split: str
    pairs_read: int
    empty_skipped: int
    kept: int
    dropped: int
    truncated: int
    max_length: int
    long_pairs: str
    batch_tokens: int
    source_tokens: int
    target_tokens: int
    longest_source: int
    longest_target: int
    mean_source_length: float
    mean_target_length: float
    num_batches: int
    padding_fraction: float

    def to_dict(self) -> dict:
        """The report as a JSON-ready dict."""
        return dataclasses.asdict(self)

    def to_json(self, path: Union[str, os.PathLike, None] = None) -> str:
        """The report as JSON text; with `path`, also written there."""
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        if path is not None:
            write_atomically(path, text)
        return text

    @classmethod
    def from_json(cls, path: Union[str, os.PathLike]) -> "DataReport":
        """A report written by `to_json`."""
        with open(path, encoding="utf-8") as handle:
            return cls(**json.load(handle))

    def summary(self) -> str:
        """One line for a log."""
        over = f"{self.dropped} dropped" if self.long_pairs == "drop" else f"{self.truncated} truncated"
        return (
            f"{self.corpus} [{self.split}]: {self.pairs_read} pairs read, {self.empty_skipped} empty skipped, "
            f"{self.kept} kept, {over} (max_length {self.max_length}); {self.num_batches} batches of <= "
            f"{self.batch_tokens} tokens, {100 * self.padding_fraction:.1f}% padding"
        )


def scan_lengths(
    data_config: DataConfig,
    tokenizer: Tokenizer,
    split: str = "train",
    *,
    corpus: Optional[ParallelCorpus] = None,
) -> DataReport:
    """Tokenizes every pair of a split once and reports what `make_dataset` will make of them.

    Counts empty, kept, dropped and truncated pairs, and replays the token batching on the lengths (in
    corpus order, exactly what `make_dataset(..., training=False)` batches) for the padding fraction. Costs
    one tokenization pass (benchmarks/NOTES.md, "Figures moved out of docstrings").
    """
    config = data_config
    corpus = corpus or open_corpus(config, split)

    @_graph_only
    def lengths(source, target):
        source, target = tf.strings.strip(source), tf.strings.strip(target)
        return (
            both_non_empty(source, target),
            tokenizer.tokenize(source).row_lengths(),
            tokenizer.tokenize(target).row_lengths(),
        )

    dataset = package_options(corpus.raw_dataset().batch(1024).map(lengths, num_parallel_calls=tf.data.AUTOTUNE))
    # Streamed: counts, sums and the batch replay's open buckets only, so memory does not grow with the corpus.
    replay = BatchReplay(config.batch_tokens, bucket_boundaries(config.max_length), config.batch_multiple)
    pairs_read = non_empty_pairs = kept = too_long_pairs = 0
    kept_source_tokens = kept_target_tokens = longest_source = longest_target = 0
    for present, source, target in dataset.as_numpy_iterator():
        pairs_read += int(present.size)
        # + 1: the EOS of source and target_out, the BOS of target_in.
        source, target = source[present] + 1, target[present] + 1
        non_empty_pairs += int(source.size)
        if not source.size:
            continue
        longest_source, longest_target = max(longest_source, int(source.max())), max(longest_target, int(target.max()))
        too_long = (source > config.max_length) | (target > config.max_length)
        too_long_pairs += int(too_long.sum())
        if config.long_pairs == "drop":
            source, target = source[~too_long], target[~too_long]
        else:
            source, target = np.minimum(source, config.max_length), np.minimum(target, config.max_length)
        kept += int(source.size)
        kept_source_tokens += int(source.sum())
        kept_target_tokens += int(target.sum())
        replay.add(source, target)
    num_batches, positions, real = replay.finish()
    return DataReport(
        corpus=corpus.description,
        split=split,
        pairs_read=pairs_read,
        empty_skipped=pairs_read - non_empty_pairs,
        kept=kept,
        dropped=too_long_pairs if config.long_pairs == "drop" else 0,
        truncated=too_long_pairs if config.long_pairs == "truncate" else 0,
        max_length=config.max_length,
        long_pairs=config.long_pairs,
        batch_tokens=config.batch_tokens,
        source_tokens=kept_source_tokens,
        target_tokens=kept_target_tokens,
        longest_source=longest_source,
        longest_target=longest_target,
        mean_source_length=kept_source_tokens / kept if kept else 0.0,
        mean_target_length=kept_target_tokens / kept if kept else 0.0,
        num_batches=num_batches,
        padding_fraction=(positions - real) / positions if positions else 0.0,
    )
