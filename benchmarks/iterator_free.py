"""How long freeing a tf.data iterator takes, and how fast it feeds, in the ways the training input is read.

TensorFlow 2.21's tf.data autotuning thread can miss its iterator's cancellation and sleep out its optimization
period (up to 60 s) while the iterator's destructor waits for it (benchmarks/NOTES.md entry 40). The training
pipeline of the README's recipe (`make_dataset` on Multi30k's train split) is read four ways:

- `package`: as the package hands it out (`data/dataset_options.py:package_options`: no autotuning thread), with
  a plain iterator, which is how Keras' `fit` reads it under the default strategy (`tft-train` on one CPU);
- `one_device_strategy`: through `tf.distribute.OneDeviceStrategy("/cpu:0").experimental_distribute_dataset`,
  how `fit` read it before: a multi-device iterator, whose per-device iterators run the autotuning thread;
- `autotune_thread`: a plain iterator with tf.data's default (the thread on);
- `mirrored`: through `tf.distribute.MirroredStrategy` over two logical CPU devices (`--strategy=mirrored
  --num_cpu_devices=2`; GPUs take the same multi-device iterator), which `fit` read under that strategy before
  entry 45 (and still does with subword sampling);
- `per_replica`: as `tft-train` reads it under that strategy now (`training/fit_loop.py:read_per_replica`): each
  replica a plain iterator over its own copy of the stream, keeping its rows of each batch.

For each, in interleaved rounds:

- `free_seconds`: the time `del iterator` took, for `--iterators` iterators each read for `--age_s` seconds while
  `--busy` processes keep the cores busy (the race is lost most often on busy cores, as in a test worker beside
  another or a training step beside the input pipeline);
- `batches_per_second`: the stream read as fast as it goes, `--batches` batches after 20 to start, cores idle.

Prints one JSON object.

    python benchmarks/iterator_free.py --data_dir=../shared/data/multi30k --rounds=2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from tf_transformer.data import DataConfig, Tokenizer, build_vocabulary, make_dataset  # noqa: E402
from tf_transformer.training.fit_loop import read_per_replica  # noqa: E402

SETTINGS = ("package", "one_device_strategy", "autotune_thread", "mirrored", "per_replica")


def main(argv=None):
    args = parse_args(argv)
    settings = args.settings.split(",")
    if unknown := set(settings) - set(SETTINGS):
        sys.exit(f"error: --settings: unknown {sorted(unknown)}. Fix: choose among {','.join(SETTINGS)}.")
    if {"mirrored", "per_replica"} & set(settings):  # before TensorFlow initializes its devices
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    data_config = DataConfig(dataset="multi30k", data_dir=args.data_dir, seed=1)
    tokenizer = vocabulary(data_config, args.vocab_dir)
    results = {setting: {"free_seconds": [], "batches_per_second": []} for setting in settings}
    for round_index in range(args.rounds):
        order = settings if round_index % 2 == 0 else settings[::-1]  # neither always first
        for setting in order:
            stream = training_stream(data_config, tokenizer, setting)
            results[setting]["batches_per_second"].append(round(feed_rate(stream, args.batches), 1))
            results[setting]["free_seconds"] += [round(s, 2) for s in free_times(stream, args)]
    summary = {
        setting: {
            **values,
            "frees_over_1s": sum(s > 1.0 for s in values["free_seconds"]),
            "longest_free_seconds": max(values["free_seconds"]),
            "median_batches_per_second": statistics.median(values["batches_per_second"]),
        }
        for setting, values in results.items()
    }
    print(json.dumps({
        "tensorflow": tf.__version__, "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(), "oneDNN": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
        "rounds": args.rounds, "iterators": args.iterators, "age_s": args.age_s, "busy": args.busy, **summary,
    }))  # fmt: skip


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", required=True, help="a local copy of Multi30k (../shared/data/multi30k)")
    parser.add_argument("--vocab_dir", help="a vocabulary folder (a model_dir's vocab/); default: build one")
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated ways to read the stream")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--iterators", type=int, default=3, help="iterators freed per setting and round")
    parser.add_argument("--age_s", type=float, default=60.0, help="seconds each iterator is read before it is freed")
    parser.add_argument("--busy", type=int, default=os.cpu_count(), help="CPU-burning processes while freeing")
    parser.add_argument("--batches", type=int, default=400)
    return parser.parse_args(argv)


def vocabulary(data_config: DataConfig, vocab_dir) -> Tokenizer:
    if vocab_dir:
        return Tokenizer.from_directory(vocab_dir)
    return build_vocabulary(data_config.replace(vocab_size=2000), tempfile.mkdtemp(prefix="iterator_free_vocab_"))


def training_stream(data_config: DataConfig, tokenizer: Tokenizer, setting: str):
    if setting == "per_replica":  # as tft-train reads it under mirrored since entry 45
        devices = [device.name for device in tf.config.list_logical_devices("CPU")]
        same_stream = data_config.replace(deterministic=True)
        return read_per_replica(
            tf.distribute.MirroredStrategy(devices),
            lambda: make_dataset(same_stream, tokenizer, "train", batch_multiple=len(devices)),
        )
    stream = make_dataset(data_config, tokenizer, "train")
    if setting == "one_device_strategy":
        return tf.distribute.OneDeviceStrategy("/cpu:0").experimental_distribute_dataset(stream)
    if setting == "mirrored":
        devices = [device.name for device in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices).experimental_distribute_dataset(stream)
    if setting == "autotune_thread":  # later options win: tf.data's default back on
        options = tf.data.Options()
        options.autotune.enabled = True
        stream = stream.with_options(options)
    return stream


def feed_rate(stream, batches: int) -> float:
    iterator = iter(stream)
    for _ in range(20):
        next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches / (time.perf_counter() - start)


def free_times(stream, args) -> list:
    iterators = [iter(stream) for _ in range(args.iterators)]
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        start = time.monotonic()
        while time.monotonic() - start < args.age_s:
            for iterator in iterators:
                next(iterator)
            time.sleep(0.05)
        times = []
        while iterators:
            iterator = iterators.pop()
            began = time.perf_counter()
            del iterator
            times.append(time.perf_counter() - began)
        return times
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


if __name__ == "__main__":
    main()
