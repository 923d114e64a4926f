"""Multi30k task 1 (image captions in English, German and French): a local copy, or downloaded once and cached.

Elliott, Frank, Sima'an and Specia, "Multi30K: Multilingual English-German Image Descriptions" (2016).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import pathlib
import tempfile
import urllib.request
import zlib
from typing import Callable, Iterable, Optional, Union

from tf_transformer.data.config import MULTI30K_LANGUAGES
from tf_transformer.data.errors import DataError
from tf_transformer.data.files import FileCorpus

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{name}.{lang}.gz"
# Our split names -> the file name stems of the Multi30k repository. "test" is test_2016_flickr; the 2017 test
# sets are extra splits for scoring (open_corpus, and so training, still knows only train / valid / test).
MULTI30K_FILES = {
    "train": "train",
    "valid": "val",
    "test": "test_2016_flickr",
    "test_2017_flickr": "test_2017_flickr",
    "test_2017_mscoco": "test_2017_mscoco",
}
MULTI30K_LINES = {"train": 29000, "valid": 1014, "test": 1000, "test_2017_flickr": 1000, "test_2017_mscoco": 461}

PathLike = Union[str, os.PathLike]
Opener = Callable[[str], "contextlib.AbstractContextManager"]


def multi30k_filename(split: str, lang: str) -> str:
    """The file name of one side of one split, e.g. ("valid", "de") -> "val.de.gz"."""
    if split not in MULTI30K_FILES:
        raise DataError(f"split: Multi30k has no split {split!r}. Fix: use one of {', '.join(MULTI30K_FILES)}.")
    if lang not in MULTI30K_LANGUAGES:
        raise DataError(f"Multi30k has no language {lang!r}. Fix: use one of {', '.join(MULTI30K_LANGUAGES)}.")
    return f"{MULTI30K_FILES[split]}.{lang}.gz"


def _default_opener(url: str):
    return urllib.request.urlopen(url, timeout=60)  # also opens file:// URLs


def download_file(url: str, destination: PathLike, expected_lines: Optional[int] = None, opener: Opener = None):
    """Downloads `url` to `destination` unless it is already there; returns the destination path.

    The bytes go to a temporary file beside the destination, are verified (a readable gzip of UTF-8 text
    with `expected_lines` lines, when given), and only then renamed into place, so a destination that exists
    is always complete and a failed or interrupted download leaves nothing behind.

    Args:
        url: what to fetch.
        destination: the cached file.
        expected_lines: the line count the verified file must have; None skips that check.
        opener: `opener(url)` returns a context manager with a binary `read(size)`; the default is
            `urllib.request.urlopen` (which also opens file:// URLs). Tests pass a fake.

    Raises:
        DataError: the download failed or the file does not verify; the message names the URL.
    """
    destination = pathlib.Path(destination)
    if destination.is_file():
        return destination
    destination.parent.mkdir(parents=True, exist_ok=True)
    opener = opener or _default_opener
    handle, temporary = tempfile.mkstemp(prefix=f".{destination.name}.", suffix=".part", dir=destination.parent)
    try:
        with os.fdopen(handle, "wb") as output:
            try:
                with opener(url) as response:
                    while True:
                        block = response.read(1 << 20)
                        if not block:
                            break
                        output.write(block)
            except OSError as error:  # urllib's URLError and HTTPError are OSErrors
                raise DataError(
                    f"cannot download {url} ({error}). Fix: check the network, or download the file yourself "
                    f"and pass its folder with --data_dir."
                ) from None
        _verify_gzip_text(temporary, url, expected_lines)
        os.replace(temporary, destination)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
    return destination


def _verify_gzip_text(path: PathLike, url: str, expected_lines: Optional[int]):
    try:
        with gzip.open(path, "rb") as handle:
            lines = sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    except (OSError, EOFError, zlib.error) as error:
        raise DataError(
            f"the download of {url} is not a readable gzip file ({error}). Fix: try again; if it persists, "
            "download the files yourself and pass their folder with --data_dir."
        ) from None
    if expected_lines is not None and lines != expected_lines:
        raise DataError(
            f"the download of {url} has {lines} lines, expected {expected_lines}. Fix: try again; if the upstream "
            "files changed, download them yourself and pass their folder with --data_dir."
        )


def download_multi30k(
    cache_dir: PathLike,
    languages: Iterable[str] = ("en", "de"),
    splits: Iterable[str] = ("train", "valid", "test"),
    *,
    url_template: str = MULTI30K_URL,
    opener: Opener = None,
) -> pathlib.Path:
    """Makes sure `cache_dir`/multi30k ("~" expanded) holds the raw files of `languages` x `splits` (keys of
    `MULTI30K_FILES`), each downloaded at most once by `download_file`, verified against `MULTI30K_LINES`; returns
    that folder. `url_template` has {name} (e.g. "val") and {lang}; a file:// template reads a local mirror.
    Raises DataError for an unknown split or language, or as `download_file` does."""
    folder = pathlib.Path(os.path.expanduser(os.fspath(cache_dir))) / "multi30k"
    for split in splits:
        for lang in languages:
            filename = multi30k_filename(split, lang)
            url = url_template.format(name=MULTI30K_FILES[split], lang=lang)
            download_file(url, folder / filename, expected_lines=MULTI30K_LINES[split], opener=opener)
    return folder


def multi30k_corpus(
    split: str,
    source_lang: str = "en",
    target_lang: str = "de",
    data_dir: Optional[PathLike] = None,
    cache_dir: PathLike = "~/.cache/tf_transformer",
    opener: Opener = None,
) -> FileCorpus:
    """The Multi30k pairs of `split`: train, valid, test, test_2017_flickr or test_2017_mscoco (461 pairs).

    With `data_dir`, reads `{name}.{lang}.gz` from it (name: the split, but "valid" is val and "test" is
    test_2016_flickr); without, downloads the two files it needs into `cache_dir`/multi30k first (once).

    Raises:
        DataError: an unknown split or language, a missing file (the fix names --data_dir), or a failed download.
    """
    source_name, target_name = multi30k_filename(split, source_lang), multi30k_filename(split, target_lang)
    if data_dir is None:
        folder = download_multi30k(cache_dir, (source_lang, target_lang), (split,), opener=opener)
    else:
        folder = pathlib.Path(os.path.expanduser(os.fspath(data_dir)))
        for name in (source_name, target_name):
            if not (folder / name).is_file():
                raise DataError(
                    f"{folder / name}: no such file. Fix: set --data_dir to a folder with the Multi30k task 1 raw "
                    f"files ({source_name}, {target_name}), or leave --data_dir unset to download them."
                )
    return FileCorpus(
        folder / source_name,
        folder / target_name,
        source_flag="--data_dir",
        target_flag="--data_dir",
        description=f"multi30k {source_lang}-{target_lang} {split}",
    )
