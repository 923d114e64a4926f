"""Which decoding path is fastest on this machine: graph mode or XLA, float32 or bf16, on a file and per call.

    python benchmarks/decoding_paths.py --model_dir=runs/multi30k \
        --sources=../shared/data/multi30k/test_2016_flickr.en.gz --precisions=float32,mixed_bfloat16

For each precision (Keras' global dtype policy the model is loaded under), decoding method (`greedy`, `beam`: the
model's decoding.json with that method) and path (`graph`: `TextTranslator`, what the commands and the export run;
`xla`: `XlaTextTranslator`, what a service may use), in one process:

- `file`: the whole `--sources` file through the translator twice, as `tft-translate` batches it
  (`--batch_tokens`): the first pass with the tracing and XLA's compiles, the second the steady state;
  `shapes` is the number of programs XLA compiled;
- `calls`: for each of `--rows` (sentences a call), `--calls` calls of that many sentences (the file's first ones,
  each call the next ones), twice: the first pass's seconds (with the tracing and XLA's compiles, one for each new
  bucketed shape) and the second pass's median ms a call, the steady state of a service whose shapes come back.

Prints one JSON object (and writes it to `--out`). benchmarks/NOTES.md entry 32 has the AVX2-only CPU's figures;
the commands' choice of path (`cli/_precision_flag.py:COMMAND_PATH`) follows them.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tf_transformer.allocator import keep_freed_memory  # noqa: E402 (no TensorFlow)
from tf_transformer.data.errors import DataError  # noqa: E402 (no TensorFlow)
from tf_transformer.data.text_files import read_sentences  # noqa: E402 (no TensorFlow)
from tf_transformer.model_dir import check_model_dir  # noqa: E402 (no TensorFlow)

PATHS = ("graph", "xla")
METHODS = ("greedy", "beam")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True, help="a tft-train model directory")
    parser.add_argument("--sources", required=True, help="a text file of source sentences (.gz or plain)")
    parser.add_argument("--precisions", default="float32", help="comma-separated: float32, mixed_bfloat16")
    parser.add_argument("--methods", default="greedy,beam", help="comma-separated: greedy, beam")
    parser.add_argument("--paths", default="graph,xla", help="comma-separated: graph, xla")
    parser.add_argument("--rows", default="1,4,16,64", help="sentences a call, comma-separated ('' skips calls)")
    parser.add_argument("--calls", type=int, default=8, help="calls of each size, each made twice")
    parser.add_argument("--max_sentences", type=int, default=0, help="the file's first N sentences (0: all)")
    parser.add_argument("--no_file", action="store_true", help="skip the whole-file passes")
    parser.add_argument("--batch_tokens", type=int, default=4096, help="the file's batches, as tft-translate's")
    parser.add_argument("--out", help="also write the JSON to this file")
    args = parser.parse_args(argv)
    precisions, methods, paths = (split_choices(getattr(args, name), name)
                                  for name in ("precisions", "methods", "paths"))  # fmt: skip
    try:
        rows = [int(value) for value in args.rows.split(",") if value]
    except ValueError:
        parser.error(f"--rows={args.rows}: sentences a call as whole numbers, comma-separated, e.g. 1,4,16,64")
    if args.calls < 1:
        parser.error("--calls must be at least 1")
    try:  # the commands' check: a folder with the config.json tft-train writes
        check_model_dir(args.model_dir)
    except FileNotFoundError as error:
        parser.error(str(error))
    try:  # the translation commands' reader: plain or gzip, a missing or empty file one error line
        sentences = read_sentences(args.sources, flag="--sources")
    except DataError as error:
        parser.error(str(error))
    sentences = sentences[: args.max_sentences] if args.max_sentences else sentences
    memory = keep_freed_memory()

    import keras
    import tensorflow as tf

    from tf_transformer.checkpoints import load_translation_model
    from tf_transformer.decoding import TextTranslator, XlaTextTranslator
    from tf_transformer.decoding.settings import command_settings
    from tf_transformer.training.precision import CPU_BF16_FLAGS, read_cpu_flags

    results = []
    for precision in precisions:
        keras.config.set_dtype_policy(precision)  # the model computes in the policy it is built under
        model, tokenizer, _ = load_translation_model(args.model_dir)
        for method in methods:
            settings, _ = command_settings({"method": method}, args.model_dir)
            for path in paths:
                make = functools.partial(XlaTextTranslator if path == "xla" else TextTranslator, model, tokenizer,
                                         settings, batch_tokens=args.batch_tokens)  # fmt: skip
                results.append({"precision": precision, "method": method, "path": path,
                                **measure(make, sentences, rows, args)})  # fmt: skip
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    keras.config.set_dtype_policy("float32")
    cpu_flags = read_cpu_flags()
    bf16_related = {"avx2", "avx512f", *CPU_BF16_FLAGS}
    report = {
        "model_dir": str(args.model_dir),
        "sources": str(args.sources),
        "sentences": len(sentences),
        "machine": {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                    "cpu_flags": None if cpu_flags is None else sorted(cpu_flags & bf16_related)},  # fmt: skip
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
        "tensorflow": tf.__version__,
        "memory": memory,
        "results": results,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n")


def split_choices(text, name):
    allowed = {"precisions": ("float32", "mixed_bfloat16"), "methods": METHODS, "paths": PATHS}[name]
    values = [value for value in text.split(",") if value]
    unknown = [value for value in values if value not in allowed]
    if unknown or not values:
        raise SystemExit(f"error: --{name}={text}: use one or more of {', '.join(allowed)}, comma-separated")
    return values


def measure(make_translator, sentences, rows, args):
    """`{"file": ..., "calls": ...}` of the translators `make_translator()` makes, a fresh one each measurement."""
    result = {}
    if not args.no_file:
        translator = make_translator()
        first, second = timed(translator, sentences), timed(translator, sentences)
        result["file"] = {"first_pass_s": round(first, 2), "second_pass_s": round(second, 2),
                          "sentences_per_s": round(len(sentences) / second, 1),
                          "shapes": len(getattr(translator, "shapes", ()))}  # fmt: skip
    result["calls"] = {}
    for count in rows:
        translator = make_translator()
        batches = [[sentences[(i * count + j) % len(sentences)] for j in range(count)] for i in range(args.calls)]
        first = [timed(translator, batch) for batch in batches]
        again = [timed(translator, batch) for batch in batches]
        median_ms = statistics.median(again) * 1000
        result["calls"][str(count)] = {"first_pass_s": round(sum(first), 2), "median_ms": round(median_ms, 1),
                                       "sentences_per_s": round(count / median_ms * 1000, 1),
                                       "shapes": len(getattr(translator, "shapes", ()))}  # fmt: skip
    return result


def timed(translator, sentences):
    start = time.perf_counter()
    translator(sentences)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
