"""The user scripts in examples/ run on tiny settings and learn something.

They run in this process (runpy) rather than in a subprocess: the same code path as `python examples/x.py`,
without paying TensorFlow's import again.
"""

import json
import pathlib
import runpy

import keras
import pytest

import tf_transformer as tft
from tf_transformer.decoding import DecodingSettings

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run_example(name, argv, capsys):
    """Runs examples/<name>'s main(argv); returns its summary and checks that it printed it as JSON."""
    summary = runpy.run_path(str(EXAMPLES / name), run_name="example")["main"](argv)
    printed = capsys.readouterr().out
    assert json.loads(printed[printed.rindex("\n{\n") + 1 :]) == json.loads(json.dumps(summary))
    return summary


def test_train_with_fit_lowers_the_loss_on_multi30k_and_translates(multi30k_dir, tmp_path, capsys):
    summary = run_example(
        "train_with_fit.py",
        [
            f"--data_dir={multi30k_dir}", f"--output_dir={tmp_path}", "--override=d_model=32", "--override=d_ff=64",
            "--override=num_heads=2", "--override=num_encoder_layers=1", "--override=num_decoder_layers=1",
            "--override=dropout=0.0", "--override=warmup_steps=50", "--vocab_size=400", "--vocab_sentences=2000",
            "--batch_tokens=1024", "--epochs=3", "--steps_per_epoch=5", "--validation_steps=0", "--beam_size=1",
        ],
        capsys,
    )  # fmt: skip
    assert len(summary["loss"]) == 3 and summary["val_loss"] is None  # no validation: it costs a graph trace
    assert summary["loss"][-1] < summary["loss"][0] - 0.3, summary["loss"]
    # The saved model.keras loads without custom_objects and translates exactly as the trained model did.
    reloaded = keras.models.load_model(tmp_path / "model.keras")
    tokenizer = tft.data.Tokenizer.from_directory(tmp_path / "vocab")
    [[(translation, score)]] = tft.decoding.translate_texts(
        reloaded, tokenizer, [summary["sentence"]], DecodingSettings(method="greedy")
    )
    assert translation == summary["translation"] and score == pytest.approx(summary["score"], abs=1e-4), summary
    assert (tmp_path / "model.keras").is_file() and not (tmp_path / ".model.keras.tmp.keras").exists()
    assert json.loads((tmp_path / "config.json").read_text())["vocab_size"] <= 400
    assert (tmp_path / "vocab" / "tokenizer.json").is_file()


def test_classify_events_learns_the_order_of_events(capsys):
    summary = run_example(
        "classify_events.py",
        [
            "--train_sessions=2000", "--test_sessions=500", "--max_length=12", "--d_model=32", "--num_heads=2",
            "--num_layers=1", "--epochs=2", "--steps_per_epoch=40", "--learning_rate=3e-3",
        ],
        capsys,
    )  # fmt: skip
    assert summary["chance"] < 0.56
    # Counting events alone gets 75% (half the normal sessions hold both events, reversed): above that, the
    # model uses their order.
    assert summary["test_accuracy"] > 0.85, summary
    assert summary["loss"][-1] < summary["loss"][0]
