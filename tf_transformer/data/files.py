"""Parallel text files: two files aligned by line, one sentence a line (`tf_transformer.data.text_files` reads and
checks each)."""

from __future__ import annotations

from typing import Iterator, Optional, Tuple

import tensorflow as tf

from tf_transformer.data.corpus import ASCII_WHITESPACE, ParallelCorpus
from tf_transformer.data.text_files import PathLike, TextFileInfo, inspect_parallel_files, read_lines


class FileCorpus(ParallelCorpus):
    """Two aligned text files, plain or gzip, checked when created.

    Creating one reads both files once (see `inspect_parallel_files`; not again while they are unchanged) and
    fails unless they have the same number of lines; the pairs themselves are then streamed by
    `tf.data.TextLineDataset` (`raw_dataset`) or Python (`pairs`), the same pairs in the same order.

    Args:
        source_path, target_path: the files.
        source_flag, target_flag: flags that set them, named in error messages.
        description: a name for reports; default "<source> | <target>".

    Raises:
        DataError: see `inspect_parallel_files`.
    """

    def __init__(
        self,
        source_path: PathLike,
        target_path: PathLike,
        *,
        source_flag: Optional[str] = "--train_source",
        target_flag: Optional[str] = "--train_target",
        description: Optional[str] = None,
    ):
        self.source, self.target = inspect_parallel_files(source_path, target_path, source_flag, target_flag)
        self.num_lines = self.source.num_lines
        self.description = description or f"{self.source.path} | {self.target.path}"

    def raw_dataset(self) -> tf.data.Dataset:
        return tf.data.Dataset.zip((_line_dataset(self.source), _line_dataset(self.target)))

    def pairs(self) -> Iterator[Tuple[str, str]]:
        for source, target in zip(read_lines(self.source.path), read_lines(self.target.path), strict=True):
            source, target = source.strip(ASCII_WHITESPACE), target.strip(ASCII_WHITESPACE)
            if source and target:
                yield source, target


def _line_dataset(info: TextFileInfo) -> tf.data.Dataset:
    def lines():
        return tf.data.TextLineDataset(
            info.path, compression_type="GZIP" if info.compressed else "", buffer_size=1 << 20
        )

    dataset = lines()
    if info.has_bom:
        # Only the first line carries the mark; a regex over every line would cost every line.
        head = dataset.take(1).map(lambda line: tf.strings.regex_replace(line, "^\ufeff", ""))
        dataset = head.concatenate(lines().skip(1))
    return dataset
