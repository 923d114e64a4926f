"""The path of a user with a WMT-sized corpus: `tft-train --dataset=files` on millions of sentence pairs.

For each corpus size in `--pairs`, it writes a corpus of that many pairs by cycling Multi30k's 29,000 training
pairs (into a temporary folder, deleted afterwards; never committed), then runs the README's recipe through the
real console command, `python -m tf_transformer.cli.train --dataset=files ...`, for `--train_steps` steps and
reads off:

- `vocabulary_seconds`: the vocabulary (reservoir sample of the corpus, then SentencePiece), from the log line;
- `scan_seconds`: the one tokenization pass over the training split for `data_report.json`, from the log line;
- `first_step_seconds`: from the command's start to the end of its first training step (file checks,
  vocabulary, scan, pipeline start and tracing included), from the log line;
- `target_tokens_per_second`: the median of the run's TensorBoard `target_tokens_per_second` after the first
  `--log_every` interval (the steady rate);
- `peak_rss_mb`: the command's peak resident memory (VmHWM, read from /proc while it runs);
- `input_batches_per_second`: the input pipeline alone (`make_dataset` on the corpus, no model), which is the
  rate at which a resumed run skips the batches it already trained on: `resume_skip_seconds_per_10k_steps`.

Prints one JSON object. A repeated corpus is not a real WMT corpus (its vocabulary is Multi30k's), but the
work that grows with the corpus (reading, sampling, scanning, the shuffle buffer) is the same.

    python benchmarks/large_corpus.py --pairs=290000,4500000
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = pathlib.Path(__file__).resolve().parent.parent


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default="4500000", help="comma-separated corpus sizes (pairs)")
    parser.add_argument(
        "--data_dir", default=os.environ.get("MULTI30K_DIR", str(ROOT.parent / "shared" / "data" / "multi30k"))
    )
    parser.add_argument("--config", default=str(ROOT / "configs" / "multi30k.json"))
    parser.add_argument("--train_steps", type=int, default=200)
    parser.add_argument("--log_every", type=int, default=20)
    parser.add_argument("--batch_tokens", type=int, default=4096)
    parser.add_argument("--input_batches", type=int, default=2000, help="batches for the input-only rate")
    parser.add_argument("--work_dir", help="where corpora and runs go (default: a temporary folder)")
    parser.add_argument("--out", help="also write the JSON to this file")
    return parser.parse_args(argv)


def write_corpus(data_dir: pathlib.Path, folder: pathlib.Path, pairs: int) -> dict:
    """`pairs` lines a side, Multi30k's training pairs over and over, as plain text."""
    paths = {}
    for lang in ("en", "de"):
        with gzip.open(data_dir / f"train.{lang}.gz", "rt", encoding="utf-8") as handle:
            block = handle.read()
        lines = block.splitlines(True)
        repeats, rest = divmod(pairs, len(lines))
        paths[lang] = folder / f"train.{lang}"
        with open(paths[lang], "w", encoding="utf-8") as out:
            for _ in range(repeats):
                out.write(block)
            out.write("".join(lines[:rest]))
    return paths


def peak_rss_mb(pid: int):
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def run_train(arguments, log_path: pathlib.Path) -> dict:
    """Runs tft-train; returns its exit status, peak RSS and the log lines with their arrival times."""
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "tf_transformer.cli.train", *arguments],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
    )  # fmt: skip
    lines, peak = [], [0.0]

    def watch():
        while process.poll() is None:
            value = peak_rss_mb(process.pid)
            if value:
                peak[0] = max(peak[0], value)
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with open(log_path, "w", encoding="utf-8") as log:
        for line in process.stdout:
            lines.append((time.monotonic() - started, line.rstrip("\n")))
            log.write(line)
    status = process.wait()
    watcher.join()
    return {"status": status, "peak_rss_mb": round(peak[0], 1), "lines": lines, "seconds": time.monotonic() - started}


