"""Generated sequence-to-sequence tasks (copy, reverse) for demos, tests and smoke runs."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tf_transformer.data.dataset_options import package_options

SYNTHETIC_TASKS = ("copy", "reverse")
FIRST_SYMBOL = 3  # ids 0, 1, 2 are padding, start and end of sequence


def synthetic_pairs(
    task: str, num_examples: int, num_symbols: int = 20, min_length: int = 4, max_length: int = 12, seed: int = 0
):
    """`num_examples` (source, target) pairs of int id lists; symbols are ids 3 .. 3 + num_symbols - 1.

    "copy": the target is the source; "reverse": the target is the source reversed.
    """
    if task not in SYNTHETIC_TASKS:
        raise ValueError(f"task: unknown synthetic task {task!r}. Fix: use one of {SYNTHETIC_TASKS}.")
    if not 1 <= min_length <= max_length:
        raise ValueError(f"need 1 <= min_length <= max_length, got {min_length} and {max_length}.")
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(num_examples):
        length = int(rng.integers(min_length, max_length + 1))
        source = rng.integers(FIRST_SYMBOL, FIRST_SYMBOL + num_symbols, size=length).tolist()
        pairs.append((source, source[::-1] if task == "reverse" else list(source)))
    return pairs


def synthetic_translation_dataset(
    task: str,
    num_examples: int,
    batch_size: int,
    num_symbols: int = 20,
    min_length: int = 4,
    max_length: int = 12,
    seed: int = 0,
    bos_id: int = 1,
    eos_id: int = 2,
    shuffle: bool = True,
    repeat: bool = False,
) -> tf.data.Dataset:
    """A batched `((source_ids, target_input_ids), target_output_ids)` dataset, padded with 0.

    The source ends with `eos_id`; the target input is `bos_id` + target and the target output is
    target + `eos_id`, the teacher-forcing layout `Transformer` trains on.
    """
    pairs = synthetic_pairs(task, num_examples, num_symbols, min_length, max_length, seed)
    # Ragged slices rather than a generator: the dataset's length is known, so Keras can size epochs.
    columns = (
        [source + [eos_id] for source, _ in pairs],
        [[bos_id] + target for _, target in pairs],
        [target + [eos_id] for _, target in pairs],
    )
    dataset = tf.data.Dataset.from_tensor_slices(tuple(tf.ragged.constant(c, dtype=tf.int32) for c in columns))
    if shuffle:
        dataset = dataset.shuffle(num_examples, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.ragged_batch(batch_size)
    # to_tensor pads with 0, the padding id.
    dataset = dataset.map(
        lambda source, target_in, target_out: ((source.to_tensor(), target_in.to_tensor()), target_out.to_tensor())
    )
    return package_options(dataset.prefetch(2))
