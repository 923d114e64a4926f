"""Time a training step of a model config on Multi30k batches, with and without what `tft-train` adds.

Three figures, milliseconds a step, for the same compiled model (Adam, the label-smoothed loss and the
trainer's metrics), so that the trainer's own overhead and the cost of variable batch shapes can be read off
against a run's `target_tokens_per_second` (benchmarks/NOTES.md entry 20):

- `fixed_batch`: one real batch of median length, repeated (`train_on_batch`; the bare step);
- `real_batches`: `--batches` real batches held in memory, passed twice: the first pass traces each new shape,
  the second is the steady state;
- `fit_live`: `model.fit` on the live input pipeline (shuffle, tokenize, bucket), `--fit_epochs` epochs of
  `--fit_steps` steps; the first epoch includes tracing.

    python benchmarks/trainer_steps.py --config=configs/multi30k.json --data_dir=../shared/data/multi30k

The vocabulary is built into a temporary folder first (the config's `vocab_size`; about 13 s for 1,000 pieces on
2 cores), or `--vocab_dir` names a folder to keep it in: built there when the folder has none, used as it is when it
has one (a `tft-build-vocab` or `tft-train` vocabulary). Prints one JSON object.

`--jit_compile` compiles the step with XLA, as `tft-train --jit_compile` does. XLA compiles each new batch
shape anew (tens of seconds each on a CPU), so for its steady-state step take one shape:

    python benchmarks/trainer_steps.py --jit_compile --batches=1 --fit_steps=0
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = pathlib.Path(__file__).resolve().parent.parent


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "configs" / "multi30k.json"), help="preset name or JSON file")
    parser.add_argument("--override", action="append", default=[], help="field=value, repeatable")
    parser.add_argument(
        "--data_dir", default=os.environ.get("MULTI30K_DIR", str(ROOT.parent / "shared" / "data" / "multi30k"))
    )
    parser.add_argument("--batch_tokens", type=int, default=4096)
    parser.add_argument("--mixed_precision", default="auto", help="auto, float32, mixed_bfloat16, mixed_float16")
    parser.add_argument("--batches", type=int, default=300, help="real batches held in memory")
    parser.add_argument("--fixed_steps", type=int, default=40)
    parser.add_argument("--fit_steps", type=int, default=150, help="steps of each fit epoch (0: skip fit_live)")
    parser.add_argument("--fit_epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jit_compile", action="store_true", help="compile the training step with XLA")
    parser.add_argument("--vocab_dir", help="a vocabulary folder: used if it has one, else built there and kept")
    parser.add_argument("--out", help="also write the JSON to this file")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if not pathlib.Path(args.data_dir, "train.en.gz").is_file():
        sys.exit(f"error: no Multi30k in {args.data_dir}. Fix: pass --data_dir (or set MULTI30K_DIR).")

    import keras
    import numpy as np

    import tf_transformer as tft
    from tf_transformer import data as data_lib
    from tf_transformer.data.vocab import TOKENIZER_JSON
    from tf_transformer.training.losses import MaskedCrossEntropy
    from tf_transformer.training.metrics import MaskedAccuracy, TokenCount
    from tf_transformer.training.optimizer import make_optimizer
    from tf_transformer.training.precision import resolve_precision

    policy, why = resolve_precision(args.mixed_precision)
    keras.config.set_dtype_policy(policy)
    keras.utils.set_random_seed(args.seed)
    recipe = tft.Recipe.load(args.config).with_overrides(args.override)
    config, training = recipe.model, recipe.training
    data_config = data_lib.DataConfig(
        dataset="multi30k",
        data_dir=args.data_dir,
        vocab_size=config.vocab_size,
        batch_tokens=args.batch_tokens,
        max_length=config.max_length,
        seed=args.seed,
    )
    vocabulary = "built"
    if args.vocab_dir and pathlib.Path(args.vocab_dir, TOKENIZER_JSON).is_file():
        tokenizer, vocabulary = data_lib.Tokenizer.from_directory(args.vocab_dir), "read"
    elif args.vocab_dir:
        tokenizer = data_lib.build_vocabulary(data_config, args.vocab_dir)
    else:
        with tempfile.TemporaryDirectory() as folder:
            tokenizer = data_lib.build_vocabulary(data_config, pathlib.Path(folder) / "vocab")
    config = config.replace(vocab_size=tokenizer.vocab_size, target_vocab_size=None)

    def compiled_model():
        # As `tft-train` compiles it (single worker): Adam with the warmup, the loss and the metrics.
        model = tft.Transformer(config)
        metrics = [MaskedAccuracy(config.pad_id), TokenCount(config.pad_id)]
        optimizer = make_optimizer(config.d_model, training["warmup_steps"], training["learning_rate_scale"])
        loss = MaskedCrossEntropy(training["label_smoothing"], pad_id=config.pad_id)
        model.compile(optimizer=optimizer, loss=loss, metrics=metrics, jit_compile=args.jit_compile)
        return model

    model = compiled_model()
    dataset = data_lib.make_dataset(data_config, tokenizer, "train", training=True)
    batches = list(dataset.take(args.batches).as_numpy_iterator())
    target_tokens = [int((target > 0).sum()) for _, target in batches]

    def milliseconds(seconds, steps):
        return round(1000 * seconds / steps, 1)

    phases = {}
    passes = []
    for _ in range(2):
        start = time.perf_counter()
        for inputs, target in batches:
            model.train_on_batch(inputs, target)
        passes.append(milliseconds(time.perf_counter() - start, len(batches)))
    phases["real_batches"] = {
        "first_pass_ms": passes[0],
        "second_pass_ms": passes[1],
        "shapes": len({inputs[0].shape for inputs, _ in batches}),
    }

    by_length = sorted(batches, key=lambda batch: batch[0][0].shape[1])
    inputs, target = by_length[len(by_length) // 2]
    model.train_on_batch(inputs, target)  # its shape is traced already; one more for the caches
    times = []
    for _ in range(args.fixed_steps):
        start = time.perf_counter()
        float(model.train_on_batch(inputs, target)[0])
        times.append(time.perf_counter() - start)
    phases["fixed_batch"] = {"median_ms": milliseconds(statistics.median(times), 1), "shape": list(inputs[0].shape)}

    if args.fit_steps > 0:
        epochs = []

        class EpochTimer(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                self.start = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                epochs.append(milliseconds(time.perf_counter() - self.start, args.fit_steps))

        fresh = compiled_model()  # one that has traced nothing, as at the start of a run
        fresh.fit(dataset, steps_per_epoch=args.fit_steps, epochs=args.fit_epochs, callbacks=[EpochTimer()], verbose=0)
        phases["fit_live"] = {"epoch_ms": epochs}

    result = {
        "benchmark": "trainer_steps",
        "config": args.config,
        "overrides": args.override,
        "vocab_size": tokenizer.vocab_size,
        "vocabulary": vocabulary if not args.vocab_dir else f"{vocabulary} ({args.vocab_dir})",
        "batch_tokens": args.batch_tokens,
        "mean_target_tokens": round(float(np.mean(target_tokens)), 1),
        "precision": policy,
        "precision_reason": why,
        "jit_compile": args.jit_compile,
        "machine": {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count()},
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
        "phases": phases,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
