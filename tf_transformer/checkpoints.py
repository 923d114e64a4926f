"""Trained models from a model directory: load one checkpoint for translation, average the last N checkpoints.

A model directory is what `tft-train` writes: `config.json` (the resolved `TransformerConfig`), `vocab/`
(the tokenizer) and `checkpoints/` (a `tf.train.CheckpointManager` folder of `ckpt-<step>` checkpoints of
`tf.train.Checkpoint(model=model, optimizer=optimizer)`). With validation BLEU on (`TrainConfig.bleu_every`),
`best/` holds the checkpoint with the best validation BLEU so far (its `model` part and its score) beside
`best.json` (its step and scores); `checkpoint="best"` loads it.

Reading uses `tf.train.Checkpoint(model=model)`: it matches the `model` part of the trainer's checkpoints
(whose optimizer part is ignored) and of averaged ones, and `assert_existing_objects_matched()` confirms
that every weight got a value. An averaged checkpoint has the trainer's `model` layout, so the trainer can
also restore it (with fresh Adam moments) to fine-tune from it.

A checkpoint that cannot be read (a missing or truncated data file, a corrupted index: a full disk, a partial
copy, a storage error) raises `CheckpointError`, whose message names the checkpoint, what is wrong and the fix.
The trainer resumes from the newest readable checkpoint instead (`restore_newest_readable`).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import pathlib
import re
import shutil
import time
from typing import List, Optional, Tuple, Union

import numpy as np
import tensorflow as tf

from tf_transformer.checkpoint_files import checkpoint_files_problem, too_few_checkpoints, unreadable_checkpoint_fix
from tf_transformer.config import ConfigError, TransformerConfig
from tf_transformer.data.errors import DataError
from tf_transformer.data.tokenizer import Tokenizer, check_special_ids
from tf_transformer.errors import CheckpointError  # defined there for the commands (no TensorFlow); re-exported
from tf_transformer.errors import require_tensorflow_backend
from tf_transformer.files import write_atomically
from tf_transformer.model_dir import (  # noqa: F401 (the layout's names stay importable from checkpoints)
    AVERAGED_DIR,
    AVERAGED_JSON,
    BEST_CHECKPOINT,
    BEST_DIR,
    BEST_JSON,
    CHECKPOINT_DIR,
    CONFIG_FILE,
    MODEL_DIR_FIX,
    UNREADABLE_DIR,
    VOCAB_DIR,
    check_model_dir,
)
from tf_transformer.models import Transformer

logger = logging.getLogger("tf_transformer")


PathLike = Union[str, os.PathLike]


# What TensorFlow's checkpoint reader raises for damaged files: OpError kinds from the C++ reader (a missing
# data file, "not an sstable" for a corrupted index) and IndexError ("Read less bytes than requested") from
# its Python wrapper for a truncated data file.
_DAMAGED_FILE_ERRORS = (tf.errors.OpError, IndexError, OSError)


def weights_checkpoint(model) -> tf.train.Checkpoint:
    """The `model` part of the trainer's checkpoints (they also hold the optimizer: read them `partial=True`)."""
    return tf.train.Checkpoint(model=model)


