"""The fastest a decoding step of the harness's model can be in TensorFlow on this CPU: its matrix products alone.

    python benchmarks/step_floor.py --rows 1,64,256 --out floor.json
    python benchmarks/step_floor.py --rows 1,64,256 --intra_op_threads 1 --out floor_t1.json

A cached decoding step of the peer harness's model (../shared/bench: d_model 256, d_ff 1024, 3 decoder layers,
vocabulary 8,000) multiplies `rows` vectors (sentences times beams) by every decoder matrix once: per layer the
self-attention's query-key-value and output projections, the cross-attention's query and output projections, the
two feed-forward matrices, then the output projection to the vocabulary. This times exactly those products,
chained in a `tf.while_loop` of `--steps` iterations (a decoding loop's shape, without its attention, norms,
softmax or search), for each kernel TensorFlow offers on a CPU:

- `float32`, `bfloat16` (activations and weights cast to bf16 once, products in bf16) in graph mode;
- `float32_xla`: the same loop under `jit_compile=True`;
- `int8`: oneDNN's `QuantizedMatMulWithBiasAndDequantize` on int8 weights, each product's input bounded and
  quantized first (what int8 activations cost; only where TensorFlow's oneDNN ops are on).

The smallest time a step is the floor no decoder of that model reaches in TensorFlow on this machine: decoding's
tokens a second are at most `sentences / floor` (greedy: rows = sentences; beam 4: rows = 4 x sentences), to put
beside a peer's measured figure (benchmarks/NOTES.md, entry 51). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time

from bench_harness import load_common

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = pathlib.Path(__file__).resolve().parent.parent
KERNELS = ("float32", "bfloat16", "float32_xla", "int8")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench_dir", default=str(ROOT.parent / "shared" / "bench"))
    parser.add_argument("--rows", default="1,4,64,256", help="comma list: vectors a step (sentences x beams)")
    parser.add_argument("--kernels", default=",".join(KERNELS), help=f"comma list of {', '.join(KERNELS)}")
    parser.add_argument("--steps", type=int, default=200, help="loop iterations a timed call")
    parser.add_argument("--calls", type=int, default=5, help="timed calls of each loop (the median is kept)")
    parser.add_argument("--intra_op_threads", type=int, default=0, help="threads for an op (0: TensorFlow's default)")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    kernels = args.kernels.split(",")
    unknown = sorted(set(kernels) - set(KERNELS))
    if unknown:
        parser.error(f"--kernels: unknown {', '.join(unknown)}; choose from {', '.join(KERNELS)}.")
    rows = [int(r) for r in args.rows.split(",")]
    if min(rows) < 1 or args.steps < 1 or args.calls < 1 or args.intra_op_threads < 0:
        parser.error("--rows, --steps and --calls must be 1 or more, --intra_op_threads 0 or more.")
    bench = load_common(args.bench_dir)

    import numpy as np
    import tensorflow as tf

    if args.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    shapes = decoder_matrices(bench)
    rng = np.random.default_rng(0)
    weights = [rng.normal(0, 0.05, shape).astype(np.float32) for shape in shapes]
    report = {
        "model": {"d_model": bench.D_MODEL, "d_ff": bench.D_FF, "decoder_layers": bench.DEC_LAYERS,
                  "vocab": bench.VOCAB},
        "matrices_per_step": len(shapes),
        "weight_bytes_float32": int(sum(w.nbytes for w in weights)),
        "intra_op_threads": args.intra_op_threads or os.environ.get("TF_NUM_INTRAOP_THREADS", "TensorFlow's default"),
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "TensorFlow's default"),
        "steps": args.steps,
        "results": [],
    }  # fmt: skip
    for kernel in kernels:
        step = make_step(tf, kernel, weights)
        for row_count in rows:
            timed = time_loop(tf, np, step, kernel == "float32_xla", row_count, bench.D_MODEL, args.steps, args.calls)
            report["results"].append({"kernel": kernel, "rows": row_count, **timed})
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n")


def decoder_matrices(bench):
    """The `[d_in, d_out]` matrices one cached decoding step multiplies by, in order."""
    d_model, d_ff = bench.D_MODEL, bench.D_FF
    layer = [(d_model, 3 * d_model), (d_model, d_model), (d_model, d_model), (d_model, d_model), (d_model, d_ff),
             (d_ff, d_model)]  # fmt: skip
    return layer * bench.DEC_LAYERS + [(d_model, bench.VOCAB)]


def make_step(tf, kernel, weights):
    """`x [rows, d_model] -> x'`: every product of a step, each feeding the next (the loop cannot skip any)."""
    if kernel == "int8":
        product = int8_product(tf, weights)
    else:
        dtype = tf.bfloat16 if kernel == "bfloat16" else tf.float32
        matrices = [tf.constant(w, dtype=dtype) for w in weights]

        def product(index, inputs):
            return tf.matmul(tf.cast(inputs, dtype), matrices[index])

    def step(x):
        hidden = x
        for index in range(len(weights) - 1):
            hidden = product(index, hidden)
            width = weights[index + 1].shape[0]
            if hidden.shape[1] != width:  # the fused query-key-value projection: its query part goes on
                hidden = hidden[:, :width]
        logits = product(len(weights) - 1, hidden)
        d_model = x.shape[1]
        return tf.cast(hidden, tf.float32) + 1e-9 * tf.cast(logits[:, :d_model], tf.float32)

    return step


def int8_product(tf, weights):
    """oneDNN's int8 product: weights per-tensor int8, inputs quantized to uint8 (min-first) at each product."""
    quantized = []
    for w in weights:
        scale = float(abs(w).max())
        quantized.append(((w / scale * 127).round().astype("int8"), scale))

    def product(index, inputs):
        values, scale = quantized[index]
        # Made in the loop's body: a captured qint8 tensor would become a loop variable, which has no CPU kernel.
        matrix = tf.constant(values, dtype=tf.qint8)
        # Bounded to the fixed range [-1, 1] the activations are quantized in (a model would calibrate its ranges;
        # the chained random products here would otherwise overflow to inf within a step).
        inputs = tf.tanh(tf.cast(inputs, tf.float32))
        activations, low, high = tf.quantization.quantize(inputs, -1.0, 1.0, tf.quint8, mode="MIN_FIRST")
        return tf.raw_ops.QuantizedMatMulWithBiasAndDequantize(
            a=activations, b=matrix, bias=tf.zeros([values.shape[1]]), min_a=low, max_a=high, min_b=-scale,
            max_b=scale, min_freezed_output=-1.0, max_freezed_output=1.0, Toutput=tf.float32,
            input_quant_mode="MIN_FIRST",
        )  # fmt: skip

    return product


def time_loop(tf, np, step, jit, row_count, d_model, steps, calls):
    """Median seconds of `steps` chained steps on `row_count` rows; the figures a step, or the kernel's error."""

    @tf.function(jit_compile=jit)
    def loop(x):
        return tf.while_loop(lambda i, _: i < steps, lambda i, h: (i + 1, step(h)), (tf.constant(0), x))[1]

    x = tf.constant(np.random.default_rng(1).normal(0, 1, (row_count, d_model)).astype(np.float32))
    try:
        loop(x).numpy()  # trace (and compile)
    except (tf.errors.OpError, TypeError, ValueError) as error:
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        loop(x).numpy()
        seconds.append(time.perf_counter() - start)
    step_ms = float(np.median(seconds)) / steps * 1e3
    return {"step_ms": round(step_ms, 4), "steps_per_s": round(1e3 / step_ms, 1)}


if __name__ == "__main__":
    main()
