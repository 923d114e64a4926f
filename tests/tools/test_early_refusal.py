"""A bad decoding flag, or a --model_dir that is no model directory, stops each command at once: one line naming
the flag and the fix, exit status 1, and nothing read or started before it (the model directory's checkpoints here
are unreadable, no input exists, and TensorFlow is not imported)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
MESSAGE = "error: --beam_size: must be an integer >= 1"
# The commands that take decoding flags, each with the other flags it needs (none of whose files exist).
DECODING_TOOLS = [
    ("translate.py", ["--input=/nonexistent/input.en"]),
    ("evaluate.py", ["--sources=/nonexistent/sources.en", "--references=/nonexistent/references.de"]),
    ("export.py", ["--export_dir=/nonexistent/exports"]),
    ("plot_attention.py", ["--sentence=A dog runs.", "--output_dir=/nonexistent/plots"]),
]


@pytest.fixture(scope="module")
def broken_model_dir(tmp_path_factory):
    """A model directory whose every file but decoding.json is unreadable: loading it would fail first."""
    path = tmp_path_factory.mktemp("early") / "run"
    (path / "checkpoints").mkdir(parents=True)
    (path / "checkpoints" / "checkpoint").write_text("not a checkpoint state\n")
    (path / "checkpoints" / "ckpt-1.index").write_bytes(b"\x00garbage")
    (path / "config.json").write_text("{ not json")
    (path / "decoding.json").write_text(json.dumps({"beam_size": 4, "average_last": 5}))
    return path


@pytest.mark.parametrize("tool, flags", DECODING_TOOLS)
def test_a_bad_beam_size_is_refused_before_the_model_is_read(broken_model_dir, tool, flags):
    # -X importtime: Python lists every module it imports on stderr; TensorFlow must not be among them.
    command = [sys.executable, "-X", "importtime", str(ROOT / "tools" / tool), f"--model_dir={broken_model_dir}",
               "--beam_size=0", *flags]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=ENV)
    assert result.returncode == 1, result.stderr[-2000:]
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(MESSAGE), result.stderr[-2000:]
    assert "Fix: set --beam_size to an integer >= 1" in errors[0]
    assert "Traceback" not in result.stderr and result.stdout == ""
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    assert "tf_transformer.cli" in imported and "tensorflow" not in imported  # refused before TensorFlow starts


@pytest.mark.parametrize(
    "tool, flags", [*DECODING_TOOLS, ("score.py", ["--sources=/nonexistent/sources.en", "--targets=/nonexistent/t.de"])]
)
@pytest.mark.parametrize("model_dir", ["missing", "empty"])
def test_a_model_dir_that_is_no_model_directory_is_refused_before_tensorflow_starts(tmp_path, tool, flags, model_dir):
    # A mistyped --model_dir, the commonest mistake: one line at once, not after TensorFlow's start of seconds.
    path = tmp_path / model_dir
    if model_dir == "empty":
        path.mkdir()  # a folder, but no config.json: not written by tft-train
    command = [sys.executable, "-X", "importtime", str(ROOT / "tools" / tool), f"--model_dir={path}", *flags]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=ENV)
    assert result.returncode == 1, result.stderr[-2000:]
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    expected = (
        f"error: model_dir: {path} is not a folder. "
        if model_dir == "missing"
        else f"error: model_dir: {path / 'config.json'} does not exist, so {path} is not a trained model directory. "
    )
    assert errors == [expected + "Fix: pass the --model_dir that tft-train wrote."], result.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    assert "tf_transformer.cli" in imported and "tensorflow" not in imported  # refused before TensorFlow starts


@pytest.mark.parametrize("tool, flags", DECODING_TOOLS)
def test_bf16_with_int8_weights_is_refused_before_tensorflow_starts(broken_model_dir, tool, flags):
    command = [sys.executable, "-X", "importtime", str(ROOT / "tools" / tool), f"--model_dir={broken_model_dir}",
               "--quantize=int8", "--mixed_precision=mixed_bfloat16", *flags]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=ENV)
    assert result.returncode == 1, result.stderr[-2000:]
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert errors == [
        "error: --mixed_precision=mixed_bfloat16 with --quantize=int8: int8 weights are dequantized to float32 and "
        "compute in it. Fix: leave out --mixed_precision (auto is float32 with --quantize=int8), or --quantize."
    ], result.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    assert "tensorflow" not in imported


def test_an_exports_precision_is_refused_with_saved_model(tmp_path):
    command = [sys.executable, "-X", "importtime", str(ROOT / "tools" / "translate.py"), f"--saved_model={tmp_path}",
               "--mixed_precision=float32", "--input=/nonexistent/input.en"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=ENV)
    assert result.returncode == 1, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: --mixed_precision: fixed when the model was exported, so not a flag with --saved_model. Fix: leave "
        "it out, or export again with the setting (tft-export)."
    ]
