"""Fine-tuning (`tft-train --init_from`): a new model directory that starts from another one's weights and vocabulary.

The new run copies the source's vocabulary into its own `vocab/` (so the directory is self-contained), reads the
`model` part of one source checkpoint into a freshly built model, and trains with a fresh Adam optimizer from
step 0 on its own learning-rate schedule. A run whose model directory already holds checkpoints of its own
resumes them as usual and ignores `init_from`, so running the same command again after an interruption goes on.

The source is a model directory (its latest checkpoint) or a checkpoint prefix inside one: `checkpoints/ckpt-N`,
`best/ckpt-N`, or an average that `tft-average-checkpoints` wrote (`averaged/ckpt-N`, or its own folder, whose
`averaged_checkpoints.json` names the model directory). Only the weights come from the checkpoint: Adam's
moments, the step, the input position and the dropout generators start afresh.

The schedule (`fine_tuning_recipe`): the paper's warmup and inverse-square-root decay from step 0, with a short
warmup (`FINE_TUNING_WARMUP_STEPS`) up to the learning rate at which the source's training stopped, then decaying
from there. This is where the source's own schedule had taken the weights (OpenNMT-tf's `--checkpoint_path`
continues the source's step, and so that rate, too); restarting the source's full warmup would climb back to its
peak rate (2x the final rate of the Multi30k recipe), large steps that undo what the source learned on a small
new corpus. The short warmup is there for the fresh Adam moments: the first second-moment estimates come from a
handful of gradients (beta_2 = 0.98 averages over about 50 steps), and full-rate steps on them would jolt trained
weights; a few times that horizon settles them while costing little of a short fine-tuning run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import pathlib
import re
from typing import Optional, Sequence, Tuple

from tf_transformer.config import ConfigError, TransformerConfig
from tf_transformer.data.config import vocabulary_lowercases
from tf_transformer.files import write_atomically
from tf_transformer.model_dir import (
    AVERAGED_JSON,
    CHECKPOINT_DIR,
    CONFIG_FILE,
    DATA_CONFIG_FILE,
    VOCAB_DIR,
    VOCAB_RECORD,
)
from tf_transformer.recipe import Recipe

logger = logging.getLogger("tf_transformer")

# Steps of warmup of a fine-tuning run (see the module docstring): four times Adam's second-moment horizon of
# about 50 steps (beta_2 = 0.98), 10% of the paper's 4000 and of the Multi30k recipe's 2000.
FINE_TUNING_WARMUP_STEPS = 200

_FIX_PATH = (
    "Fix: pass a model directory that tft-train wrote (its latest checkpoint is used) or a checkpoint prefix inside "
    "one, such as MODEL_DIR/checkpoints/ckpt-1000 or MODEL_DIR/averaged."
)


@dataclasses.dataclass(frozen=True)
class InitSource:
    """What a fine-tuning run starts from (`find_init_source`).

    Attributes:
        init_from: the path as given.
        model_dir: the source model directory (config.json, vocab/).
        checkpoint: the checkpoint path prefix whose `model` part gives the weights.
        step: the source's optimizer step at that checkpoint (from its name `ckpt-<step>`; for an average, the
            newest averaged step), or None when the name holds none.
        recipe: the source's `Recipe` (`Recipe.of_model_dir`: its model config, with the vocabulary's size, and the
            training, subword and decoding settings it was trained with).
        vocab_type: "sentencepiece" or "wordpiece" (vocab/tokenizer.json).
        vocab_size: the source vocabulary's size.
        requested_vocab_size: the size its data_config.json asked for (WordPiece may build fewer), or None.
        lowercase: whether the vocabulary case-folds what it reads (`DataConfig.lowercase`).
    """

    init_from: str
    model_dir: pathlib.Path
    checkpoint: str
    step: Optional[int]
    recipe: Recipe
    vocab_type: str
    vocab_size: int
    requested_vocab_size: Optional[int] = None
    lowercase: bool = False

    @property
    def vocab_dir(self) -> pathlib.Path:
        return self.model_dir / VOCAB_DIR

    @property
    def config(self) -> TransformerConfig:
        """The source's model config."""
        return self.recipe.model

    def record(self) -> dict:
        """What train_config.json keeps under "initialized_from"."""
        return {"init_from": self.init_from, "model_dir": str(self.model_dir), "checkpoint": self.checkpoint,
                "step": self.step}  # fmt: skip

    def final_learning_rate(self) -> float:
        """The learning rate of the source's schedule at its step (at its peak when the step is unknown)."""
        from tf_transformer.training.schedule import WarmupSchedule

        warmup_steps, scale = self.recipe.training["warmup_steps"], self.recipe.training["learning_rate_scale"]
        step = self.step if self.step is not None else warmup_steps
        return float(WarmupSchedule(self.config.d_model, warmup_steps, scale)(step))