def load_translation_model(
    model_dir: PathLike, checkpoint: Optional[PathLike] = None, *, average_last: Optional[int] = None
) -> Tuple[Transformer, Tokenizer, TransformerConfig]:
    """The model, tokenizer and config of a trained model directory, with a checkpoint's weights.

    Args:
        model_dir: a folder written by `tft-train` (config.json, vocab/, checkpoints/).
        checkpoint: None for the latest checkpoint; "best" for the best by validation BLEU (`model_dir/best`,
            kept with `bleu_every`); else a checkpoint path prefix (`.../checkpoints/ckpt-60`) or a folder of
            checkpoints (its latest one, e.g. `model_dir/averaged`).
        average_last: instead of `checkpoint`, the mean weights of the last N checkpoints (in memory only).

    Returns:
        `(model, tokenizer, config)`: a built `Transformer` (call it with `training=False`), the `Tokenizer`
        of `vocab/`, the `TransformerConfig`. The model computes in Keras' global dtype policy (float32 unless
        set): `keras.config.set_dtype_policy("mixed_bfloat16")` before loading gives float32 weights computing
        in bf16, with float32 logits (the decoding commands' --mixed_precision does that).

    Raises:
        FileNotFoundError: model_dir, its config.json, vocab/ or the checkpoint is missing.
        CheckpointError: the checkpoint cannot be read (damaged files) or holds other weights.
        ValueError: an unusable config.json or vocab/ (ConfigError, DataError), a vocabulary that does not match
            the config, or both `checkpoint` and `average_last`.

    Example:
        model, tokenizer, config = load_translation_model("runs/multi30k", checkpoint="best")
        translate_texts(model, tokenizer, ["Ein Hund läuft im Schnee."])  # [[(translation, score)]]
    """
    require_tensorflow_backend("load_translation_model (a model directory's tf.train checkpoints)")
    model_dir = pathlib.Path(model_dir)
    config, tokenizer = _read_model_dir(model_dir)
    model = _build(config)
    if average_last is not None:
        if checkpoint is not None:
            raise ValueError(
                "checkpoint and average_last: give one of them. Fix: pass a checkpoint to load, or average_last=N "
                "to average the last N checkpoints."
            )
        _load_average(model, _last_checkpoints(model_dir, average_last, "average_last"))
    else:
        path = _latest_checkpoint(model_dir) if checkpoint is None else resolve_checkpoint(checkpoint, model_dir)
        _read_weights(model, path)
        logger.info("Loaded %s", path)
    return model, tokenizer, config


def average_checkpoints(model_dir: PathLike, num_checkpoints: int = 5, output_dir: Optional[PathLike] = None) -> str:
    """Writes the mean weights of the last `num_checkpoints` checkpoints of `model_dir` as a new checkpoint.

    The paper averages the last 5 checkpoints (base model) or 20 (big). Weights are summed in float64 and cast
    back to their dtype. The result holds no optimizer state (fine-tuning from it starts with fresh Adam
    moments); it replaces an earlier average in `output_dir`, and `averaged_checkpoints.json` beside it lists
    the checkpoints averaged. TensorFlow writes the files before it points the folder's index at them, so a
    crash leaves no half-written checkpoint as the latest.

    Args:
        model_dir: a folder written by `tft-train`.
        num_checkpoints: N >= 1.
        output_dir: where to write; default `model_dir/averaged`; neither `checkpoints/` nor `best/`.

    Returns:
        The path prefix of the new checkpoint, `ckpt-<step of the last averaged one>` in `output_dir`.

    Raises:
        FileNotFoundError: model_dir, config.json, vocab/ or the checkpoints are missing.
        CheckpointError: a checkpoint cannot be read (damaged files) or holds other weights.
        ValueError: fewer than `num_checkpoints` checkpoints (the message says how many), a bad `num_checkpoints`
            or `output_dir`, an unusable config.json or vocab/ (ConfigError, DataError).

    Example:
        path = average_checkpoints("runs/multi30k", num_checkpoints=5)  # "runs/multi30k/averaged/ckpt-<step>"
        model, tokenizer, config = load_translation_model("runs/multi30k", checkpoint=path)
    """
    model_dir = pathlib.Path(model_dir)
    config, _ = _read_model_dir(model_dir)
    paths = _last_checkpoints(model_dir, num_checkpoints)
    output_dir = pathlib.Path(output_dir) if output_dir is not None else model_dir / AVERAGED_DIR
    for folder, what in ((CHECKPOINT_DIR, "the training checkpoint folder"), (BEST_DIR, "the best-checkpoint folder")):
        if output_dir.resolve() == (model_dir / folder).resolve():
            raise ValueError(
                f"output_dir: {output_dir} is {what}, whose checkpoints the average would replace. Fix: use "
                f"another folder (the default is {model_dir / AVERAGED_DIR})."
            )
    model = _build(config)
    _load_average(model, paths)
    output_dir.mkdir(parents=True, exist_ok=True)
    manager = tf.train.CheckpointManager(weights_checkpoint(model), str(output_dir), max_to_keep=1)
    step = _step_of(paths[-1])
    saved = manager.save(checkpoint_number=step)
    summary = {
        "checkpoint": saved,
        "num_checkpoints": len(paths),
        "averaged": paths,
        "steps": [_step_of(path) for path in paths],
        "model_dir": str(model_dir),
    }
    write_atomically(output_dir / AVERAGED_JSON, json.dumps(summary, indent=2) + "\n")
    logger.info("Averaged %d checkpoints into %s", len(paths), saved)
    return saved


