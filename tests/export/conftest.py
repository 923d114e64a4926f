"""Shared fixtures of the export tests: ONE tiny model trained with tools/train.py under MirroredStrategy (2
logical CPU devices) and ONE export of it by tools/export.py, reused by every test; the export loaded in this
process; the in-process translators it must agree with.

Time: the machine has 2 cores and most of the work is single-threaded (tracing, TensorFlow's start in each
subprocess), so subprocesses are started as `Job`s and waited for later: the export runs while this process
traces the in-process translators, and the fresh-process checks run while this process tests the export.
"""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import types

import pytest
import tensorflow as tf

from tf_transformer.checkpoints import load_translation_model
from tf_transformer.decoding.settings import COMMAND_DEFAULTS
from tf_transformer.decoding.text import TextTranslator

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
# 1 layer, d_model 16: the graph, not the quality, is under test. max_length 40 keeps the decode loops short
# and makes "longer than the model allows" easy to reach.
MODEL_FLAGS = [
    "--config=tiny", "--override=d_model=16", "--override=d_ff=32", "--override=num_heads=2",
    "--override=num_encoder_layers=1", "--override=num_decoder_layers=1", "--override=max_length=40",
    "--override=dropout=0.0",
]  # fmt: skip
DECODING = dict(beam_size=3, length_penalty=0.6)
# What tools/export.py decodes with: DECODING and, without flags, the loop guards of COMMAND_DEFAULTS
# (no_repeat_ngram_size, max_decode_length), for the in-process translators the export must equal.
SETTINGS = dataclasses.replace(COMMAND_DEFAULTS, **DECODING)
N_BEST = 2
MODEL_NAME = "multi30k"
TOOL_BATCH_TOKENS = 60  # several batches for the 9 test sentences
INVALID_UTF8 = b"Caf\xe9 \xff\xfe a dog \xe3\x81 runs."  # Latin-1, stray bytes, a truncated sequence

# Imports only tensorflow and tensorflow_text: what a serving host has. argv: the export, a JSON file of
# hex-encoded sentences.
FRESH_PROCESS = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401 (registers the tokenizer ops)
loaded = tf.saved_model.load(sys.argv[1])
with open(sys.argv[2]) as handle:
    sentences = [bytes.fromhex(text) for text in json.load(handle)]
serve = loaded.signatures["serving_default"]
result = serve(inputs=tf.constant(sentences, tf.string))
empty = serve(inputs=tf.constant([], tf.string))
print(json.dumps({
    "outputs": [text.decode("utf-8") for text in result["outputs"].numpy()],
    "scores": result["scores"].numpy().tolist(),
    "dtypes": [result["outputs"].dtype.name, result["scores"].dtype.name],
    "empty_shapes": [empty["outputs"].shape.as_list(), empty["scores"].shape.as_list()],
    "ours": sorted(name for name in sys.modules if name.startswith("tf_transformer")),
}))
"""


class Job:
    """A subprocess started now and waited for with `result()`; its output goes to files, so that it never
    blocks on a full pipe while nobody reads."""

    def __init__(self, command, folder: pathlib.Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.stdout_path, self.stderr_path = folder / "stdout", folder / "stderr"
        with open(self.stdout_path, "wb") as stdout, open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                [str(part) for part in command], stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, env=ENV
            )

    def result(self, timeout=300) -> subprocess.CompletedProcess:
        returncode = self.process.wait(timeout=timeout)
        stdout = self.stdout_path.read_text(encoding="utf-8", errors="replace")
        stderr = self.stderr_path.read_text(encoding="utf-8", errors="replace")
        return subprocess.CompletedProcess(self.process.args, returncode, stdout, stderr)

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def tool(name):
    return [sys.executable, ROOT / "tools" / name]


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def settings():
    """The constants above, for the tests."""
    return types.SimpleNamespace(
        DECODING=DECODING, N_BEST=N_BEST, MODEL_NAME=MODEL_NAME, INVALID_UTF8=INVALID_UTF8,
        TOOL_BATCH_TOKENS=TOOL_BATCH_TOKENS, ENV=ENV, tool=tool,
    )  # fmt: skip


@pytest.fixture(scope="session")
def export_corpus(small_corpus, tmp_path_factory):
    """300 training and 20 validation pairs of the small corpus."""
    folder = tmp_path_factory.mktemp("export_corpus")
    files = {}
    for name, count in (("train_en", 300), ("train_de", 300), ("valid_en", 20), ("valid_de", 20)):
        lines = small_corpus[name].read_text(encoding="utf-8").splitlines()[:count]
        files[name] = write_lines(folder / name, lines)
    return files


@pytest.fixture(scope="session")
def mirrored_training(export_corpus, tmp_path_factory):
    """tools/train.py on 2 logical CPU devices with MirroredStrategy, 2 steps: (model_dir, its stdout)."""
    path = tmp_path_factory.mktemp("export_model") / "run"
    command = tool("train.py") + MODEL_FLAGS + [
        "--dataset=files", f"--train_source={export_corpus['train_en']}", f"--train_target={export_corpus['train_de']}",
        "--vocab_size=400", "--batch_tokens=512", "--seed=1", "--train_steps=2", "--checkpoint_every=2",
        "--strategy=mirrored", "--num_cpu_devices=2", f"--model_dir={path}",
    ]  # fmt: skip
    result = subprocess.run([str(part) for part in command], capture_output=True, text=True, timeout=300, env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    return path, result.stdout


@pytest.fixture(scope="session")
def model_dir(mirrored_training):
    return mirrored_training[0]


@pytest.fixture(scope="session")
def export_dir(tmp_path_factory):
    """The model's base folder (TensorFlow Serving's model_base_path); the export is version 1 in it."""
    return tmp_path_factory.mktemp("exports") / MODEL_NAME


@pytest.fixture(scope="session")
def export_job(model_dir, export_dir, tmp_path_factory):
    command = tool("export.py") + [
        f"--model_dir={model_dir}", f"--export_dir={export_dir}", f"--n_best={N_BEST}",
        *(f"--{name}={value}" for name, value in DECODING.items()),
    ]  # fmt: skip
    job = Job(command, tmp_path_factory.mktemp("export_job"))
    yield job
    job.kill()


@pytest.fixture(scope="session")
def trained(model_dir):
    """(model, tokenizer, config) of the model directory."""
    return load_translation_model(model_dir)


@pytest.fixture(scope="session")
def translator(trained):
    """The in-process path the export must match: TextTranslator with the export's settings (traced now)."""
    model, tokenizer, _ = trained
    return TextTranslator(model, tokenizer, SETTINGS)


