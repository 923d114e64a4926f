"""tools/plot_attention.py as users run it, on a model directory with an untrained checkpoint."""

import gzip
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_transformer as tft
from tf_transformer.checkpoints import weights_checkpoint
from tf_transformer.data import train_sentencepiece

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


@pytest.fixture(scope="module")
def matplotlib_installed():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        message = "matplotlib is not installed (pip install '.[plot]'); the plotting tool needs it"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI installs the test extra, which has matplotlib: a skip would hide a failure
        pytest.skip(message)


@pytest.fixture(scope="module")
def model_dir(multi30k_dir, tmp_path_factory):
    """config.json, vocab/ and checkpoints/ as tools/train.py writes them, with random weights: 1 layer, 2 heads."""
    path = tmp_path_factory.mktemp("plot_model")
    keras.utils.set_random_seed(0)
    lines = []
    for lang in ("en", "de"):
        with gzip.open(multi30k_dir / f"train.{lang}.gz", "rt", encoding="utf-8") as handle:
            lines += [next(handle).strip() for _ in range(100)]
    tokenizer = train_sentencepiece(lines, path / "vocab", vocab_size=400, seed=0)
    config = tft.TransformerConfig(
        vocab_size=tokenizer.vocab_size, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1,
        num_decoder_layers=1, max_length=32, dropout=0.0,
    )  # fmt: skip
    config.to_json(path / "config.json")
    model = tft.Transformer(config)
    model.build()
    tf.train.CheckpointManager(weights_checkpoint(model), str(path / "checkpoints"), max_to_keep=1).save(1)
    return path


def run(*arguments):
    command = [sys.executable, str(ROOT / "tools" / "plot_attention.py"), *map(str, arguments)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=ENV)


def png_pixels(path):
    """(width, height) from the PNG header, and the number of distinct colours in the image."""
    import matplotlib.image

    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(path)
    return struct.unpack(">II", data[16:24]), len(np.unique(image.reshape(-1, image.shape[-1]), axis=0))


def test_the_tool_writes_a_heatmap_per_attention_and_the_positional_encoding(matplotlib_installed, model_dir, tmp_path):
    output = tmp_path / "plots"
    result = run(
        f"--model_dir={model_dir}", "--sentence=Two dogs play.", "--target=Zwei Hunde spielen.",
        f"--output_dir={output}", "--dpi=40", "--layers=0", "--heads=1,0",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    names = ["encoder_self_layer0", "decoder_self_layer0", "decoder_cross_layer0", "positional_encoding"]
    assert summary["files"] == [str(output / f"{name}.png") for name in names]
    assert sorted(path.name for path in output.iterdir()) == sorted(f"{name}.png" for name in names)
    assert summary["target"] == "Zwei Hunde spielen." and not summary["translated"]
    assert summary["source_tokens"][-1] == "</s>" and summary["target_input_tokens"][0] == "<s>"

    # Two heads side by side (head 1, then head 0); a panel is max(3, 0.25 * longest axis in tokens) inches,
    # and the title adds half an inch.
    source, target = len(summary["source_tokens"]), len(summary["target_output_tokens"])
    for name, longest in zip(names[:3], [source, target, max(source, target)], strict=True):
        panel = max(3.0, 0.25 * longest)
        size, colours = png_pixels(output / f"{name}.png")
        assert size == (int(2 * panel * 40), int((panel + 0.5) * 40)), name
        assert colours > 20, name  # heatmaps and labels, not a blank canvas
    size, colours = png_pixels(output / "positional_encoding.png")
    assert size == (8 * 40, 5 * 40) and colours > 20


def test_without_a_target_it_translates_with_decoding_json(matplotlib_installed, model_dir, tmp_path):
    # A copy of the model directory whose decoding.json (as tft-train writes it) asks for greedy search and at
    # most 3 tokens a sentence; a flag given wins over the file.
    directory = tmp_path / "model"
    shutil.copytree(model_dir, directory)
    (directory / "decoding.json").write_text(json.dumps({"method": "greedy", "max_decode_length": "3"}))
    result = run(f"--model_dir={directory}", "--sentence=Two dogs play.", f"--output_dir={tmp_path / 'plots'}",
                 "--dpi=20", "--layers=0", "--no_repeat_ngram_size=0")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["translated"]
    assert summary["decoding"]["method"] == "greedy" and summary["decoding"]["max_decode_length"] == "3"
    assert summary["decoding"]["no_repeat_ngram_size"] == 0  # the flag wins over the file
    assert len(summary["target_output_tokens"]) <= 4  # at most 3 tokens, then the closing </s>
    assert "method=greedy (decoding.json)" in result.stderr and "no_repeat_ngram_size=0 (flag)" in result.stderr