def resolve_checkpoint(checkpoint: PathLike, model_dir: Optional[PathLike] = None) -> str:
    """The checkpoint path prefix that `checkpoint` names: a prefix (`.../ckpt-60`) or a folder (its latest).

    With `model_dir`, the name "best" means the best checkpoint by validation BLEU, `model_dir/best` (write
    "./best" for a folder of that name in the working directory).

    Raises:
        FileNotFoundError: no such checkpoint, a folder without checkpoints, or "best" for a model directory
            that kept no best checkpoint.
    """
    text = os.fspath(checkpoint)
    if model_dir is not None and text == BEST_CHECKPOINT:
        folder = pathlib.Path(model_dir) / BEST_DIR
        if not folder.is_dir() or tf.train.latest_checkpoint(str(folder)) is None:
            raise FileNotFoundError(
                f"checkpoint: {BEST_CHECKPOINT!r} names the best checkpoint by validation BLEU, but {folder} holds "
                "none. Fix: train with --bleu_every=N (and --keep_best, the default) to keep it, or pass another "
                "checkpoint (leave --checkpoint out for the latest)."
            )
        text = str(folder)
    if os.path.isdir(text):
        latest = tf.train.latest_checkpoint(text)
        if latest is None:
            raise FileNotFoundError(
                f"checkpoint: the folder {text} holds no checkpoint index. Fix: pass a checkpoint path prefix such "
                "as MODEL_DIR/checkpoints/ckpt-1000, 'best', or a folder that tft-train or "
                "tft-average-checkpoints wrote."
            )
        return latest
    if text.endswith(".index") or ".data-" in os.path.basename(text):
        text = text[: text.rfind(".")] if text.endswith(".index") else text.split(".data-")[0]
    if not os.path.isfile(text + ".index"):
        raise FileNotFoundError(
            f"checkpoint: {text} is not a checkpoint ({text}.index does not exist). Fix: pass a path prefix such as "
            "MODEL_DIR/checkpoints/ckpt-1000 (the part before .index), 'best' (the best by validation BLEU), or "
            "leave it out for the latest checkpoint."
        )
    return text


def read_checkpoint(checkpoint: tf.train.Checkpoint, path: str, *, partial: bool = False) -> None:
    """Restores `checkpoint` from the checkpoint `path` and checks that every object of it got a value.

    Args:
        checkpoint: a `tf.train.Checkpoint` whose objects are built (their variables exist).
        path: a checkpoint path prefix (`.../ckpt-60`).
        partial: the file may hold more than `checkpoint` (a trainer checkpoint's optimizer, read for the
            model only).

    Raises:
        CheckpointError: the files are missing, truncated or corrupted (`unreadable` True), or they hold other
            weights (False). The message names the checkpoint and what is wrong; callers add the fix.
    """

    def restore(path):
        try:
            status = checkpoint.read(path).expect_partial() if partial else checkpoint.restore(path)
            status.assert_existing_objects_matched()
            # Every object of `checkpoint` got its value; what else the file holds (a training checkpoint's
            # input_state, read by the trainer on its own) is not an error to warn about.
            status.expect_partial()
        except (AssertionError, ValueError) as error:
            raise CheckpointError(
                f"checkpoint {path} does not hold the weights of the model in config.json ({_first_line(error)}).",
                path,
                unreadable=False,
            ) from None

    _read_or_raise(path, restore)


