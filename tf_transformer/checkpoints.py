"""Trained models from a model directory: load one checkpoint for translation, average the last N checkpoints.

A model directory is what `tools/train.py` writes: `config.json` (the resolved `TransformerConfig`), `vocab/`
(the tokenizer) and `checkpoints/` (a `tf.train.CheckpointManager` folder of `ckpt-<step>` checkpoints of
`tf.train.Checkpoint(model=model, optimizer=optimizer)`). With validation BLEU on (`TrainConfig.bleu_every`),
`best/` holds the checkpoint with the best validation BLEU so far (its `model` part and its score) beside
`best.json` (its step and scores); `checkpoint="best"` loads it.

Reading uses `tf.train.Checkpoint(model=model)`: it matches the `model` part of the trainer's checkpoints
(whose optimizer part is ignored) and of averaged ones, and `assert_existing_objects_matched()` confirms
that every weight got a value. An averaged checkpoint has the trainer's `model` layout, so the trainer can
also restore it (with fresh Adam moments) to fine-tune from it.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import re
from typing import List, Optional, Tuple, Union

import numpy as np
import tensorflow as tf

from tf_transformer.config import ConfigError, TransformerConfig
from tf_transformer.data.errors import DataError
from tf_transformer.data.vocab import Tokenizer
from tf_transformer.files import write_atomically
from tf_transformer.models import Transformer

logger = logging.getLogger("tf_transformer")

# The model directory's layout, shared with the trainer that writes it (tf_transformer.training.trainer).
CONFIG_FILE = "config.json"
VOCAB_DIR = "vocab"
CHECKPOINT_DIR = "checkpoints"
AVERAGED_DIR = "averaged"
AVERAGED_JSON = "averaged_checkpoints.json"
BEST_DIR = "best"
BEST_JSON = "best.json"
# The `checkpoint=` name of the best checkpoint by validation BLEU (model_dir/best, its latest checkpoint).
BEST_CHECKPOINT = "best"

PathLike = Union[str, os.PathLike]


def weights_checkpoint(model) -> tf.train.Checkpoint:
    """The `tf.train.Checkpoint` of a model's weights: the `model` part of the trainer's checkpoints.

    Read with `.read(path).expect_partial()` (a trainer checkpoint also holds the optimizer); save with a
    `tf.train.CheckpointManager`.
    """
    return tf.train.Checkpoint(model=model)


def load_translation_model(
    model_dir: PathLike, checkpoint: Optional[PathLike] = None, *, average_last: Optional[int] = None
) -> Tuple[Transformer, Tokenizer, TransformerConfig]:
    """The model, tokenizer and config of a trained model directory, with a checkpoint's weights.

    Args:
        model_dir: a folder written by `tools/train.py` (config.json, vocab/, checkpoints/).
        checkpoint: None for the latest checkpoint in `model_dir/checkpoints`; "best" for the best checkpoint
            by validation BLEU (`model_dir/best`, kept by the trainer with `bleu_every` and `keep_best`); else
            a checkpoint path prefix (`.../checkpoints/ckpt-60`, or what `average_checkpoints` returned) or a
            folder of checkpoints (its latest one, e.g. `model_dir/averaged`).
        average_last: instead of `checkpoint`, average the weights of the last N checkpoints in memory
            (as `average_checkpoints`, without writing anything).

    Returns:
        `(model, tokenizer, config)`: a built `Transformer` with the checkpoint's weights (use it with
        `training=False`; dropout is off then), the `Tokenizer` of `vocab/`, the `TransformerConfig`.

    Raises:
        FileNotFoundError: model_dir, its config.json, vocab/ or the checkpoint is missing.
        ValueError: the checkpoint does not hold this model's weights, the vocabulary does not match the
            config, or both `checkpoint` and `average_last` were given.
    """
    model_dir = pathlib.Path(model_dir)
    config, tokenizer = _read_model_dir(model_dir)
    model = _build(config)
    if average_last is not None:
        if checkpoint is not None:
            raise ValueError(
                "checkpoint and average_last: give one of them. Fix: pass a checkpoint to load, or average_last=N "
                "to average the last N checkpoints."
            )
        _load_average(model, _last_checkpoints(model_dir, average_last))
    else:
        path = _latest_checkpoint(model_dir) if checkpoint is None else resolve_checkpoint(checkpoint, model_dir)
        _read_weights(model, path)
        logger.info("Loaded %s", path)
    return model, tokenizer, config


def average_checkpoints(model_dir: PathLike, num_checkpoints: int = 5, output_dir: Optional[PathLike] = None) -> str:
    """Averages the weights of the last `num_checkpoints` checkpoints of `model_dir` into a new checkpoint.

    The paper averages the last 5 checkpoints (base model, written at 10-minute intervals) or the last 20
    (big). The checkpoints are the last N that `model_dir/checkpoints/checkpoint` lists (the
    `CheckpointManager` keeps the newest `--keep_checkpoints`), oldest first. Each trainable weight (all of a
    `Transformer`'s weights but the dropout RNG states, which no checkpoint holds) is averaged in float64
    and cast back to its dtype; a weight that is not floating point (none today) is taken from the last
    checkpoint. The result holds no optimizer state: fine-tuning from it starts with fresh Adam moments.

    The result is written with a `tf.train.CheckpointManager` (keeping one checkpoint) into `output_dir` as
    `ckpt-<step of the last averaged checkpoint>`: TensorFlow writes the files, then points the folder's
    `checkpoint` index at them, so a crash leaves no half-written checkpoint behind as the latest. Running
    it again with the same `output_dir` replaces the previous average. Beside it, `averaged_checkpoints.json`
    lists the checkpoints that were averaged. Load it with
    `load_translation_model(model_dir, checkpoint=<returned path>)` (or `checkpoint=output_dir`).

    Args:
        model_dir: a folder written by `tools/train.py`.
        num_checkpoints: N >= 1.
        output_dir: where to write; default `model_dir/averaged`. Not `model_dir/checkpoints`.

    Returns:
        The path prefix of the new checkpoint, e.g. `model_dir/averaged/ckpt-60`.

    Raises:
        FileNotFoundError: model_dir, config.json, vocab/ or the checkpoints are missing.
        ValueError: fewer than `num_checkpoints` checkpoints exist (the message says how many), a bad
            `num_checkpoints` or `output_dir`, or a checkpoint that does not hold this model's weights.
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
                "as MODEL_DIR/checkpoints/ckpt-1000, 'best', or a folder that tools/train.py or average_checkpoints "
                "wrote."
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


# ------------------------------------------------------------------------------------------------- helpers


def _read_model_dir(model_dir: pathlib.Path) -> Tuple[TransformerConfig, Tokenizer]:
    fix = "Fix: pass the --model_dir that tools/train.py wrote."
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model_dir: {model_dir} is not a folder. {fix}")
    config_path = model_dir / CONFIG_FILE
    if not config_path.is_file():
        raise FileNotFoundError(
            f"model_dir: {config_path} does not exist, so {model_dir} is not a trained model directory. {fix}"
        )
    try:
        config = TransformerConfig.from_json(config_path)
    except ConfigError as error:
        raise ValueError(f"{config_path}: not a valid TransformerConfig ({error}).") from None
    vocab_dir = model_dir / VOCAB_DIR
    if not vocab_dir.is_dir():
        raise FileNotFoundError(f"model_dir: {vocab_dir} does not exist (the model's vocabulary). {fix}")
    try:
        tokenizer = Tokenizer.from_directory(vocab_dir)
    except DataError as error:
        raise FileNotFoundError(f"model_dir: no usable vocabulary in {vocab_dir} ({error}).") from None
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
            f"{folder}: no checkpoints (no {folder / 'checkpoint'} index). Fix: train first (tools/train.py "
            f"--model_dir={model_dir}), or pass the model directory that holds the checkpoints."
        )
    paths = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
    if state.model_checkpoint_path not in paths:
        paths.append(state.model_checkpoint_path)
    return paths


