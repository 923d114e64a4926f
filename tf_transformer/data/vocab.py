"""Building a subword vocabulary from a corpus: a joint SentencePiece model (the default, trained in a child
process) or WordPiece, saved as a folder that `Tokenizer.from_directory` loads (data/tokenizer.py, whose names this
module also exports).
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import subprocess
import sys
from typing import Iterable, List, Optional, Tuple

import tensorflow as tf

from tf_transformer.data.config import DataConfig
from tf_transformer.data.dataset_options import package_options
from tf_transformer.data.errors import DataError
from tf_transformer.data.sources import open_corpus
from tf_transformer.data.tokenizer import (  # noqa: F401 (the vocabulary's names, exported here too)
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SENTENCEPIECE_MODEL,
    SENTENCEPIECE_SPECIAL_TOKENS,
    SENTENCEPIECE_VOCAB,
    TOKENIZER_JSON,
    UNK_ID,
    WORDPIECE_SPECIAL_TOKENS,
    WORDPIECE_VOCAB,
    PathLike,
    Tokenizer,
    check_special_ids,
)


def train_sentencepiece(
    sentences: Iterable[str],
    output_dir: PathLike,
    vocab_size: int,
    model_type: str = "unigram",
    *,
    normalization: str = "nmt_nfkc",
    character_coverage: float = 1.0,
    byte_fallback: bool = True,
    seed: Optional[int] = None,
    num_threads: Optional[int] = None,
    extra: Optional[dict] = None,
) -> Tokenizer:
    """Trains a SentencePiece model on `sentences`, writes it to `output_dir` (atomically) and loads it.

    The model has ids pad 0, BOS 1, EOS 2, unknown 3. Defaults and why:
    - normalization "nmt_nfkc" (SentencePiece's default): NFKC (e.g. U+00A0 no-break space -> space) and
      runs of whitespace collapsed, so detokenize(tokenize(s)) == s for text already in that form
      (all but one of Multi30k's 2,028 validation sentences; "identity" keeps the text as is except spaces).
    - character_coverage 1.0: every character seen is a piece, right for alphabets (use 0.9995 for CJK).
    - byte_fallback: a character never seen becomes its UTF-8 bytes instead of <unk>, so any text round-trips.

    SentencePiece trains in a child process, so that a signal handler that raises stops it at once (see
    `_train_sentencepiece_in_child`); the model is the one the same trainer would give in this process.

    Raises:
        DataError: SentencePiece refused the input, e.g. a vocab_size too large for the data.
        RuntimeError: the child process failed otherwise (its status and stderr say how).
    """
    sentences = list(sentences)
    if not sentences:
        raise DataError("no sentences to train the vocabulary on. Fix: check that the training files are not empty.")
    options = dict(
        vocab_size=vocab_size,
        model_type=model_type,
        pad_id=PAD_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        unk_id=UNK_ID,
        normalization_rule_name=normalization,
        character_coverage=character_coverage,
        byte_fallback=byte_fallback,
        num_threads=num_threads or os.cpu_count() or 1,
        max_sentence_length=1 << 14,
        minloglevel=2,
        seed=seed,
    )
    model, error = _train_sentencepiece_in_child(sentences, options)
    if error is not None:
        # SentencePiece fails both ways: too few pieces for the characters it must cover (byte fallback
        # adds 256), or more pieces than the text can give.
        if "smaller than required_chars" in error:
            fix = "raise --vocab_size (the characters and byte fallback alone need the second number)"
        else:
            fix = "lower --vocab_size (or give it more text)"
        raise DataError(
            f"SentencePiece could not train a {vocab_size}-token {model_type} model on {len(sentences)} sentences "
            f"({error}). Fix: {fix}."
        )
    tokenizer = Tokenizer.from_sentencepiece(model)
    options = {"model_type": model_type, "normalization": normalization, "character_coverage": character_coverage}
    tokenizer.save(
        output_dir, {**options, "byte_fallback": byte_fallback, "sentences": len(sentences), **(extra or {})}
    )
    return tokenizer


def train_wordpiece(
    sentences: Iterable[str],
    output_dir: PathLike,
    vocab_size: int,
    *,
    lower_case: bool = False,
    normalization_form: Optional[str] = "NFKC",
    learn_params: Optional[dict] = None,
    extra: Optional[dict] = None,
) -> Tokenizer:
    """Learns a WordPiece vocabulary with `tensorflow_text`'s `bert_vocab_from_dataset`, writes and loads it.

    The vocabulary starts [PAD] [BOS] [EOS] [UNK] (ids 0..3). Its size is at most `vocab_size` and can be far
    smaller on little data (the learner stops at a minimum word-piece count). Case and accents are kept
    unless `lower_case` (which also strips accents, losing e.g. German umlauts); text is NFKC-normalised.
    The learner is pure Python and slow (about 4 minutes for Multi30k en+de at 8000): `learn_params`
    (e.g. {"num_iterations": 2}) are passed to `wordpiece_tokenizer_learner_lib.learn`.

    Raises:
        DataError: no sentences.
    """
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset

    sentences = list(sentences)
    if not sentences:
        raise DataError("no sentences to train the vocabulary on. Fix: check that the training files are not empty.")
    params = {"lower_case": lower_case, "normalization_form": None if lower_case else normalization_form}
    dataset = package_options(tf.data.Dataset.from_tensor_slices(tf.constant(sentences, tf.string)).batch(1024))
    vocab = bert_vocab_from_dataset.bert_vocab_from_dataset(
        dataset, vocab_size, list(WORDPIECE_SPECIAL_TOKENS), bert_tokenizer_params=params, learn_params=learn_params
    )
    tokenizer = Tokenizer.from_wordpiece(vocab, lower_case=lower_case, normalization_form=normalization_form)
    tokenizer.save(output_dir, {"requested_vocab_size": vocab_size, "sentences": len(sentences), **(extra or {})})
    return tokenizer


def sample_sentences(pairs: Iterable[Tuple[str, str]], max_sentences: int, seed: int = 0) -> List[str]:
    """Both sides of at most max_sentences // 2 pairs (at least 1), uniformly sampled (reservoir) with `seed`.

    Returns the sources of the kept pairs in corpus order, then their targets: a joint vocabulary sees both
    languages equally.
    """
    capacity = max(1, max_sentences // 2)
    rng = random.Random(seed)
    reservoir: List[Tuple[int, Tuple[str, str]]] = []
    for index, pair in enumerate(pairs):
        if index < capacity:
            reservoir.append((index, pair))
        else:
            slot = rng.randrange(index + 1)
            if slot < capacity:
                reservoir[slot] = (index, pair)
    reservoir.sort(key=lambda item: item[0])
    return [pair[0] for _, pair in reservoir] + [pair[1] for _, pair in reservoir]


def build_vocabulary(
    data_config: DataConfig, output_dir: PathLike, *, corpus=None, learn_params: Optional[dict] = None
) -> Tokenizer:
    """Builds the vocabulary `data_config` describes from its training pairs into `output_dir`; returns it.

    Samples up to `vocab_max_sentences` sentences of the training split (both sides; seed `seed` or 0) and
    trains a joint SentencePiece model (`vocab_type` "sentencepiece", `spm_model_type`) or a WordPiece
    vocabulary ("wordpiece"), `vocab_size` tokens; with `lowercase`, one that case-folds what it reads. The
    files are written atomically; load them again with `Tokenizer.from_directory(output_dir)`.

    Args:
        data_config: the data.
        output_dir: created if missing.
        corpus: the training `ParallelCorpus`, if already opened; default `open_corpus(data_config, "train")`.
        learn_params: WordPiece learner options (see `train_wordpiece`).

    Raises:
        DataError: unreadable training data or a vocabulary that cannot be trained.
    """
    corpus = corpus or open_corpus(data_config, "train")
    seed = data_config.seed if data_config.seed is not None else 0
    sentences = sample_sentences(corpus.pairs(), data_config.vocab_max_sentences, seed)
    extra = {"corpus": corpus.description}
    if data_config.vocab_type == "wordpiece":
        return train_wordpiece(
            sentences,
            output_dir,
            data_config.vocab_size,
            lower_case=data_config.lowercase,
            learn_params=learn_params,
            extra=extra,
        )
    # "nmt_nfkc_cf" is SentencePiece's "nmt_nfkc" followed by case folding: the lowercasing lives in the model.
    normalization = "nmt_nfkc_cf" if data_config.lowercase else "nmt_nfkc"
    return train_sentencepiece(
        sentences,
        output_dir,
        data_config.vocab_size,
        data_config.spm_model_type,
        normalization=normalization,
        seed=seed,
        extra=extra,
    )


def _train_sentencepiece_in_child(sentences: List[str], options: dict) -> Tuple[bytes, Optional[str]]:
    """(model bytes, None), or (b"", SentencePiece's error): `_sentencepiece_child.py` trains in a child process.

    Why a child: SentencePiece's trainer is C++ that holds the interpreter until it returns, which on a large
    corpus takes minutes, and Python runs a signal handler only then. Here the parent waits on a pipe instead,
    so a handler that raises (the trainer's, on SIGTERM or SIGINT) stops the wait at once, and the child is
    killed on the way out: it writes no file (the model comes back on its stdout), so nothing is left behind.
    The child also dies with this process (`kill -9`, or a signal without a handler, as in `tft-build-vocab`).
    """
    options = {**options, "parent_pid": os.getpid()}
    command = [sys.executable, str(pathlib.Path(__file__).with_name("_sentencepiece_child.py")), json.dumps(options)]
    lines = "".join(json.dumps(sentence) + "\n" for sentence in sentences).encode("ascii")
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        model, errors = process.communicate(lines)
    finally:
        if process.returncode is None:  # an exception (a signal's) ended the wait: the child must not outlive it
            process.kill()
            process.wait()
    if process.returncode == 0:
        return model, None
    message = errors.decode("utf-8", "replace").strip()
    if process.returncode == 1:  # SentencePiece refused the input
        return b"", json.loads(message.splitlines()[-1])
    raise RuntimeError(f"the SentencePiece child process failed with status {process.returncode}: {message[-2000:]}")