def check_readable(path: str) -> None:
    """Reads every tensor of the checkpoint `path` once: a damaged file raises a CheckpointError (without a fix)."""
    _read_or_raise(path, _read_every_tensor)


def restore_newest_readable(checkpoint: tf.train.Checkpoint, folder: PathLike, *, set_aside: bool) -> Optional[str]:
    """Restores `checkpoint` from the newest checkpoint in `folder` that can be read, as training resumes.

    The candidates are those the folder's `checkpoint` index lists, newest first; if the index itself cannot
    be read, the `ckpt-<step>` files found in the folder. Each one that cannot be read is logged as a warning
    naming its files and what is wrong, and the next older one is tried. With `set_aside` (the one process
    that writes the folder), the files of the unreadable ones are moved into `folder/unreadable/` (never
    deleted: a later save at the same step must not overwrite them) and the index is rewritten without them,
    so that the next save and the commands see only good checkpoints.

    Returns:
        The restored checkpoint's path, or None when the folder holds no checkpoint (a fresh run).

    Raises:
        CheckpointError: checkpoints exist but none can be read.
    """
    folder = os.fspath(folder)
    candidates, timestamps, index_readable = _resume_candidates(folder)
    unreadable = []
    restored = None
    for path in reversed(candidates):
        try:
            # Every tensor is read once before the restore, so that a damaged file never leaves the variables
            # half-assigned (or a deferred restoration queued) for the older checkpoint to miss.
            check_readable(path)
            read_checkpoint(checkpoint, path)
        except CheckpointError as error:
            logger.warning("%s Trying the next older checkpoint.", error)
            unreadable.append((path, str(error)))
            continue
        restored = path
        break
    if unreadable and restored is None:
        details = "; ".join(message for _, message in unreadable)
        raise CheckpointError(
            f"none of the {len(unreadable)} checkpoints in {folder} can be read ({details}). Fix: restore the files "
            "from a copy, or start afresh with a new --model_dir.",
            unreadable[0][0],
        )
    if set_aside and (unreadable or not index_readable):
        _set_aside(folder, [path for path, _ in unreadable], candidates, timestamps)
    if restored is not None:
        logger.info("Resumed from %s", restored)
    return restored


# ------------------------------------------------------------------------------------------------- helpers


def _resume_candidates(folder: str) -> Tuple[List[str], dict, bool]:
    """The checkpoints of a trainer's folder, oldest first, their timestamps, and whether its index was usable."""
    if not os.path.isdir(folder):
        return [], {}, True
    state = tf.train.get_checkpoint_state(folder)  # None, with a logged warning, if the index is unreadable
    if state is not None and state.model_checkpoint_path:
        paths = [_listed(path) for path in state.all_model_checkpoint_paths]
        latest = _listed(state.model_checkpoint_path)
        if latest not in paths:
            paths.append(latest)
        timestamps = dict(zip(paths, state.all_model_checkpoint_timestamps, strict=False))
        return paths, timestamps, True
    found = sorted(
        (int(match.group(1)), os.path.join(folder, name[: -len(".index")]))
        for name in os.listdir(folder)
        if (match := re.fullmatch(r"ckpt-(\d+)\.index", name))
    )
    if found:
        logger.warning(
            "The checkpoint index %s is missing or unreadable; resuming from the newest of the %d checkpoint files "
            "found beside it.",
            os.path.join(folder, "checkpoint"),
            len(found),
        )
    paths = [path for _, path in found]
    return paths, {path: os.path.getmtime(path + ".index") for path in paths}, not found


