"""Translating text with an export in this process: what `tft-translate --saved_model` runs.

    translator = SavedModelTranslator("exports/multi30k")     # the latest version, or a version folder
    translator(["A dog runs.", ""])                           # [[("Ein Hund rennt.", -0.42)], [("", 0.0)]]

The decoding settings (beam size, length penalty, output length) are those the export was made with.
Sentences are batched as `tf_transformer.decoding.text.TextTranslator` batches them (by source tokens,
longest first), so the translations and scores are those of `translate_texts` with the same settings.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Callable, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from tf_transformer.decoding.settings import is_int
from tf_transformer.decoding.text import check_prefixes, check_sentences, translate_in_batches, warn_truncated
from tf_transformer.export.exporter import EXPORT_CONFIG_FILE, next_version

PathLike = Union[str, os.PathLike]

# Sentences per call of the export's token counter.
_COUNT_CHUNK = 1024


def resolve_export(path: PathLike) -> pathlib.Path:
    """The version folder `path` names: `path` itself if it holds a SavedModel, else its latest version.

    Raises:
        FileNotFoundError: neither.
    """
    path = pathlib.Path(path)
    if (path / "saved_model.pb").is_file():
        return path
    if path.is_dir():
        latest = next_version(path) - 1
        if (path / str(latest) / "saved_model.pb").is_file():
            return path / str(latest)
    raise FileNotFoundError(
        f"saved_model: {path} is neither a SavedModel (no saved_model.pb) nor a folder of numbered versions. Fix: "
        "pass the --export_dir of tft-export, or one of its version folders."
    )


class SavedModelTranslator:
    """Translates lists of sentences with an export of `tft-export` (`tf_transformer.export`).

    Args:
        export_dir: a version folder, or the base folder (its highest version is used).
        n_best: translations per sentence: 1 uses `serving_default`; more use `translate_nbest` and keep its
            first `n_best` (at most the n_best it was exported with).
        batch_tokens: source tokens per batch, padding included (as `TextTranslator`).

    Raises:
        FileNotFoundError: no export at `export_dir`.
        ValueError: not an export of this package, or a bad n_best or batch_tokens.
    """

    def __init__(self, export_dir: PathLike, n_best: int = 1, batch_tokens: int = 4096):
        self.export_dir = resolve_export(export_dir)
        settings_path = self.export_dir / "assets" / EXPORT_CONFIG_FILE
        if not settings_path.is_file():
            raise ValueError(
                f"saved_model: {self.export_dir} has no assets/{EXPORT_CONFIG_FILE}, so it was not written by "
                "tft-export. Fix: export the model directory with tft-export."
            )
        self.settings = json.loads(settings_path.read_text(encoding="utf-8"))
        exported_n_best = self.settings["n_best"]
        if not is_int(n_best) or not 1 <= n_best <= exported_n_best:
            raise ValueError(
                f"n_best: must be an int in [1, {exported_n_best}] (the n_best this model was exported with), got "
                f"{n_best!r}. Fix: lower --n_best, or export again with a larger --n_best."
            )
        if not is_int(batch_tokens) or batch_tokens < 1:
            raise ValueError(f"batch_tokens: must be an int >= 1, got {batch_tokens!r}. Fix: use e.g. 4096.")
        self.n_best = n_best
        self.batch_tokens = batch_tokens
        import tensorflow_text  # noqa: F401 (registers the tokenizer ops the graph uses)

        self.loaded = tf.saved_model.load(str(self.export_dir))
        name = "serving_default" if n_best == 1 else "translate_nbest"
        self.signature = self.loaded.signatures[name]

    def __call__(
        self,
        sentences: Sequence[str],
        progress: Optional[Callable[[int, int], None]] = None,
        target_prefixes: Optional[Sequence[str]] = None,
    ) -> List[List[Tuple[str, float]]]:
        """Translations of `sentences` in input order: `n_best` (text, score) pairs each, best first; a
        sentence without tokens gets "" and 0.0. `progress(done, total)` is called after each batch.
        `target_prefixes` (one str per sentence, "" for none) go through the `translate_with_prefix` signature
        (1-best), as `translate_texts`' target_prefixes."""
        sentences = check_sentences(sentences)
        signature, prefixes = self.signature, None
        if target_prefixes is not None:
            prefixes = np.array([p.encode("utf-8") for p in check_prefixes(target_prefixes, len(sentences))], object)
            if "translate_with_prefix" not in self.loaded.signatures:
                raise ValueError(
                    f"target_prefixes: the export {self.export_dir} has no translate_with_prefix signature (an "
                    "older export). Fix: export the model directory again with tft-export."
                )
            if self.n_best != 1:
                raise ValueError("n_best: target prefixes give 1 translation per sentence. Fix: use n_best=1.")
            signature = self.loaded.signatures["translate_with_prefix"]
        total = len(sentences)
        encoded = np.array([sentence.encode("utf-8") for sentence in sentences], dtype=object)
        counts = np.concatenate(
            [self.loaded.token_counts(tf.constant(encoded[start : start + _COUNT_CHUNK], tf.string)).numpy()
             for start in range(0, total, _COUNT_CHUNK)] or [np.zeros([0], np.int32)]
        )  # fmt: skip
        max_source_tokens = self.settings["max_source_tokens"]
        warn_truncated(int(np.sum(counts > max_source_tokens)), total, max_source_tokens + 1)
        lengths = np.minimum(counts, max_source_tokens) + 1  # the source ids the model sees, EOS included

        def translate_batch(batch):
            if prefixes is None:
                output = signature(inputs=tf.constant(encoded[batch], tf.string))
            else:
                given = tf.constant(prefixes[batch], tf.string)
                output = signature(inputs=tf.constant(encoded[batch], tf.string), target_prefixes=given)
            texts = output["outputs"].numpy().reshape(len(batch), -1)
            scores = output["scores"].numpy().reshape(len(batch), -1)
            return [
                [(texts[row, k].decode("utf-8"), float(scores[row, k])) for k in range(self.n_best)]
                for row in range(len(batch))
            ]

        return translate_in_batches(lengths.tolist(), self.n_best, self.batch_tokens, translate_batch, progress)


def translate_with_saved_model(
    export_dir: PathLike,
    sentences: Sequence[str],
    n_best: int = 1,
    batch_tokens: int = 4096,
    progress: Optional[Callable[[int, int], None]] = None,
    target_prefixes: Optional[Sequence[str]] = None,
) -> List[List[Tuple[str, float]]]:
    """Translates sentences with an export; see `SavedModelTranslator`."""
    translator = SavedModelTranslator(export_dir, n_best=n_best, batch_tokens=batch_tokens)
    return translator(sentences, progress=progress, target_prefixes=target_prefixes)
