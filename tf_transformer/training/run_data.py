"""The data of a training run: its corpora read and checked, its vocabulary (loaded, built, or copied from a
fine-tuning source) and the training split's report, before anything but the vocabulary is written."""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import time
from typing import Any, Optional

from tf_transformer import data as data_lib
from tf_transformer.data.tokenizer import TOKENIZER_JSON
from tf_transformer.model_dir import DATA_REPORT_FILE, VOCAB_DIR
from tf_transformer.training import fine_tuning
from tf_transformer.training.multi_worker import wait_for_file

logger = logging.getLogger("tf_transformer")


def prepare_data(data_config, model_dir: pathlib.Path, is_chief: bool, init_source=None) -> RunData:
    """Reads and checks the data, and builds (or loads, or copies from the fine-tuning `init_source`) the
    vocabulary and the data report.

    Opening a corpus reads and checks its files: bad data fails here, before anything but the vocabulary is
    written.
    """
    train_corpus = data_lib.open_corpus(data_config, "train", training=True)
    valid_corpus = _open_optional(data_config, "valid")
    phase_started = time.monotonic()
    vocabulary_existed = (model_dir / VOCAB_DIR / TOKENIZER_JSON).is_file()
    tokenizer = _vocabulary(data_config, model_dir / VOCAB_DIR, train_corpus, is_chief, init_source)
    logger.info("Vocabulary of %d pieces ready in %.1f s.", tokenizer.vocab_size, time.monotonic() - phase_started)
    phase_started = time.monotonic()
    report = _saved_report(model_dir / DATA_REPORT_FILE, train_corpus) if vocabulary_existed else None
    if report is None:
        report = data_lib.scan_lengths(data_config, tokenizer, "train", corpus=train_corpus)
        logger.info("%s (scanned in %.1f s)", report.summary(), time.monotonic() - phase_started)
    else:
        logger.info("%s (the run's own %s: not scanned again)", report.summary(), DATA_REPORT_FILE)
    return RunData(tokenizer, train_corpus, valid_corpus, report)


@dataclasses.dataclass(frozen=True)
class RunData:
    """A run's checked data and its vocabulary (`prepare_data`).

    Attributes:
        tokenizer: the run's `Tokenizer` (model_dir/vocab).
        train_corpus: the training split's `ParallelCorpus`, read and checked.
        valid_corpus: the validation split's, or None when the data has none (files given without --valid_*).
        report: the training split's `DataReport` (its batches an epoch, its dropped pairs).
    """

    tokenizer: Any
    train_corpus: Any
    valid_corpus: Optional[Any]
    report: Any


def _open_optional(data_config, split: str):
    """The split's corpus, or None when the data has no such split (files given without --valid_*)."""
    if data_config.dataset == "files" and getattr(data_config, f"{split}_source") is None:
        return None
    return data_lib.open_corpus(data_config, split)


def _vocabulary(data_config, vocab_dir: pathlib.Path, train_corpus, is_chief: bool, init_source):
    """The run's vocabulary, the one writer of `vocab_dir`: a fine-tuning source's copied (by the chief), then
    loaded if complete, else built (by the chief; other workers wait for it, as for a copy).

    Raises:
        ConfigError: `vocab_dir` holds another vocabulary than the fine-tuning source's.
        tf_transformer.data.errors.VocabularyInterrupted: SIGTERM or SIGINT (in the main thread) while building
            or waiting; the vocabulary is left incomplete (no tokenizer.json), so a restart builds it again.
    """
    import signal
    import threading

    from tf_transformer.data.errors import VocabularyInterrupted

    if init_source is not None and is_chief:
        fine_tuning.copy_vocabulary(init_source, vocab_dir)
    marker = vocab_dir / TOKENIZER_JSON  # written last: the vocabulary is complete
    if marker.is_file():
        return data_lib.Tokenizer.from_directory(vocab_dir)

    # Unlike training (StopSignals: finish the step, save, then stop), there is nothing here worth finishing:
    # the handler raises at once. SentencePiece trains in a child process that build_vocabulary kills on the
    # way out, so the stop is prompt even on a corpus that takes it minutes; every file is written atomically
    # and tokenizer.json last, so what an interrupted build leaves is never taken for a vocabulary.
    def interrupt(signal_number, frame):
        del frame
        raise VocabularyInterrupted(signal_number, vocab_dir)

    previous = {}
    if threading.current_thread() is threading.main_thread():  # Python's handlers live in the main thread only
        previous = {number: signal.signal(number, interrupt) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        if is_chief:
            logger.info("Building the vocabulary in %s.", vocab_dir)
            return data_lib.build_vocabulary(data_config, vocab_dir, corpus=train_corpus)
        wait_for_file(marker)
        return data_lib.Tokenizer.from_directory(vocab_dir)
    finally:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)


def _saved_report(path: pathlib.Path, train_corpus):
    """The data report of an earlier start of this run, when it still describes the corpus; else None.

    A restart has the same data config (checked before) and vocabulary, so its scan would give the same report:
    one tokenization pass over the training split saved on every restart (minutes for millions of pairs,
    benchmarks/NOTES.md entry 23). A corpus whose line count changed is scanned again.
    """
    if not path.is_file():
        return None
    try:
        report = data_lib.DataReport.from_json(path)
    except (OSError, ValueError, TypeError):  # unreadable or from another version: scan again
        return None
    if report.corpus != train_corpus.description or report.split != "train":
        return None
    if train_corpus.num_lines is not None and report.pairs_read != train_corpus.num_lines:
        return None
    return report