def peak_learning_rate(d_model: int, warmup_steps: int, learning_rate_scale: float) -> float:
    """The highest rate of the schedule, at the end of its warmup: `scale * (d_model * warmup)**-0.5`."""
    return learning_rate_scale * (d_model * warmup_steps) ** -0.5


def has_checkpoints(model_dir) -> bool:
    """Whether `model_dir/checkpoints` holds a checkpoint index or checkpoint files (a run to resume)."""
    folder = pathlib.Path(model_dir) / CHECKPOINT_DIR
    if not folder.is_dir():
        return False
    return (folder / "checkpoint").is_file() or any(folder.glob("ckpt-*.index"))


def find_init_source(init_from) -> InitSource:
    """The model directory, checkpoint and vocabulary that `init_from` names, checked (files only, no weights read).

    Raises:
        ConfigError: no such path, no checkpoint there, or no model directory (config.json and a complete vocab/)
            around the checkpoint.
    """
    from tf_transformer.checkpoints import resolve_checkpoint  # TensorFlow, for the checkpoint index

    text = os.fspath(init_from)
    path = pathlib.Path(text)
    if not text or not (path.exists() or pathlib.Path(text + ".index").is_file()):
        raise ConfigError(f"init_from: {text!r} does not exist. {_FIX_PATH}")
    if path.is_dir() and (path / CONFIG_FILE).is_file():
        model_dir, folder = path, path / CHECKPOINT_DIR
        if not has_checkpoints(model_dir):
            raise ConfigError(
                f"init_from: the model directory {text} holds no checkpoint ({folder} has none). Fix: train it first, "
                "or pass a checkpoint prefix (e.g. its averaged/ckpt-N)."
            )
    else:
        folder = path
        model_dir = None
    try:
        checkpoint = resolve_checkpoint(folder)
    except FileNotFoundError:
        raise ConfigError(
            f"init_from: {text} is neither a model directory (no {CONFIG_FILE}) nor a folder with a checkpoint index "
            f"nor a checkpoint prefix (no {text}.index). {_FIX_PATH}"
        ) from None
    if model_dir is None:
        model_dir = _model_dir_of(checkpoint)
    recipe, vocab_type, vocab_size, lowercase = _read_source(model_dir)
    requested = None
    try:
        requested = json.loads((model_dir / DATA_CONFIG_FILE).read_text(encoding="utf-8")).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        pass  # informative only: the vocabulary's own size is the truth
    match = re.search(r"ckpt-(\d+)$", checkpoint)
    step = int(match.group(1)) if match else None
    return InitSource(text, model_dir, checkpoint, step, recipe, vocab_type, vocab_size, requested, lowercase)


def fine_tuning_recipe(source: InitSource, overrides: Sequence[str] = ()) -> Recipe:
    """The recipe of a run that fine-tunes `source`: its recipe with `overrides` ("field=value") and the fine-tuning
    schedule.

    Unless an override sets it, `warmup_steps` is `FINE_TUNING_WARMUP_STEPS`, and unless an override sets it,
    `learning_rate_scale` is chosen so that the schedule's peak, `scale * (d_model * warmup_steps)**-0.5`, is the
    rate at which the source's training stopped (`InitSource.final_learning_rate`); see the module docstring.
    """
    given = {override.partition("=")[0].strip() for override in overrides}
    recipe = source.recipe.with_overrides(overrides)
    if "warmup_steps" not in given:
        recipe = recipe.replace(warmup_steps=FINE_TUNING_WARMUP_STEPS)
    warmup_steps = recipe.training["warmup_steps"]
    # A bad warmup_steps override is left to the run's TrainConfig, which refuses it naming the fix.
    if "learning_rate_scale" not in given and isinstance(warmup_steps, int) and warmup_steps > 0:
        scale = source.final_learning_rate() * math.sqrt(recipe.model.d_model * warmup_steps)
        recipe = recipe.replace(learning_rate_scale=float(f"{scale:.6g}"))  # a readable number in train_config.json
    return recipe


@dataclasses.dataclass(frozen=True)
class InitDefaults:
    """What `tft-train --init_from` takes for the settings the user did not give (`init_from_defaults`)."""

    recipe: Recipe
    vocab_type: str
    vocab_size: int
    lowercase: bool = False


