"""`ParallelCorpus`, the interface every source of sentence pairs implements (`open_corpus` is in sources.py)."""

from __future__ import annotations

from typing import Iterator, Optional, Tuple

import tensorflow as tf

from tf_transformer.data.dataset_options import package_options

# The whitespace tf.strings.strip removes; Python's str.strip would also remove e.g. U+00A0, and the Python
# and tf.data views of a corpus must agree pair for pair.
ASCII_WHITESPACE = " \t\n\r\f\v"


class ParallelCorpus:
    """Aligned (source, target) sentence pairs of one split of one corpus.

    `as_dataset` and `pairs` yield the same pairs in the same order: each side stripped of leading and
    trailing ASCII whitespace, with the pairs where either side is then empty left out. `raw_dataset` is the
    cheap view the pipeline reads, cleaned there in batches with `clean_batch` (tf.data costs per element).

    Subclasses implement `raw_dataset` and may override `pairs` with a faster Python reader.

    Attributes:
        description: a short human name for messages and reports, e.g. "multi30k en-de train".
        num_lines: pairs in the split, empty ones included, when known without a pass over the data
            (files count them on opening); else None.
    """

    description: str = "corpus"
    num_lines: Optional[int] = None

    def raw_dataset(self) -> tf.data.Dataset:
        """Every pair as scalar `tf.string` (source, target) as read: not stripped, empty pairs still in."""
        raise NotImplementedError

    def as_dataset(self) -> tf.data.Dataset:
        """The pairs as scalar `tf.string` (source, target), stripped, empty pairs left out."""
        dataset = self.raw_dataset().map(lambda source, target: (tf.strings.strip(source), tf.strings.strip(target)))
        return dataset.filter(both_non_empty)

    def pairs(self) -> Iterator[Tuple[str, str]]:
        """The pairs as Python strings, stripped, empty pairs left out."""
        for source, target in package_options(self.as_dataset()).as_numpy_iterator():
            yield source.decode("utf-8"), target.decode("utf-8")


def both_non_empty(source: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """True where neither side of a (stripped) pair is the empty string; works on scalars and batches."""
    return tf.logical_and(tf.strings.length(source) > 0, tf.strings.length(target) > 0)


def clean_batch(source: tf.Tensor, target: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """Strips a batch of [batch] string pairs and removes the pairs with an empty side: `as_dataset`, batched."""
    source, target = tf.strings.strip(source), tf.strings.strip(target)
    keep = both_non_empty(source, target)
    return tf.boolean_mask(source, keep), tf.boolean_mask(target, keep)
