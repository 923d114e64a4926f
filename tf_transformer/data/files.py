"""Parallel text files: one sentence a line, plain or gzip (told apart by magic bytes), UTF-8, aligned by line."""

from __future__ import annotations

import dataclasses
import gzip
import os
import sys
import zlib
from typing import BinaryIO, Iterator, List, Optional, Tuple, Union

import tensorflow as tf

from tf_transformer.data.corpus import ASCII_WHITESPACE, ParallelCorpus
from tf_transformer.data.errors import DataError

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
_CHUNK_BYTES = 8 << 20

PathLike = Union[str, os.PathLike]


def is_gzip(path: PathLike) -> bool:
    """True when the file starts with the gzip magic bytes (whatever its name ends with)."""
    with open(path, "rb") as handle:
        return handle.read(2) == GZIP_MAGIC


def open_binary(path: PathLike) -> BinaryIO:
    """Opens a plain or gzip file for reading its (decompressed) bytes."""
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")


@dataclasses.dataclass(frozen=True)
class TextFileInfo:
    """What one validating pass learned about a text file.

    Attributes:
        path: the file.
        compressed: True for gzip.
        num_lines: lines, counting a last line without a newline; what `tf.data.TextLineDataset` yields.
        has_bom: the text starts with a UTF-8 byte-order mark (removed when reading).
    """

    path: str
    compressed: bool
    num_lines: int
    has_bom: bool


def inspect_text_file(path: PathLike, flag: Optional[str] = None) -> TextFileInfo:
    """Checks that `path` is a non-empty, readable, UTF-8 text file (plain or gzip) and counts its lines.

    One streaming pass in large chunks, so it is cheap next to training (benchmarks/NOTES.md, "Figures moved
    out of docstrings").

    Args:
        path: the file.
        flag: the command-line flag that set the path, named in the fix of a missing file.

    Raises:
        DataError: the file is missing, is empty, is a broken gzip file, or has bytes that are not UTF-8
            (the message gives the 1-based line number).
    """
    path = os.fspath(path)
    set_it = f"set {flag} to" if flag else "pass"
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file. Fix: {set_it} an existing text or gzip file.")
    if not os.path.isfile(path):
        raise DataError(f"{path}: not a regular file. Fix: {set_it} a text or gzip file, not a folder.")
    if os.path.getsize(path) == 0:
        raise DataError(f"{path}: the file is empty. Fix: {set_it} a file with one sentence a line.")
    compressed = is_gzip(path)
    num_lines, has_bom, carry = 0, False, b""
    try:
        with open_binary(path) as handle:
            first = True
            while True:
                chunk = handle.read(_CHUNK_BYTES)
                data = carry + chunk
                if first:
                    has_bom, first = data.startswith(UTF8_BOM), False
                # Decode whole lines only, so that an error's offset gives its line and no multi-byte
                # character is cut at a chunk boundary.
                cut = data.rfind(b"\n") + 1 if chunk else len(data)
                complete, carry = data[:cut], data[cut:]
                try:
                    complete.decode("utf-8")
                except UnicodeDecodeError as error:
                    line = num_lines + complete.count(b"\n", 0, error.start) + 1
                    raise DataError(
                        f"{path}: line {line} is not valid UTF-8 ({error.reason}: byte "
                        f"0x{complete[error.start]:02x}). Fix: re-encode the file as UTF-8 (e.g. "
                        f"iconv -f latin1 -t utf-8 FILE > FILE.utf8)"
                        + (f" and {set_it} the new file." if flag else ".")
                    ) from None
                num_lines += complete.count(b"\n") + (0 if chunk or not complete or complete.endswith(b"\n") else 1)
                if not chunk:
                    break
    except (OSError, EOFError, zlib.error) as error:
        raise DataError(
            f"{path}: cannot be read as {'gzip' if compressed else 'text'} ({error}). "
            "Fix: re-download or re-compress the file (gzip -t FILE tests it)."
        ) from None
    if num_lines == 0:
        raise DataError(f"{path}: the file is empty. Fix: {set_it} a file with one sentence a line.")
    return TextFileInfo(path=path, compressed=compressed, num_lines=num_lines, has_bom=has_bom)


def read_lines(path: PathLike) -> Iterator[str]:
    """The lines of a plain or gzip UTF-8 file, without line ends or a leading byte-order mark."""
    with open_binary(path) as handle:
        for number, raw in enumerate(handle):
            line = raw.decode("utf-8").rstrip("\r\n")
            yield line[1:] if number == 0 and line.startswith("\ufeff") else line


def read_sentences(path: Optional[PathLike] = None, flag: Optional[str] = None) -> List[str]:
    """The lines of `path` (plain or gzip, checked with `inspect_text_file`), or of stdin without a path: UTF-8,
    without line ends or a leading byte-order mark; the sentences the translation commands read.

    Raises:
        DataError: a missing, empty or non-UTF-8 file (naming `flag`).
        UnicodeDecodeError: stdin is not UTF-8.
    """
    if path is None:
        lines = sys.stdin.buffer.read().decode("utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        lines = [line.rstrip("\r") for line in lines]
        if lines and lines[0].startswith("\ufeff"):
            lines[0] = lines[0][1:]
        return lines
    inspect_text_file(path, flag)
    return list(read_lines(path))


class FileCorpus(ParallelCorpus):
    """Two aligned text files, plain or gzip, checked when created.

    Creating one reads both files once (see `inspect_text_file`) and fails unless they have the same number
    of lines; the pairs themselves are then streamed by `tf.data.TextLineDataset` (`raw_dataset`) or
    Python (`pairs`), the same pairs in the same order.

    Args:
        source_path, target_path: the files.
        source_flag, target_flag: flags that set them, named in error messages.
        description: a name for reports; default "<source> | <target>".

    Raises:
        DataError: see `inspect_text_file`; or the files have different line counts.
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
        self.source = inspect_text_file(source_path, source_flag)
        self.target = inspect_text_file(target_path, target_flag)
        if self.source.num_lines != self.target.num_lines:
            raise DataError(
                f"misaligned files: {self.source.path} has {self.source.num_lines} lines but {self.target.path} "
                f"has {self.target.num_lines}. Fix: give the source and target files one sentence a line, "
                "aligned line for line (same number of lines; check for stray newlines inside sentences)."
            )
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