def init_from_defaults(init_from, model_dir, overrides: Sequence[str] = ()) -> InitDefaults:
    """The recipe and vocabulary settings of `tft-train --init_from` without `--config` or `--vocab_*`.

    A fresh model directory: `fine_tuning_recipe(source, overrides)` and the source vocabulary's type and size.
    A model directory with checkpoints of its own (the same command run again): its own recipe
    (`Recipe.of_model_dir`, with `overrides`) and data_config.json's vocabulary settings, as the run started with;
    `init_from` is not read.
    """
    model_dir = pathlib.Path(model_dir)
    if has_checkpoints(model_dir) and (model_dir / CONFIG_FILE).is_file():
        recipe = Recipe.of_model_dir(model_dir).with_overrides(overrides)
        try:
            data = json.loads((model_dir / DATA_CONFIG_FILE).read_text(encoding="utf-8"))
            return InitDefaults(recipe, data["vocab_type"], data["vocab_size"], bool(data.get("lowercase", False)))
        except (OSError, ValueError, KeyError, TypeError):
            return InitDefaults(recipe, *_read_source(model_dir)[1:])
    source = find_init_source(init_from)
    return InitDefaults(fine_tuning_recipe(source, overrides), source.vocab_type, source.vocab_size, source.lowercase)


def check_fits(model_config: TransformerConfig, data_config, source: InitSource) -> None:
    """Refuses a model or data config the source's weights and vocabulary do not fit, naming the field and the fix.

    Raises:
        ConfigError: a model field that shapes weights (not in `TransformerConfig.CHANGEABLE_FIELDS`) differs from
            the source's (vocab_size may be the vocabulary's size or the size its data config asked for), or the
            data config asks for another vocabulary (`vocab_type`, `vocab_size`, `lowercase`).
    """
    sizes = {source.vocab_size, source.requested_vocab_size} - {None}
    here, there = model_config.to_dict(), source.config.to_dict()
    # target_vocab_size: the trainer resolves the target vocabulary to the shared one.
    ignored = {*TransformerConfig.CHANGEABLE_FIELDS, "target_vocab_size"}
    changed = [
        name for name in here
        if name not in ignored and here[name] != there.get(name) and not (name == "vocab_size" and here[name] in sizes)
    ]  # fmt: skip
    if changed:
        details = ", ".join(f"{name} {here[name]!r} here, {there.get(name)!r} there" for name in changed)
        sets = " ".join(f"--override={name}={json.dumps(there.get(name))}" for name in changed)
        raise ConfigError(
            f"{', '.join(changed)}: the model config differs from that of --init_from's model "
            f"({source.model_dir / CONFIG_FILE}: {details}), whose weights would not fit. Fix: leave --config out (the "
            f"model config then comes from --init_from), or set the same values ({sets})."
        )
    what = f"--init_from's vocabulary ({source.vocab_dir}: {source.vocab_type}, {source.vocab_size} pieces)"
    fix = "Fix: leave the flag out: the vocabulary comes from --init_from (copied into the new model directory)."
    if data_config.vocab_type != source.vocab_type:
        raise ConfigError(f"vocab_type: {data_config.vocab_type!r} asks for another vocabulary than {what}. {fix}")
    if data_config.vocab_size not in sizes:
        raise ConfigError(f"vocab_size: {data_config.vocab_size} asks for another vocabulary than {what}. {fix}")
    if data_config.lowercase != source.lowercase:
        cased = "a lowercasing" if source.lowercase else "a cased"
        raise ConfigError(
            f"lowercase: {data_config.lowercase} asks for another vocabulary than {what}, {cased} one. {fix}"
        )


def copy_vocabulary(source: InitSource, vocab_dir) -> None:
    """Copies the source's vocabulary files into `vocab_dir` (each atomically, tokenizer.json last); nothing to do
    when `vocab_dir` holds the same files already (an earlier start of this run).

    Raises:
        ConfigError: `vocab_dir` holds another complete vocabulary.
    """
    vocab_dir = pathlib.Path(vocab_dir)
    names = sorted(item.name for item in source.vocab_dir.iterdir() if item.is_file())
    if (vocab_dir / VOCAB_RECORD).is_file():
        differing = [
            name for name in names
            if name != VOCAB_RECORD and (not (vocab_dir / name).is_file() or
                                          (vocab_dir / name).read_bytes() != (source.vocab_dir / name).read_bytes())
        ]  # fmt: skip
        if differing:
            raise ConfigError(
                f"init_from: {vocab_dir} holds another vocabulary than {source.vocab_dir} ({differing[0]} differs), "
                "from an earlier run in this model directory. Fix: use a new --model_dir for the fine-tuning run."
            )
        return
    vocab_dir.mkdir(parents=True, exist_ok=True)
    for name in [name for name in names if name != VOCAB_RECORD] + [VOCAB_RECORD]:
        write_atomically(vocab_dir / name, (source.vocab_dir / name).read_bytes())
    logger.info("Copied the vocabulary of %s into %s.", source.vocab_dir, vocab_dir)


