"""tf-transformer on the peer harness's fixed workload (../shared/bench), writing the harness's JSON schema.

The workload (d_model 256, 4 heads, d_ff 1024, 3+3 layers, shared vocabulary 8000, length 24, batch 64,
beam 4) and the protocol (warm-up, timed repetitions, figures) are those of `../shared/bench/common.py`,
imported from there so that nothing drifts. Run beside the peers in one run (see benchmarks/README.md):

    python benchmarks/peer_workload.py --bench_dir ../shared/bench --variant graph --out results/tft_graph_run1.json

Variants: `graph` (the Keras fit path with `jit_compile=False`; decoders in a `tf.function`) and `xla`
(`jit_compile=True` for the training step and the decoders). `--quantize int8` decodes with the model's
matrices quantized to int8 after any training phase (`tf_transformer.quantization`; the variant is then
named `graph-int8` or `xla-int8`, against CTranslate2's `int8`). `--mixed_precision` builds the model under a
Keras dtype policy, as the commands load theirs: `mixed_bfloat16` (or `auto` where it resolves to it, on a CPU with
AVX-512 BF16 or AMX) names the variant `graph-bf16` or `xla-bf16`; the harness's workload is float32 for every
peer, hence the default. `--intra_op_threads N` gives TensorFlow's ops N threads (its default: one per core, as
the harness's peers use) and names the variant with `-tN`: one sentence a call, one thread can be the faster
(benchmarks/NOTES.md, entry 51). `--phases` picks what to time; `--export`
also times `serving_default`-style decoding through a SavedModel of the same decoder (the issue's
"exported decoding within 10% of in-process").

Decoding emits exactly 24 tokens per sentence, as for every peer: `min_decode_length` forbids an
earlier EOS and `max_decode_length=24` ends every sentence at 24 tokens.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import tempfile

from bench_harness import load_common

from tf_transformer.decoding import DecodingSettings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = pathlib.Path(__file__).resolve().parent.parent
_LOADED = []


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench_dir", default=str(ROOT.parent / "shared" / "bench"))
    parser.add_argument("--variant", choices=["graph", "xla"], default="graph")
    parser.add_argument("--out", help="write the JSON result to this file")
    parser.add_argument("--run_id", default="1")
    parser.add_argument("--phases", default="train,greedy,beam4", help="comma list of train, greedy, beam4")
    parser.add_argument("--train_steps", type=int, default=None, help="timed steps (default: the harness's)")
    parser.add_argument("--greedy_reps", type=int, default=None)
    parser.add_argument("--beam_reps", type=int, default=None)
    parser.add_argument("--export", action="store_true", help="also time the decoders through a SavedModel")
    parser.add_argument("--quantize", choices=["none", "int8"], default="none", help="int8: decode with int8 weights")
    parser.add_argument(
        "--mixed_precision", choices=["float32", "mixed_bfloat16", "auto"], default="float32",
        help="the Keras dtype policy the model is built under (auto: the commands' choice for this CPU)",
    )  # fmt: skip
    parser.add_argument(
        "--intra_op_threads", type=int, default=0,
        help="threads for TensorFlow's ops (0: TensorFlow's default, one per core); N > 0 names the variant -tN",
    )  # fmt: skip
    args = parser.parse_args()
    if args.intra_op_threads < 0:
        parser.error(f"--intra_op_threads must be 0 or more, got {args.intra_op_threads}.")
    if args.quantize != "none" and args.mixed_precision == "mixed_bfloat16":
        # As the commands: int8 weights are dequantized to float32 and compute in it.
        parser.error("--quantize=int8 decodes in float32. Fix: leave out --mixed_precision=mixed_bfloat16.")
    return args


def main():
    args = parse_args()
    bench = load_common(args.bench_dir)
    # The harness's Result reads these attribute names.
    harness_args = argparse.Namespace(
        out=args.out,
        run_id=args.run_id,
        train_steps=args.train_steps or bench.TRAIN_STEPS,
        greedy_reps=args.greedy_reps or bench.GREEDY_REPS,
        beam_reps=args.beam_reps or bench.BEAM_REPS,
        skip=",".join(p for p in ("train", "greedy", "beam4") if p not in args.phases.split(",")),
    )

    import keras
    import numpy as np
    import tensorflow as tf

    import tf_transformer as tft
    from tf_transformer.decoding import translate
    from tf_transformer.training.precision import BFLOAT16, resolve_precision

    if args.intra_op_threads:  # before TensorFlow runs anything: the pool is made once per process
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    jit = args.variant == "xla"
    policy, _ = resolve_precision(args.mixed_precision) if args.quantize == "none" else ("float32", "")
    keras.config.set_dtype_policy(policy)  # the model computes in the policy it is built under
    suffix = f"-{args.quantize}" if args.quantize != "none" else "-bf16" if policy == BFLOAT16 else ""
    suffix += f"-t{args.intra_op_threads}" if args.intra_op_threads else ""
    result = bench.Result(
        "tf-transformer",
        args.variant + suffix,
        harness_args,
        tensorflow=tf.__version__,
        keras=keras.__version__,
        tf_transformer=tft.__version__,
        jit_compile=jit,
        quantize=args.quantize,
        mixed_precision=policy,
        intra_op_threads=tf.config.threading.get_intra_op_parallelism_threads(),
    )
    keras.utils.set_random_seed(bench.SEED)
    config = tft.TransformerConfig(
        vocab_size=bench.VOCAB,
        d_model=bench.D_MODEL,
        num_heads=bench.NUM_HEADS,
        d_ff=bench.D_FF,
        num_encoder_layers=bench.ENC_LAYERS,
        num_decoder_layers=bench.DEC_LAYERS,
        dropout=bench.DROPOUT,
        max_length=bench.MAX_POS,
        norm_first=False,
    )
    model = tft.Transformer(config)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4),
        loss=tft.MaskedCrossEntropy(0.0, config.pad_id),  # the workload's plain sparse cross-entropy
        jit_compile=jit,
    )
    model.build()
    result.data["meta"].update(
        params=int(model.count_params()), config=config.to_dict(), compute_dtype=model.dtype_policy.compute_dtype
    )

    rng = np.random.default_rng(bench.SEED)
    source = rng.integers(3, bench.VOCAB, size=(bench.BATCH, bench.SRC_LEN), dtype=np.int32)
    target = rng.integers(3, bench.VOCAB, size=(bench.BATCH, bench.TGT_LEN), dtype=np.int32)
    target_in = np.concatenate([np.full((bench.BATCH, 1), config.bos_id, np.int32), target[:, :-1]], axis=1)

    if not result.skip("train"):
        try:

            def step():
                # One compiled Keras train step (the path `fit` runs); the loss is read on the host.
                float(model.train_on_batch((source, target_in), target))

            first, summary = bench.time_calls(step, bench.TRAIN_WARMUP, harness_args.train_steps)
            result.add_phase("train", first, summary, bench.train_tokens_per_step(), jit_compile=jit)
        except Exception as error:  # noqa: BLE001 - the harness records failures per phase
            result.fail("train", error)

    if args.quantize != "none":
        model.quantize(args.quantize)  # after training: an int8 model is for inference
    source_tensor = tf.constant(source)
    for phase, beam_size, reps in (
        ("greedy", 1, harness_args.greedy_reps),
        ("beam4", bench.BEAM, harness_args.beam_reps),
    ):
        if result.skip(phase):
            continue
        try:
            decode = make_decoder(tf, translate, model, beam_size, bench.TGT_LEN, jit)
            first, summary = bench.time_calls(_reader(decode, source_tensor), bench.DECODE_WARMUP, reps)
            shape = tuple(decode(source_tensor)[0].shape)
            assert shape == (bench.BATCH, 1, bench.TGT_LEN), shape
            result.add_phase(
                phase, first, summary, bench.decode_tokens_per_call(), cached=True, jit_compile=jit, beam=beam_size
            )
            if args.export:
                exported = export_decoder(tf, decode, model)
                first, summary = bench.time_calls(_reader(exported, source_tensor), 1, reps)
                result.add_phase(f"{phase}_saved_model", first, summary, bench.decode_tokens_per_call())
        except Exception as error:  # noqa: BLE001
            result.fail(phase, error)
    result.finish()


def _reader(decode, source):
    """A call of `decode` that returns once its ids are on the host (so the decode really finished)."""
    return lambda: decode(source)[0].numpy()


def make_decoder(tf, translate, model, beam_size, length, jit):
    """The decoder as users run it: one `tf.function` over int32 ids, exactly `length` tokens each."""

    @tf.function(jit_compile=jit, input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def decode(source_ids):
        output = translate(
            model,
            source_ids,
            DecodingSettings(
                method="beam" if beam_size > 1 else "greedy",
                beam_size=beam_size,
                min_decode_length=length,
                max_decode_length=length,
            ),
            jit_compile=jit,
        )
        return output.ids, output.scores

    return decode


def export_decoder(tf, decode, model):
    """The same decoder saved in a SavedModel and loaded back (what TF Serving runs)."""
    module = tf.Module()
    module.model = model
    module.decode = decode
    directory = tempfile.mkdtemp(prefix="tft_bench_export_")
    tf.saved_model.save(module, directory)
    loaded = tf.saved_model.load(directory)
    _LOADED.append(loaded)  # the function's variables live as long as the loaded object
    return loaded.decode


if __name__ == "__main__":
    main()
