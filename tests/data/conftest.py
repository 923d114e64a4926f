"""Shared fixtures of the data tests: one small SentencePiece model per session."""

import gzip

import pytest


def read_gzip_lines(path, limit=None):
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()[:limit]


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