def check_readable(source: InitSource) -> None:
    """Reads every tensor of the source checkpoint once, so that a damaged one stops the run before it writes.

    Raises:
        CheckpointError: a missing, truncated or corrupted file, naming it.
    """
    from tf_transformer.checkpoints import CheckpointError
    from tf_transformer.checkpoints import check_readable as check_files

    try:
        check_files(source.checkpoint)
    except CheckpointError as error:
        raise CheckpointError(
            f"init_from: {error} Fix: pass another checkpoint of {source.model_dir} (e.g. an older "
            f"{source.model_dir / CHECKPOINT_DIR}/ckpt-N), or restore its files.",
            error.path,
        ) from None


def initialize_weights(model, source: InitSource) -> None:
    """Sets every trainable weight of the built `model` from the `model` part of the source checkpoint.

    The checkpoint is read into a fresh, uncompiled `Transformer` of the model's config, whose values are then
    assigned: a compiled model tracks its optimizer, so reading into it directly would also restore the source's
    Adam moments and step, which a fine-tuning run starts afresh.

    Raises:
        CheckpointError: the checkpoint cannot be read, or holds weights of another shape.
    """
    from tf_transformer.checkpoints import CheckpointError, read_checkpoint, weights_checkpoint
    from tf_transformer.models import Transformer

    reader = Transformer(model.config)  # outside any strategy scope: plain variables, read once
    reader.build()
    try:
        read_checkpoint(weights_checkpoint(reader), source.checkpoint, partial=True)
    except CheckpointError as error:
        raise CheckpointError(
            f"init_from: {error} Fix: pass a checkpoint of a model directory that tft-train wrote, with the model "
            f"config of {source.model_dir / CONFIG_FILE}.",
            error.path,
            error.unreadable,
        ) from None
    targets, values = model.trainable_variables, reader.trainable_variables

    def layout(variables):  # the paths below the model's own (auto-numbered) name, and the shapes
        return [(variable.path.split("/", 1)[-1], tuple(variable.shape)) for variable in variables]

    if layout(targets) != layout(values):
        raise ValueError("initialize_weights: the model's variables differ from those of a Transformer of its config.")
    for target, value in zip(targets, values, strict=True):
        target.assign(value.value)


# ------------------------------------------------------------------------------------------------- helpers


def _model_dir_of(checkpoint: str) -> pathlib.Path:
    """The model directory around a checkpoint: the parent of its folder (checkpoints/, averaged/, best/), or the
    one named by the folder's averaged_checkpoints.json (an average written elsewhere)."""
    folder = pathlib.Path(checkpoint).parent
    candidates = [folder.parent, folder]
    try:
        candidates.insert(0, pathlib.Path(json.loads((folder / AVERAGED_JSON).read_text())["model_dir"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    for candidate in candidates:
        if (candidate / CONFIG_FILE).is_file() and (candidate / VOCAB_DIR).is_dir():
            return candidate
    raise ConfigError(
        f"init_from: no model directory (config.json and vocab/) around the checkpoint {checkpoint}; looked in "
        f"{', '.join(str(candidate) for candidate in candidates)}. {_FIX_PATH}"
    )


def _read_source(model_dir: pathlib.Path) -> Tuple[Recipe, str, int, bool]:
    """The recipe and the vocabulary's type, size and case folding of a model directory, without loading the
    tokenizer."""
    try:
        recipe = Recipe.of_model_dir(model_dir)
    except ConfigError as error:
        raise ConfigError(f"init_from: {model_dir / CONFIG_FILE} is not a valid model config ({error}).") from None
    marker = model_dir / VOCAB_DIR / VOCAB_RECORD
    try:
        meta = json.loads(marker.read_text(encoding="utf-8"))
        vocab_type, vocab_size = meta["type"], int(meta["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError(
            f"init_from: {model_dir / VOCAB_DIR} holds no complete vocabulary ({marker} is missing or unreadable). "
            f"{_FIX_PATH}"
        ) from None
    if vocab_size != recipe.model.vocab_size:
        raise ConfigError(
            f"init_from: {marker} has {vocab_size} tokens but {model_dir / CONFIG_FILE} says vocab_size="
            f"{recipe.model.vocab_size}. Fix: pass a model directory whose vocab/ and config.json come from one "
            "training run."
        )
    return recipe, vocab_type, vocab_size, vocabulary_lowercases(meta)

