"""The `tf.data.Options` every dataset the package iterates, or hands to `fit`, carries: no autotuning thread.

Why: in TensorFlow 2.21 tf.data's autotuning thread can miss its iterator's cancellation. The cancellation wakes
`Model::OptimizeLoop` before the `CancellationManager` counts as cancelled, so the thread sleeps out the rest of its
optimization period (which doubles up to 60 s) while the iterator's destructor waits for it, and the Python thread
freeing the iterator hangs that long (benchmarks/NOTES.md entry 40: 7 of 24 long-lived iterators took 22-60 s to
free on 2 busy cores; none without the thread). Without it, `num_parallel_calls=AUTOTUNE` runs as many calls as
the CPU has cores and `prefetch(AUTOTUNE)` still grows its buffer on demand (tf.data's prefetch autotuner needs no
thread): the training pipeline fed Multi30k batches 1.25-1.4x faster on 2 cores.
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf


def package_options(dataset: tf.data.Dataset, deterministic: Optional[bool] = None) -> tf.data.Dataset:
    """`dataset` without tf.data's autotuning thread, and in `deterministic` order when that is given (None: the
    dataset's own setting)."""
    options = tf.data.Options()
    options.autotune.enabled = False
    if deterministic is not None:
        options.deterministic = deterministic
    return dataset.with_options(options)
