"""Validation BLEU during training: translate the first N validation sentences, score, log, keep the best model."""

from __future__ import annotations

import json
import logging
import math
import pathlib
import time
from typing import Optional, Sequence

import keras
import tensorflow as tf

from tf_transformer.config import ConfigError
from tf_transformer.evaluation import score_translations
from tf_transformer.files import write_atomically
from tf_transformer.model_dir import BEST_JSON

logger = logging.getLogger("tf_transformer")

# The figures of `score_translations` written to TensorBoard as "validation/<name>".
SCALARS = ("bleu", "chrf", "tok_lower_bleu")
# The best checkpoint's score, saved in the checkpoint itself so that the weights and their score are
# replaced together (TensorFlow moves the checkpoint index only once the files are written).
_SCORE_KEY = "bleu/.ATTRIBUTES/VARIABLE_VALUE"


def read_best_bleu(best_dir) -> Optional[float]:
    """The validation BLEU stored with the best checkpoint in `best_dir`, or None when there is none yet.

    Raises:
        ConfigError: the folder's latest checkpoint holds no score (it was not written by `ValidationBleu`).
    """
    path = tf.train.latest_checkpoint(str(best_dir)) if pathlib.Path(best_dir).is_dir() else None
    if path is None:
        return None
    reader = tf.train.load_checkpoint(path)
    if not reader.has_tensor(_SCORE_KEY):
        raise ConfigError(
            f"{path} holds no validation BLEU, so it is not a best checkpoint the trainer wrote and cannot be "
            f"compared with new evaluations. Fix: move {best_dir} away (or train with --keep_best=false)."
        )
    return float(reader.get_tensor(_SCORE_KEY))


