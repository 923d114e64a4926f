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
import gzip
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
from tf_transformer.model_dir import CONFIG_FILE  # noqa: E402 (no TensorFlow)

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
    if not (pathlib.Path(args.model_dir) / CONFIG_FILE).is_file():
        parser.error(f"--model_dir={args.model_dir}: no {CONFIG_FILE}, so not a model directory tft-train wrote")
    if not pathlib.Path(args.sources).is_file():
        parser.error(f"--sources={args.sources}: no such file")
    memory = keep_freed_memory()
    sentences = read_sentences(args.sources, args.max_sentences)
    if not sentences:
        parser.error(f"--sources={args.sources} has no sentences")

    import tensorflow as tf

    results = []
    for precision in precisions:
        for method in methods:
            for path in paths:
                results.append(measure(args.model_dir, sentences, precision, method, path, rows, args))
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    report = {
        "model_dir": str(args.model_dir),
        "sources": str(args.sources),
        "sentences": len(sentences),
        "machine": {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                    "cpu_flags": bf16_flags()},  # fmt: skip
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


def read_sentences(path, limit):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        sentences = [line.rstrip("\n") for line in handle]
    return sentences[:limit] if limit else sentences


def measure(model_dir, sentences, precision, method, path, rows, args):
    """One precision, method and path: a fresh model under that dtype policy and a fresh translator."""
    import keras

    from tf_transformer.checkpoints import load_translation_model
    from tf_transformer.decoding import TextTranslator, XlaTextTranslator
    from tf_transformer.decoding.settings import command_settings

    keras.config.set_dtype_policy(precision)
    settings, _ = command_settings({"method": method}, model_dir)
    model, tokenizer, _ = load_translation_model(model_dir)
    translator_class = XlaTextTranslator if path == "xla" else TextTranslator
    result = {"precision": precision, "method": method, "path": path}
    if not args.no_file:
        translator = translator_class(model, tokenizer, settings, batch_tokens=args.batch_tokens)
        first, second = timed(translator, sentences), timed(translator, sentences)
        result["file"] = {"first_pass_s": round(first, 2), "second_pass_s": round(second, 2),
                          "sentences_per_s": round(len(sentences) / second, 1),
                          "shapes": len(getattr(translator, "shapes", ()))}  # fmt: skip
    result["calls"] = {}
    for count in rows:
        translator = translator_class(model, tokenizer, settings, batch_tokens=args.batch_tokens)
        batches = [[sentences[(i * count + j) % len(sentences)] for j in range(count)] for i in range(args.calls)]
        first = [timed(translator, batch) for batch in batches]
        again = [timed(translator, batch) for batch in batches]
        median_ms = statistics.median(again) * 1000
        result["calls"][str(count)] = {"first_pass_s": round(sum(first), 2), "median_ms": round(median_ms, 1),
                                       "sentences_per_s": round(count / median_ms * 1000, 1),
                                       "shapes": len(getattr(translator, "shapes", ()))}  # fmt: skip
    keras.config.set_dtype_policy("float32")
    return result


def timed(translator, sentences):
    start = time.perf_counter()
    translator(sentences)
    return time.perf_counter() - start


def bf16_flags():
    """The CPU flags that decide bf16 (`/proc/cpuinfo`), or None off Linux."""
    try:
        flags = pathlib.Path("/proc/cpuinfo").read_text().split("flags", 2)[1].split("\n", 1)[0].split()
    except (OSError, IndexError):
        return None
    return sorted(flag for flag in flags if flag in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_vnni"))


if __name__ == "__main__":
    main()