@pytest.fixture(scope="session")
def n_best_translator(trained):
    model, tokenizer, _ = trained
    return TextTranslator(model, tokenizer, dataclasses.replace(SETTINGS, n_best=N_BEST))


@pytest.fixture(scope="session")
def export_path(export_job, export_dir, translator, n_best_translator):
    """The version folder tools/export.py wrote (the translators are parameters so that they are traced while
    the export runs)."""
    result = export_job.result()
    assert result.returncode == 0, result.stderr[-3000:]
    path = pathlib.Path(result.stdout.strip().splitlines()[-1])
    assert path == export_dir / "1"
    return path


@pytest.fixture(scope="session")
def sentences(export_corpus):
    """A mixed batch: validation sentences, an empty and a blank one, a repeated one, and one far longer than
    the model's max_length (so it is truncated)."""
    lines = export_corpus["valid_en"].read_text(encoding="utf-8").splitlines()
    return [lines[6], "", lines[7], "   ", " ".join(lines[:6]), lines[8], lines[8], "Kids.", lines[9].upper()]


@pytest.fixture(scope="session")
def served_batch(sentences):
    """`sentences` and a sentence that is not UTF-8."""
    return sentences + [INVALID_UTF8]


@pytest.fixture(scope="session")
def checks(export_path, export_dir, served_batch, sentences, tmp_path_factory):
    """The checks that run in other processes, started as soon as the export exists: `fresh` (the export in a
    process with only tensorflow and tensorflow_text), `cli` (saved_model_cli show --all) and `translate`
    (tools/translate.py --saved_model --n_best in batches of TOOL_BATCH_TOKENS, whose output file is
    `translate_output`)."""
    folder = tmp_path_factory.mktemp("checks")
    batch_file = folder / "batch.json"
    batch_file.write_text(json.dumps([(s if isinstance(s, bytes) else s.encode("utf-8")).hex() for s in served_batch]))
    source_file = write_lines(folder / "sources.en", sentences)
    output = folder / "translations.txt"
    jobs = types.SimpleNamespace(
        fresh=Job([sys.executable, "-c", FRESH_PROCESS, export_path, batch_file], folder / "fresh"),
        cli=Job([pathlib.Path(sys.executable).parent / "saved_model_cli", "show", "--all", "--dir", export_path],
                folder / "cli"),
        translate=Job(tool("translate.py") + [f"--saved_model={export_dir}", f"--input={source_file}",
                                              f"--n_best={N_BEST}", f"--batch_tokens={TOOL_BATCH_TOKENS}",
                                              f"--output={output}"], folder / "translate"),
        translate_output=output,
    )  # fmt: skip
    yield jobs
    for job in (jobs.fresh, jobs.cli, jobs.translate):
        job.kill()


@pytest.fixture(scope="session")
def loaded(export_path, checks):
    """The export loaded in this process (the subprocess `checks` are parameters so that they run meanwhile)."""
    return tf.saved_model.load(str(export_path))