class ValidationBleu(keras.callbacks.Callback):
    """Translates validation sentences, scores them with sacreBLEU, logs the scores and keeps the best model.

    An evaluation runs at the end of the first epoch (the trainer's epochs are `checkpoint_every` steps)
    whose step is at or past the next multiple of `every`, counted from the step training starts at, and
    at the end of training when the last step was not evaluated. It translates `sources` with `translator`,
    scores the best hypotheses against `references` (`tf_transformer.evaluation.score_translations`: BLEU,
    chrF, tokenized lowercased BLEU), writes `validation/bleu`, `validation/chrf` and
    `validation/tok_lower_bleu` to TensorBoard in `log_dir` at the optimizer step, and logs one line.

    With `best_dir`, an evaluation whose BLEU is strictly higher than the best so far saves the model's
    weights, with that BLEU, as `best_dir/ckpt-<step>` (a `tf.train.CheckpointManager` keeping one: the
    index moves to the new files only once they are written), then `best_dir/best.json` (atomically: step,
    scores, signatures, `settings`). The best so far is read back from `best_dir` when the callback is
    created, so a resumed run replaces the best model only with a better one.

    Args:
        translator: a `tf_transformer.decoding.TextTranslator` over the model being trained, created once:
            its traced decoder reads the model's variables, so every evaluation sees the current weights.
            Any callable with its convention (sentences -> per sentence a list of (text, score), best first)
            works.
        sources, references: aligned validation sentences (raw text).
        step: the optimizer's iteration counter, the global step.
        every: steps between evaluations, >= 1.
        log_dir: TensorBoard folder of the scalars, one no other writer uses (TensorBoard may follow only the
            newest event file of a folder).
        best_dir: where to keep the best model; None keeps none.
        settings: JSON-ready evaluation settings (e.g. sentences, beam size) recorded in best.json; a resume
            with other settings logs a warning (the stored best still counts).
        lowercase: score on lowercased text (`score_translations(..., lowercase=True)`), for a model whose
            vocabulary lowercases: its cased BLEU would count every capital letter of the references as an error.

    Attributes:
        best: the contents of best.json of the best evaluation (this run's or a previous run's), or None.
        evaluations: this run's evaluations, as `{"step": ..., **scores}` dicts.
    """

    def __init__(
        self,
        translator,
        sources: Sequence[str],
        references: Sequence[str],
        step: tf.Variable,
        every: int,
        log_dir,
        best_dir=None,
        settings: Optional[dict] = None,
        lowercase: bool = False,
    ):
        super().__init__()
        if len(sources) != len(references) or not sources:
            raise ValueError(
                f"sources and references: need the same number of sentences, at least one; got {len(sources)} and "
                f"{len(references)}."
            )
        self.translator = translator
        self.sources = list(sources)
        self.references = list(references)
        self.step = step
        self.every = every
        self.log_dir = str(log_dir)
        self.best_dir = pathlib.Path(best_dir) if best_dir is not None else None
        self.settings = dict(settings or {})
        self.lowercase = lowercase
        self.writer = None
        self.last_evaluated = None
        self.evaluations = []
        self.best = None
        self._best_bleu = None
        self._manager = None
        if self.best_dir is not None:
            self._best_bleu = read_best_bleu(self.best_dir)
            if self._best_bleu is not None:
                self.best = self._read_best_json()

    def on_train_begin(self, logs=None):
        self.writer = tf.summary.create_file_writer(self.log_dir)
        # The start step was evaluated by the run that saved it (or is step 0, before any training).
        self.last_evaluated = int(self.step.numpy())
        if self.best_dir is not None:
            # Plain tf.Variable holding the score: saved and replaced with the weights, in one checkpoint.
            self._score = tf.Variable(-1.0, dtype=tf.float64, trainable=False)
            checkpoint = tf.train.Checkpoint(model=self.model, bleu=self._score)
            self._manager = tf.train.CheckpointManager(checkpoint, str(self.best_dir), max_to_keep=1)

    def on_epoch_end(self, epoch, logs=None):
        step = int(self.step.numpy())
        if step // self.every > self.last_evaluated // self.every:
            self.evaluate()

    def on_train_end(self, logs=None):
        if int(self.step.numpy()) > self.last_evaluated:
            self.evaluate()
        if self.writer is not None:
            self.writer.close()

    def evaluate(self) -> dict:
        """Translates, scores, logs and (when better) keeps the model now; returns the scores."""
        step = int(self.step.numpy())
        start = time.perf_counter()
        hypotheses = [hypotheses[0][0] for hypotheses in self.translator(self.sources)]
        scores = score_translations(hypotheses, self.references, lowercase=self.lowercase)
        seconds = time.perf_counter() - start
        self.last_evaluated = step
        self.evaluations.append({"step": step, **scores})
        # record_if(True): Keras' TensorBoard callback records only every update_freq-th batch while fitting.
        with self.writer.as_default(step=step), tf.summary.record_if(True):
            for name in SCALARS:
                tf.summary.scalar(f"validation/{name}", scores[name])
        self.writer.flush()
        outcome = ""
        if self._manager is not None:
            if self._best_bleu is None or scores["bleu"] > self._best_bleu:
                outcome = f"; new best, kept as {self._keep(step, scores)}"
            else:
                outcome = f"; best {self._best_bleu:.2f} at step {(self.best or {}).get('step', '?')}"
        logger.info(
            "step %d: validation BLEU %.2f%s, chrF %.2f, tokenized lowercased BLEU %.2f on %d sentences (%.1f s)%s",
            step, scores["bleu"], " (lowercased)" if self.lowercase else "", scores["chrf"], scores["tok_lower_bleu"],
            len(self.sources), seconds, outcome,
        )  # fmt: skip
        return scores

    def _keep(self, step: int, scores: dict) -> str:
        self._score.assign(scores["bleu"])
        path = self._manager.save(checkpoint_number=step)
        self._best_bleu = scores["bleu"]
        self.best = {"step": step, "checkpoint": pathlib.Path(path).name, **scores, "settings": self.settings}
        write_atomically(self.best_dir / BEST_JSON, json.dumps(self.best, indent=2) + "\n")
        return path

    def _read_best_json(self) -> dict:
        path = self.best_dir / BEST_JSON
        best = json.loads(path.read_text()) if path.is_file() else {}
        if not math.isclose(best.get("bleu", math.nan), self._best_bleu, rel_tol=1e-9):
            # A crash between the checkpoint and best.json left none, or the previous best's: the checkpoint,
            # which holds its own score, is the truth.
            name = pathlib.Path(tf.train.latest_checkpoint(str(self.best_dir))).name
            best = {"step": int(name.rsplit("-", 1)[-1]), "checkpoint": name, "bleu": self._best_bleu}
        old_settings = best.get("settings")
        if old_settings is not None and old_settings != self.settings:
            logger.warning(
                "The best validation BLEU so far (%.2f, %s) was measured with other settings (%s, now %s); new "
                "evaluations are still compared with it.",
                self._best_bleu, self.best_dir, old_settings, self.settings,
            )  # fmt: skip
        return best