def _set_aside(folder: str, unreadable: List[str], candidates: List[str], timestamps: dict) -> None:
    """Moves the files of unreadable checkpoints into folder/unreadable and rewrites the index without them."""
    target = os.path.join(folder, UNREADABLE_DIR)
    os.makedirs(target, exist_ok=True)
    for path in unreadable:
        for name in glob.glob(glob.escape(path) + ".*"):
            shutil.move(name, os.path.join(target, os.path.basename(name)))
        logger.warning("Moved the files of the unreadable checkpoint %s into %s (kept, not deleted).", path, target)
    kept = [path for path in candidates if path not in unreadable]
    if kept:
        _write_index(folder, kept, timestamps)


def _write_index(folder: str, paths: List[str], timestamps: dict) -> None:
    """Writes the folder's `checkpoint` index (a text CheckpointState, as CheckpointManager reads it), atomically.

    TensorFlow's own writer for it is deprecated; the format is the text proto that `get_checkpoint_state`
    parses (a test reads it back through a CheckpointManager).
    """
    lines = [f"model_checkpoint_path: {json.dumps(os.path.basename(paths[-1]))}"]
    lines += [f"all_model_checkpoint_paths: {json.dumps(os.path.basename(path))}" for path in paths]
    # The manager rotates (keep_checkpoints) only checkpoints newer than last_preserved_timestamp.
    stamps = [timestamps.get(path, time.time()) for path in paths]
    lines += [f"all_model_checkpoint_timestamps: {stamp!r}" for stamp in stamps]
    lines.append(f"last_preserved_timestamp: {min(stamps) - 1.0!r}")
    write_atomically(os.path.join(folder, "checkpoint"), "\n".join(lines) + "\n")


def _read_or_raise(path: str, read) -> None:
    """Runs `read(path)` on a checkpoint after checking its files; a damaged file is a `CheckpointError`."""
    problem = checkpoint_files_problem(path)
    if problem is None:
        try:
            read(path)
            return
        except _DAMAGED_FILE_ERRORS as error:
            problem = _describe_read_error(error)
    raise CheckpointError(f"checkpoint {path} cannot be read: {problem}.", path)


def _read_every_tensor(path: str) -> None:
    reader = tf.train.load_checkpoint(path)
    for name in reader.get_variable_to_shape_map():
        reader.get_tensor(name)


def _describe_read_error(error: Exception) -> str:
    if isinstance(error, IndexError):
        return "a data file is shorter than its index says (truncated: an interrupted write or copy, or a full disk)"
    text = _first_line(error)
    if "sstable" in text:
        return f"its index file is corrupted ({text})"
    return text


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:300] if lines else type(error).__name__


def _read_model_dir(model_dir: pathlib.Path) -> Tuple[TransformerConfig, Tokenizer]:
    config_path = check_model_dir(model_dir) / CONFIG_FILE
    try:
        config = TransformerConfig.from_json(config_path)
    except ConfigError as error:  # the package's own type, with the file named
        raise ConfigError(f"{config_path}: not a valid TransformerConfig ({error}).") from None
    check_special_ids(config)
    vocab_dir = model_dir / VOCAB_DIR
    if not vocab_dir.is_dir():
        raise FileNotFoundError(f"model_dir: {vocab_dir} does not exist (the model's vocabulary). {MODEL_DIR_FIX}")
    try:
        tokenizer = Tokenizer.from_directory(vocab_dir)
    except DataError as error:
        raise DataError(f"model_dir: no usable vocabulary in {vocab_dir} ({error}).") from None
    if tokenizer.vocab_size != config.output_vocab_size or tokenizer.vocab_size != config.vocab_size:
        raise ValueError(
            f"{vocab_dir} has {tokenizer.vocab_size} tokens but {config_path} says vocab_size={config.vocab_size} "
            f"(output vocabulary {config.output_vocab_size}). Fix: use the vocab/ and config.json of one training run."
        )
    return config, tokenizer


