"""Shared fixtures of the data tests: the Multi30k copy and one small SentencePiece model per session."""

import gzip
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def multi30k_path() -> pathlib.Path:
    """The Multi30k folder: $MULTI30K_DIR, else ../shared/data/multi30k beside the repository."""
    return pathlib.Path(os.environ.get("MULTI30K_DIR", ROOT.parent / "shared" / "data" / "multi30k"))


def read_gzip_lines(path, limit=None):
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    lines = lines[:-1] if lines and lines[-1] == "" else lines
    return lines[:limit] if limit else lines


@pytest.fixture(scope="session")
def multi30k_dir():
    path = multi30k_path()
    if not (path / "train.en.gz").is_file():
        pytest.skip(f"Multi30k not found at {path}; set MULTI30K_DIR to the folder with train.en.gz")
    return path


@pytest.fixture(scope="session")
def spm_dir(multi30k_dir, tmp_path_factory):
    """A 1000-token joint en+de SentencePiece model trained on the first 3000 Multi30k training pairs."""
    from tf_transformer.data import train_sentencepiece

    sentences = read_gzip_lines(multi30k_dir / "train.en.gz", 3000) + read_gzip_lines(
        multi30k_dir / "train.de.gz", 3000
    )
    directory = tmp_path_factory.mktemp("spm")
    train_sentencepiece(sentences, directory, vocab_size=1000, seed=0)
    return directory


@pytest.fixture(scope="session")
def tokenizer(spm_dir):
    from tf_transformer.data import Tokenizer

    return Tokenizer.from_directory(spm_dir)
