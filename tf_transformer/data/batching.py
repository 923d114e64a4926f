"""Token-based batching: pairs of similar length share a batch, and a batch holds at most `batch_tokens` positions.

A pair's length is max(len(source_ids), len(target_input_ids)), EOS / BOS included. Lengths fall into
buckets [b[i-1], b[i]); a bucket whose longest pair has length L = b[i] - 1 gets batches of
batch_tokens // (2 * L) pairs, so a padded batch (source and target both at most L long) never has more than
batch_tokens positions. Narrow buckets keep padding low: width 1 up to `exact_up_to`, then growing by
`growth` (benchmarks/NOTES.md, "Figures moved out of docstrings", has the padding on Multi30k).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf


def bucket_boundaries(max_length: int, exact_up_to: int = 32, growth: float = 1.1) -> List[int]:
    """Upper-exclusive bucket boundaries covering lengths 1..max_length; the last is max_length + 1.

    Lengths 1..exact_up_to get a bucket each; above that each bucket is about `growth` times wider than
    the last (tensor2tensor's scheme), so there are few buckets even for long sequences.
    """
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}.")
    if growth <= 1.0:
        raise ValueError(f"growth must be > 1, got {growth}.")
    boundaries = list(range(2, min(exact_up_to, max_length) + 2))
    while boundaries[-1] < max_length + 1:
        boundaries.append(min(max(boundaries[-1] + 1, int(boundaries[-1] * growth)), max_length + 1))
    return boundaries


def bucket_batch_sizes(boundaries: Sequence[int], batch_tokens: int, batch_multiple: int = 1) -> List[int]:
    """Pairs per batch for each bucket of `boundaries`, plus one for the (empty) bucket past the last boundary.

    A bucket's batch size is batch_tokens // (2 * longest length in it), rounded down to a multiple of
    `batch_multiple` and at least `batch_multiple`. With `batch_multiple` = the number of replicas, every
    replica gets the same number of pairs: none idles, and Keras' per-replica loss average (weighted by
    pairs) equals the global token mean.
    """
    if batch_multiple < 1:
        raise ValueError(f"batch_multiple must be >= 1, got {batch_multiple}.")
    sizes = [
        max(batch_multiple, batch_tokens // (2 * (boundary - 1)) // batch_multiple * batch_multiple)
        for boundary in boundaries
    ]
    return sizes + [batch_multiple]


def pair_length(source_ids: tf.Tensor, target_input_ids: tf.Tensor, target_output_ids: tf.Tensor) -> tf.Tensor:
    """The bucketing length of one pair: the longer of its source and target sequences."""
    del target_output_ids  # as long as target_input_ids
    return tf.maximum(tf.size(source_ids), tf.size(target_input_ids))


def batch_by_tokens(
    dataset: tf.data.Dataset,
    batch_tokens: int,
    max_length: int,
    boundaries: Optional[Sequence[int]] = None,
    batch_multiple: int = 1,
) -> tf.data.Dataset:
    """Groups unbatched 1-D int32 (source_ids, target_input_ids, target_output_ids), none longer than
    `max_length`, into 0-padded batches (source [batch, source_len], target_in and target_out [batch, target_len]),
    each padded to its own longest sequence and emitted when its bucket fills (the partly filled ones last).

    Args:
        batch_tokens: the most positions (pairs * (padded source + padded target length)) of a batch; a
            ValueError if under 2 * max_length.
        boundaries: bucket boundaries; default `bucket_boundaries(max_length)`.
        batch_multiple: every full batch holds a multiple of this many pairs (the number of replicas).
    """
    if batch_tokens < 2 * max_length:
        raise ValueError(f"batch_tokens={batch_tokens} cannot hold one pair of max_length={max_length}.")
    boundaries = list(boundaries or bucket_boundaries(max_length))
    return dataset.bucket_by_sequence_length(
        element_length_func=pair_length,
        bucket_boundaries=boundaries,
        bucket_batch_sizes=bucket_batch_sizes(boundaries, batch_tokens, batch_multiple),
        padded_shapes=([None], [None], [None]),
        padding_values=(0, 0, 0),
        drop_remainder=False,
    )


class BatchReplay:
    """Replays `batch_by_tokens` on pair lengths fed in chunks, in order, without tensors or a copy of the lengths.

    `bucket_by_sequence_length` fills each bucket first come, first served and emits it when full, so a batch's
    padded size depends only on the lengths of its own pairs: per bucket, the replay keeps the count and the
    longest source and target of the batch being filled, whatever the corpus's size.
    """

    def __init__(self, batch_tokens: int, boundaries: Sequence[int], batch_multiple: int = 1):
        self.boundaries = np.asarray(boundaries)
        self.sizes = bucket_batch_sizes(boundaries, batch_tokens, batch_multiple)
        self.open: dict = {}  # bucket -> [pairs, longest source, longest target]
        self.batches = self.positions = self.real = 0

    def add(self, source_lengths: np.ndarray, target_lengths: np.ndarray) -> None:
        """Feeds the next pairs' lengths (EOS / BOS included), in corpus order."""
        source_lengths = np.asarray(source_lengths, np.int64)
        target_lengths = np.asarray(target_lengths, np.int64)
        self.real += int(source_lengths.sum() + target_lengths.sum())
        # bucket_by_sequence_length's rule: bucket i holds boundaries[i-1] <= length < boundaries[i].
        keys = np.searchsorted(self.boundaries, np.maximum(source_lengths, target_lengths), side="right")
        for key, source, target in zip(keys.tolist(), source_lengths.tolist(), target_lengths.tolist(), strict=True):
            batch = self.open.get(key)
            if batch is None:
                batch = self.open[key] = [0, 0, 0]
            batch[0] += 1
            batch[1] = max(batch[1], source)
            batch[2] = max(batch[2], target)
            if batch[0] == self.sizes[key]:
                self._emit(self.open.pop(key))

    def finish(self) -> Tuple[int, int, int]:
        """Flushes the partly filled buckets; (number of batches, padded positions, real tokens), source and
        target together."""
        for batch in self.open.values():
            self._emit(batch)
        self.open = {}
        return self.batches, self.positions, self.real

    def _emit(self, batch) -> None:
        self.batches += 1
        self.positions += batch[0] * (batch[1] + batch[2])


def simulate_batches(
    source_lengths: np.ndarray,
    target_lengths: np.ndarray,
    batch_tokens: int,
    boundaries: Sequence[int],
    batch_multiple: int = 1,
) -> Tuple[int, int, int]:
    """`(number of batches, padded positions, real tokens)`, source and target together, that `batch_by_tokens`
    gives pairs of these lengths (EOS / BOS included) in this order; computed without tensors."""
    replay = BatchReplay(batch_tokens, boundaries, batch_multiple)
    replay.add(source_lengths, target_lengths)
    return replay.finish()


def padding_fraction(dataset: tf.data.Dataset, num_batches: Optional[int] = None) -> float:
    """The fraction of padding (id 0) among all source and target positions of the first `num_batches` batches.

    Takes batches `((source, target_in), target_out)` or `(source, target_in, target_out)`; counts the source
    and target_out tensors (target_in is as long). None reads the whole dataset (it must be finite).
    """
    pads = positions = 0
    batches = dataset if num_batches is None else dataset.take(num_batches)
    for batch in batches.as_numpy_iterator():
        source, target = (batch[0][0], batch[1]) if isinstance(batch[0], tuple) else (batch[0], batch[2])
        for array in (source, target):
            positions += array.size
            pads += int(np.count_nonzero(array == 0))
    return pads / positions if positions else 0.0
