"""The int8 choices of benchmarks/NOTES.md entry 24, timed on this machine; prints JSON.

    python benchmarks/int8_choices.py --matmuls                       # one op: float32, int8 x int8, ...
    python benchmarks/int8_choices.py --variant graph --phases greedy,beam4 --reps 9

`--matmuls` times single products at decoding's and training's shapes (median of 50 calls in a `tf.function`,
ms): float32; int8 x int8 with an int32 accumulator (`tf.linalg.matmul(..., output_type=tf.int32)`, Keras'
int8 path in the TF backend); the int8 kernel dequantized then a float32 product; dynamic int8 (rows quantized,
int8 product, rescaled). Run it with TF_ENABLE_ONEDNN_OPTS=0 and =1.

Otherwise it times the peer workload's decoders (`peer_workload.make_decoder`, the model of
../shared/bench/common.py with random weights) for several models in one process, calls interleaved so that
the machine's drift falls on all alike: `float32`; `int8` (`model.quantize("int8")`, as kept: the decoder's
kernels dequantized once a call); `int8_per_step` (the same weights, dequantized at every step); `keras`
(Keras' `Model.quantize("int8")`, which reaches only the feed-forward `Dense` layers). Tokens a second,
medians.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = pathlib.Path(__file__).resolve().parent
MODES = ("float32", "int8", "int8_per_step", "keras")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench_dir", default=str(HERE.parent.parent / "shared" / "bench"))
    parser.add_argument("--matmuls", action="store_true", help="time single products instead of decoders")
    parser.add_argument("--variant", choices=["graph", "xla"], default="graph")
    parser.add_argument("--phases", default="greedy,beam4")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma list of {', '.join(MODES)}")
    parser.add_argument("--reps", type=int, default=7, help="timed calls per model and phase")
    return parser.parse_args()


def time_matmuls(tf, np):
    def median_ms(function, *arguments, calls=50):
        function(*arguments).numpy()
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            function(*arguments).numpy()
            times.append(time.perf_counter() - start)
        return round(1000 * statistics.median(times), 3)

    rng = np.random.default_rng(0)
    rows = []
    for m, k, n in ((64, 256, 1024), (256, 256, 1024), (64, 256, 8000), (256, 256, 8000), (1536, 256, 1024)):
        x = tf.constant(rng.standard_normal((m, k)), tf.float32)
        w = tf.constant(rng.standard_normal((k, n)), tf.float32)
        x8 = tf.constant(rng.integers(-127, 128, (m, k)), tf.int8)
        w8 = tf.constant(rng.integers(-127, 128, (k, n)), tf.int8)
        scale = tf.constant(rng.random(n) + 0.5, tf.float32)

        def int8_int8(a, b):
            return tf.linalg.matmul(a, b, output_type=tf.int32)

        def dequantized(a, b, scale):
            return tf.matmul(a, tf.cast(b, tf.float32) / scale)

        def dynamic(x, w8, scale):
            row_scale = 127.0 / tf.maximum(tf.reduce_max(tf.abs(x), axis=-1, keepdims=True), 1e-7)
            product = tf.linalg.matmul(tf.cast(tf.round(x * row_scale), tf.int8), w8, output_type=tf.int32)
            return tf.cast(product, tf.float32) / row_scale / scale

        rows.append({
            "shape": [m, k, n],
            "float32": median_ms(tf.function(tf.matmul), x, w),
            "int8_int8_int32": median_ms(tf.function(int8_int8), x8, w8),
            "dequantize_float32": median_ms(tf.function(dequantized), x, w8, scale),
            "dynamic_int8": median_ms(tf.function(dynamic), x, w8, scale),
        })  # fmt: skip
    return rows


def make_model(tft, keras, bench, mode):
    keras.utils.set_random_seed(bench.SEED)
    config = tft.TransformerConfig(
        vocab_size=bench.VOCAB, d_model=bench.D_MODEL, num_heads=bench.NUM_HEADS, d_ff=bench.D_FF,
        num_encoder_layers=bench.ENC_LAYERS, num_decoder_layers=bench.DEC_LAYERS, dropout=bench.DROPOUT,
        max_length=bench.MAX_POS, norm_first=False,
    )  # fmt: skip
    model = tft.Transformer(config)
    model.build()
    if mode in ("int8", "int8_per_step"):
        model.quantize("int8")
    if mode == "int8_per_step":
        constants = model.decoding_constants
        model.decoding_constants = lambda: {k: v for k, v in constants().items() if k != "dequantized_kernels"}
    if mode == "keras":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the layers it cannot quantize
            keras.Model.quantize(model, "int8")
    return model


def main():
    args = parse_args()
    import keras
    import numpy as np
    import tensorflow as tf

    import tf_transformer as tft
    from tf_transformer.decoding import translate

    sys.path.insert(0, str(HERE))
    import peer_workload

    result = {"onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "unset"), "tensorflow": tf.__version__}
    if args.matmuls:
        result["matmuls_ms"] = time_matmuls(tf, np)
        print(json.dumps(result))
        return
    bench = peer_workload.load_common(args.bench_dir)
    modes = args.modes.split(",")
    models = {mode: make_model(tft, keras, bench, mode) for mode in modes}
    rng = np.random.default_rng(bench.SEED)
    source = tf.constant(rng.integers(3, bench.VOCAB, size=(bench.BATCH, bench.SRC_LEN), dtype=np.int32))
    tokens = bench.BATCH * bench.TGT_LEN
    result["variant"] = args.variant
    for phase in args.phases.split(","):
        beam = 1 if phase == "greedy" else bench.BEAM
        decoders = {
            mode: peer_workload.make_decoder(tf, translate, models[mode], beam, bench.TGT_LEN, args.variant == "xla")
            for mode in modes
        }
        for decode in decoders.values():
            decode(source)[0].numpy()  # tracing (and XLA's compilation) outside the timing
        times = {mode: [] for mode in modes}
        for _ in range(args.reps):
            for mode, decode in decoders.items():
                start = time.perf_counter()
                decode(source)[0].numpy()
                times[mode].append(time.perf_counter() - start)
        result[phase] = {mode: round(tokens / statistics.median(spans)) for mode, spans in times.items()}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