def _build(config: TransformerConfig) -> Transformer:
    model = Transformer(config)
    model.build()  # creates every variable, so that a restore fills them now and can be checked
    return model


def _checkpoint_paths(model_dir: pathlib.Path) -> List[str]:
    """The checkpoints `model_dir/checkpoints` lists, oldest first."""
    folder = model_dir / CHECKPOINT_DIR
    state = tf.train.get_checkpoint_state(str(folder)) if folder.is_dir() else None
    if state is None or not state.model_checkpoint_path:
        raise FileNotFoundError(
            f"{folder}: no checkpoints (no {folder / 'checkpoint'} index). Fix: train first (tft-train "
            f"--model_dir={model_dir}), or pass the model directory that holds the checkpoints."
        )
    paths = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
    if state.model_checkpoint_path not in paths:
        paths.append(state.model_checkpoint_path)
    return paths


def _latest_checkpoint(model_dir: pathlib.Path) -> str:
    return resolve_checkpoint(_checkpoint_paths(model_dir)[-1])


def _last_checkpoints(model_dir: pathlib.Path, num_checkpoints: int, name: str = "num_checkpoints") -> List[str]:
    if isinstance(num_checkpoints, bool) or not isinstance(num_checkpoints, (int, np.integer)) or num_checkpoints < 1:
        raise ValueError(
            f"{name}: must be an int >= 1, got {num_checkpoints!r}. Fix: use e.g. 5 (the paper's base "
            "model) or 20 (big)."
        )
    paths = _checkpoint_paths(model_dir)
    problem = too_few_checkpoints(model_dir / CHECKPOINT_DIR, paths, num_checkpoints, name)
    if problem is not None:
        raise ValueError(problem)
    return [resolve_checkpoint(path) for path in paths[-num_checkpoints:]]


def _read_weights(model: Transformer, path: str) -> None:
    """Reads every trainable weight of `model` from the checkpoint `path`, or raises a CheckpointError."""
    try:
        read_checkpoint(weights_checkpoint(model), path, partial=True)
    except CheckpointError as error:
        if not error.unreadable:
            fix = "pass a checkpoint of this model directory (written by tft-train or tft-average-checkpoints)"
        else:
            fix = unreadable_checkpoint_fix(path)
        raise CheckpointError(f"{error} Fix: {fix}.", error.path, error.unreadable) from None


def _load_average(model: Transformer, paths: List[str]) -> None:
    """Sets `model`'s weights to the mean of those in `paths` (float64 sums; non-float: the last checkpoint)."""
    variables = model.trainable_variables
    dtypes = [tf.as_dtype(variable.dtype) for variable in variables]  # Keras variables name their dtype
    sums = {i: np.zeros(variable.shape, np.float64) for i, variable in enumerate(variables) if dtypes[i].is_floating}
    for path in paths:
        try:
            read_checkpoint(weights_checkpoint(model), path, partial=True)
        except CheckpointError as error:
            if not error.unreadable:
                raise CheckpointError(
                    f"{error} Fix: average checkpoints of one training run.", path, unreadable=False
                ) from None
            raise CheckpointError(
                f"{error} Fix: restore its files from a copy, or run the training command again: it resumes from "
                "the newest readable checkpoint, sets the unreadable one aside and writes new ones.",
                path,
            ) from None
        for i, total in sums.items():
            total += variables[i].numpy().astype(np.float64)
    # After the loop every variable holds the last checkpoint's value: the non-float ones keep it.
    for i, total in sums.items():
        variables[i].assign((total / len(paths)).astype(dtypes[i].as_numpy_dtype))
    logger.info("Averaged the weights of %d checkpoints: %s", len(paths), ", ".join(paths))


def _listed(path: str) -> str:
    """A path as `get_checkpoint_state` lists it (already joined with the folder it was asked about), normalised."""
    return os.path.normpath(path)


def _step_of(path: str) -> Optional[int]:
    match = re.search(r"-(\d+)$", path)
    return int(match.group(1)) if match else None