def find(lines, pattern):
    for _, line in lines:
        match = re.search(pattern, line)
        if match:
            return float(match.group(1))
    return None


def tokens_per_second(log_dir: pathlib.Path):
    import tensorflow as tf

    values = []
    for path in sorted(log_dir.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag == "target_tokens_per_second":
                    values.append((event.step, float(tf.make_ndarray(value.tensor))))
    values.sort()
    steady = [value for _, value in values[1:]]  # the first interval holds tracing
    return round(statistics.median(steady), 1) if steady else None


def input_rate(model_dir: pathlib.Path, data_config_path: pathlib.Path, batches: int) -> float:
    """Batches a second of the run's own input pipeline (its vocabulary and DataConfig), no model."""
    code = f"""
import json, sys, time
import tf_transformer
from tf_transformer.data import DataConfig, Tokenizer, make_dataset
config = DataConfig.from_json({str(data_config_path)!r})
dataset = make_dataset(config, Tokenizer.from_directory({str(model_dir / "vocab")!r}))
iterator = iter(dataset)
for _ in range(50):  # the shuffle buffer's first fill and the parallel map's warm-up
    next(iterator)
started = time.perf_counter()
for _ in range({batches}):
    next(iterator)
print(json.dumps({{"rate": {batches} / (time.perf_counter() - started)}}))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])["rate"]


def measure(args, folder: pathlib.Path, pairs: int) -> dict:
    corpus_started = time.monotonic()
    paths = write_corpus(pathlib.Path(args.data_dir), folder, pairs)
    corpus_seconds = time.monotonic() - corpus_started
    model_dir = folder / "run"
    arguments = [
        f"--config={args.config}", "--dataset=files", f"--train_source={paths['en']}", f"--train_target={paths['de']}",
        f"--valid_source={pathlib.Path(args.data_dir) / 'val.en.gz'}",
        f"--valid_target={pathlib.Path(args.data_dir) / 'val.de.gz'}",
        f"--model_dir={model_dir}", f"--train_steps={args.train_steps}", f"--checkpoint_every={args.train_steps}",
        f"--log_every={args.log_every}", f"--batch_tokens={args.batch_tokens}", "--seed=1",
    ]  # fmt: skip
    run = run_train(arguments, folder / "train.log")
    if run["status"] != 0:
        tail = "\n".join(line for _, line in run["lines"][-30:])
        raise SystemExit(f"tft-train failed with status {run['status']}:\n{tail}")
    rate = input_rate(model_dir, model_dir / "data_config.json", args.input_batches)
    corpus_bytes = sum(path.stat().st_size for path in paths.values())
    return {
        "pairs": pairs,
        "corpus_mb": round(corpus_bytes / 2**20, 1),
        "write_corpus_seconds": round(corpus_seconds, 1),
        "vocabulary_seconds": find(run["lines"], r"Vocabulary of \d+ pieces ready in ([\d.]+) s"),
        "scan_seconds": find(run["lines"], r"\(scanned in ([\d.]+) s\)"),
        "first_step_seconds": find(run["lines"], r"First step \(step \d+\) done ([\d.]+) s after the start"),
        "run_seconds": round(run["seconds"], 1),
        "train_steps": args.train_steps,
        "target_tokens_per_second": tokens_per_second(model_dir / "logs" / "train"),
        "peak_rss_mb": run["peak_rss_mb"],
        "input_batches_per_second": round(rate, 1),
        "resume_skip_seconds_per_10k_steps": round(10_000 / rate, 1),
    }


def main(argv=None):
    args = parse_args(argv)
    sizes = [int(value) for value in args.pairs.split(",")]
    results = []
    with tempfile.TemporaryDirectory(dir=args.work_dir) as work:
        for pairs in sizes:
            folder = pathlib.Path(work) / f"pairs_{pairs}"
            folder.mkdir()
            results.append(measure(args, folder, pairs))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    report = {
        "benchmark": "large_corpus",
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
        "config": args.config,
        "batch_tokens": args.batch_tokens,
        "results": results,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
