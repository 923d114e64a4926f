"""Text files as the corpora and the commands read them: one sentence a line, plain or gzip (told apart by magic
bytes), UTF-8. No TensorFlow: the commands check and read their input files before it starts (and scoring a file of
translations needs none); `tf_transformer.data.files.FileCorpus` streams aligned pairs of them through tf.data."""

from __future__ import annotations

import dataclasses
import gzip
import os
import sys
import zlib
from typing import BinaryIO, Dict, Iterator, List, Optional, Tuple, Union

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
    # A file read once is not read again while it is unchanged: a command checks its files before TensorFlow
    # starts, and the corpus it then opens checks them again.
    stat = os.stat(path)
    key = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key in _INSPECTED:
        return dataclasses.replace(_INSPECTED[key], path=path)
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
    _INSPECTED[key] = TextFileInfo(path=path, compressed=compressed, num_lines=num_lines, has_bom=has_bom)
    return _INSPECTED[key]


# What inspect_text_file learned, by (device, inode, size, modification time): a file changed since is read anew.
_INSPECTED: Dict[Tuple[int, int, int, int], TextFileInfo] = {}


def inspect_parallel_files(
    source_path: PathLike,
    target_path: PathLike,
    source_flag: Optional[str] = None,
    target_flag: Optional[str] = None,
) -> Tuple[TextFileInfo, TextFileInfo]:
    """Checks two files of sentence pairs, aligned line for line: each as `inspect_text_file` does, and that they
    have the same number of lines.

    Raises:
        DataError: see `inspect_text_file`; or the files have different line counts.
    """
    source, target = inspect_text_file(source_path, source_flag), inspect_text_file(target_path, target_flag)
    if source.num_lines != target.num_lines:
        raise DataError(
            f"misaligned files: {source.path} has {source.num_lines} lines but {target.path} has {target.num_lines}. "
            "Fix: give the source and target files one sentence a line, aligned line for line (same number of "
            "lines; check for stray newlines inside sentences)."
        )
    return source, target


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
