"""Training on a generated copy or reversal task: the quickest end-to-end check of a setup."""

from __future__ import annotations

import os
import pathlib
import time
from typing import Optional

import keras

from tf_transformer.config import TransformerConfig
from tf_transformer.data.synthetic import FIRST_SYMBOL, synthetic_translation_dataset
from tf_transformer.models import Transformer
from tf_transformer.training.losses import MaskedCrossEntropy
from tf_transformer.training.metrics import MaskedAccuracy
from tf_transformer.training.optimizer import make_optimizer

NUM_SYMBOLS = 20
# How the tasks train (`TrainConfig` fields, e.g. `TrainConfig(model_dir=..., **TRAINING)`): runs of a few hundred
# steps, so a short warmup; no label smoothing.
TRAINING = dict(warmup_steps=200, learning_rate_scale=1.0, label_smoothing=0.0)


def synthetic_task_config(**changes) -> TransformerConfig:
    """A small model that learns the generated tasks in a minute or two of CPU."""
    values = dict(
        vocab_size=FIRST_SYMBOL + NUM_SYMBOLS,
        d_model=64,
        d_ff=256,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dropout=0.0,
        max_length=64,
    )
    values.update(changes)
    return TransformerConfig(**values)


def train_synthetic_task(
    task: str = "reverse",
    config: Optional[TransformerConfig] = None,
    steps: int = 800,
    batch_size: int = 64,
    max_length: int = 12,
    seed: int = 0,
    model_dir: Optional[str] = None,
    verbose: int = 2,
) -> dict:
    """Trains a `Transformer` with `model.fit` on a generated task and evaluates it on held-out pairs.

    Args:
        task: "copy" or "reverse".
        config: the model; default `synthetic_task_config()`. Its vocabulary must hold the symbols.
        steps: training steps (batches).
        batch_size: sentence pairs per batch.
        max_length: longest generated sequence.
        seed: seeds weights, data and dropout.
        model_dir: if given, the trained model (`model.keras`) and its config (`config.json`) go there.
        verbose: Keras progress output (0 silent, 1 progress bar, 2 one line per epoch).

    Returns:
        A dict: task, steps, train_seconds, held-out loss and token accuracy, and the model path if saved.
    """
    config = config or synthetic_task_config()
    if config.vocab_size < FIRST_SYMBOL + NUM_SYMBOLS:
        raise ValueError(
            f"vocab_size: the {task} task needs {FIRST_SYMBOL + NUM_SYMBOLS} ids, the config has "
            f"{config.vocab_size}. Fix: raise vocab_size."
        )
    keras.utils.set_random_seed(seed)
    model = Transformer(config)
    model.compile(
        optimizer=make_optimizer(config.d_model, TRAINING["warmup_steps"], TRAINING["learning_rate_scale"]),
        loss=MaskedCrossEntropy(TRAINING["label_smoothing"], pad_id=config.pad_id),
        metrics=[MaskedAccuracy(config.pad_id)],
    )
    shape = dict(
        num_symbols=NUM_SYMBOLS, min_length=4, max_length=max_length, bos_id=config.bos_id, eos_id=config.eos_id
    )
    train = synthetic_translation_dataset(
        task, max(steps * batch_size // 4, 1000), batch_size, seed=seed, repeat=True, **shape
    )
    held_out_pairs, held_out_batch = 1000, 200
    held_out = synthetic_translation_dataset(
        task, held_out_pairs, held_out_batch, seed=seed + 1, shuffle=False, **shape
    )
    epochs = 4
    started = time.time()
    # shuffle=False: the dataset shuffles itself (Keras would warn that it ignores shuffle=True).
    model.fit(
        train,
        steps_per_epoch=max(steps // epochs, 1),
        epochs=epochs,
        validation_data=held_out,
        shuffle=False,
        verbose=verbose,
    )
    train_seconds = time.time() - started
    results = model.evaluate(held_out, verbose=0, return_dict=True)
    summary = {
        "task": task,
        "steps": int(model.optimizer.iterations.numpy()),
        "train_seconds": round(train_seconds, 1),
        "held_out_loss": float(results["loss"]),
        "held_out_token_accuracy": float(results["masked_accuracy"]),
    }
    if model_dir:
        directory = pathlib.Path(model_dir)
        directory.mkdir(parents=True, exist_ok=True)
        config.to_json(directory / "config.json")
        temporary = directory / ".model.keras.tmp.keras"
        model.save(temporary)
        os.replace(temporary, directory / "model.keras")  # never a half-written model.keras
        summary["model"] = str(directory / "model.keras")
    return summary
