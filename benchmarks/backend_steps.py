"""Time one training step of the same `tft.Transformer` under each Keras backend, in one sitting.

The model and batch are the peer harness's workload (`../shared/bench/common.py`: d_model 256, 4 heads, d_ff 1024,
3+3 layers, a shared 8,000-piece vocabulary, 64 sentences of 24 tokens), trained with Adam, the label-smoothed loss
and `model.train_on_batch`, as a Keras user's script does. Each backend runs in a process of its own (a Keras
backend is fixed per process), in turn, `--rounds` times, so that a slow spell of the machine falls on all:

    python benchmarks/backend_steps.py --backends=tensorflow,tensorflow-xla,jax,torch --rounds=2

`tensorflow` is the graph step (`jit_compile=False`, what `tft-train` runs on a CPU), `tensorflow-xla` the XLA one,
`jax` the jitted step (JAX always compiles), `torch` PyTorch's eager step (Keras' default there). Prints one JSON
object: per backend, the harness's median milliseconds a step over its timed steps (after its warm-up steps, which
include tracing and compiling), the target tokens a second, and each round's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

from bench_harness import load_common

ROOT = pathlib.Path(__file__).resolve().parent.parent
BACKENDS = {"tensorflow": ("tensorflow", False), "tensorflow-xla": ("tensorflow", True), "jax": ("jax", True),
            "torch": ("torch", False)}  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench_dir", default=str(ROOT.parent / "shared" / "bench"))
    parser.add_argument("--backends", default=",".join(BACKENDS), help=f"comma list of {', '.join(BACKENDS)}")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process: time this backend, print its JSON
    args = parser.parse_args()
    if args.one:
        print(json.dumps(time_steps(args.bench_dir, args.one)))
        return
    names = args.backends.split(",")
    unknown = [name for name in names if name not in BACKENDS]
    if unknown:
        sys.exit(f"error: --backends: unknown {', '.join(unknown)}. Fix: use some of {', '.join(BACKENDS)}.")
    rounds = {name: [] for name in names}
    for _ in range(args.rounds):
        for name in names:
            rounds[name].append(run_child(args.bench_dir, name))
    print(json.dumps(summary(rounds), indent=2))


def run_child(bench_dir: str, name: str) -> dict:
    """One backend's timing in a fresh process under its KERAS_BACKEND."""
    env = dict(os.environ, KERAS_BACKEND=BACKENDS[name][0], TF_CPP_MIN_LOG_LEVEL="3")
    command = [sys.executable, __file__, f"--bench_dir={bench_dir}", f"--one={name}"]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: the {name} process failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(rounds: dict) -> dict:
    """Per backend: the median of the rounds' medians, with each round's figures and the step time against
    TensorFlow's graph step where it ran."""
    result = {}
    for name, figures in rounds.items():
        milliseconds = statistics.median(figure["step_ms"] for figure in figures)
        result[name] = {"step_ms": round(milliseconds, 1), "tokens_per_second": round(figures[0]["tokens"] /
                        milliseconds * 1000), "rounds": figures}  # fmt: skip
    if "tensorflow" in result:
        graph_ms = result["tensorflow"]["step_ms"]
        for name in result:
            result[name]["time_vs_tensorflow_graph"] = round(result[name]["step_ms"] / graph_ms, 2)
    return result


def time_steps(bench_dir: str, name: str) -> dict:
    """The median step of the harness's workload under this process's backend."""
    import keras
    import numpy as np

    import tf_transformer as tft

    common = load_common(bench_dir)
    keras.utils.set_random_seed(common.SEED)
    config = tft.TransformerConfig(
        vocab_size=common.VOCAB, d_model=common.D_MODEL, num_heads=common.NUM_HEADS, d_ff=common.D_FF,
        num_encoder_layers=common.ENC_LAYERS, num_decoder_layers=common.DEC_LAYERS, max_length=common.MAX_POS,
        dropout=common.DROPOUT,
    )  # fmt: skip
    model = tft.Transformer(config)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=tft.MaskedCrossEntropy(label_smoothing=0.1),
        jit_compile=BACKENDS[name][1],
    )
    rng = np.random.default_rng(common.SEED)
    source = rng.integers(3, common.VOCAB, (common.BATCH, common.SRC_LEN)).astype("int32")
    target = rng.integers(3, common.VOCAB, (common.BATCH, common.TGT_LEN + 1)).astype("int32")
    target[:, 0] = common.BOS_ID
    first, timed = common.time_calls(
        lambda: float(model.train_on_batch((source, target[:, :-1]), target[:, 1:])),
        common.TRAIN_WARMUP,
        common.TRAIN_STEPS,
    )
    return {"backend": keras.backend.backend(), "jit_compile": BACKENDS[name][1], "first_step_s": round(first, 2),
            "step_ms": timed["median_s"] * 1000, "iqr_pct": timed["iqr_pct"], "tokens": common.train_tokens_per_step(),
            "peak_rss_mb": round(common.peak_rss_mb())}  # fmt: skip


if __name__ == "__main__":
    main()