def _latest_checkpoint(model_dir: pathlib.Path) -> str:
    return resolve_checkpoint(_checkpoint_paths(model_dir)[-1])


def _last_checkpoints(model_dir: pathlib.Path, num_checkpoints: int) -> List[str]:
    if isinstance(num_checkpoints, bool) or not isinstance(num_checkpoints, (int, np.integer)) or num_checkpoints < 1:
        raise ValueError(
            f"num_checkpoints: must be an int >= 1, got {num_checkpoints!r}. Fix: use e.g. 5 (the paper's base "
            "model) or 20 (big)."
        )
    paths = _checkpoint_paths(model_dir)
    if len(paths) < num_checkpoints:
        names = ", ".join(os.path.basename(path) for path in paths)
        raise ValueError(
            f"num_checkpoints: asked to average the last {num_checkpoints} checkpoints, but "
            f"{model_dir / CHECKPOINT_DIR} has only {len(paths)} ({names}). Fix: average {len(paths)} or fewer, "
            "or train longer and keep more checkpoints (tools/train.py --keep_checkpoints)."
        )
    return [resolve_checkpoint(path) for path in paths[-num_checkpoints:]]


def _read_weights(model: Transformer, path: str) -> None:
    """Reads every trainable weight of `model` from the checkpoint `path`, or raises a ValueError."""
    try:
        status = weights_checkpoint(model).read(path).expect_partial()
        status.assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as error:
        raise ValueError(
            f"checkpoint {path} does not hold the weights of the model in config.json ({str(error)[:500]}). "
            "Fix: pass a checkpoint of this model directory (written by tools/train.py or average_checkpoints)."
        ) from None


def _load_average(model: Transformer, paths: List[str]) -> None:
    """Sets `model`'s weights to the mean of those in `paths` (float64 sums; non-float: the last checkpoint)."""
    variables = model.trainable_variables
    dtypes = [tf.as_dtype(variable.dtype) for variable in variables]  # Keras variables name their dtype
    sums = {i: np.zeros(variable.shape, np.float64) for i, variable in enumerate(variables) if dtypes[i].is_floating}
    for path in paths:
        _read_weights(model, path)
        for i, total in sums.items():
            total += variables[i].numpy().astype(np.float64)
    # After the loop every variable holds the last checkpoint's value: the non-float ones keep it.
    for i, total in sums.items():
        variables[i].assign((total / len(paths)).astype(dtypes[i].as_numpy_dtype))
    logger.info("Averaged the weights of %d checkpoints: %s", len(paths), ", ".join(paths))


def _step_of(path: str) -> Optional[int]:
    match = re.search(r"-(\d+)$", path)
    return int(match.group(1)) if match else None
