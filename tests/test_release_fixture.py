"""A model directory and a .keras file written by release 0.1.0 (tests/fixtures/make_release_0_1_model.py), whose
model config held its training, subword and decoding settings too: they load, translate, train on, and fine-tune."""

import gzip
import json
import os
import pathlib
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest

import tf_transformer as tft
from tf_transformer.checkpoints import load_translation_model
from tf_transformer.data import DataConfig
from tf_transformer.decoding.settings import command_settings
from tf_transformer.decoding.text import translate_texts
from tf_transformer.training import TrainConfig, train

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
NAME = "release_0_1_model"
CORPUS, PAIRS = "release_0_1_corpus", 300  # as make_release_0_1_model.py wrote them (data_config.json's paths)


@pytest.fixture
def old_run(tmp_path, multi30k_dir, monkeypatch):
    """A copy of the fixture in `tmp_path`, the working directory, beside the corpus its data_config.json names."""
    shutil.copytree(FIXTURES / NAME, tmp_path / NAME)
    (tmp_path / CORPUS).mkdir()
    for lang in ("en", "de"):
        with gzip.open(multi30k_dir / f"train.{lang}.gz", "rt", encoding="utf-8") as handle:
            lines = handle.read().splitlines()[:PAIRS]
        (tmp_path / CORPUS / f"train.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path / NAME


def test_the_model_directory_loads_and_translates_with_its_decoding_json():
    model, tokenizer, config = load_translation_model(FIXTURES / NAME)
    assert (config.d_model, config.vocab_size, config.attention_dropout) == (16, 126, 0.05)
    settings, sources = command_settings({}, FIXTURES / NAME)
    assert (settings.beam_size, settings.length_penalty, settings.max_decode_length) == (3, 1.2, "1.5x+5")
    assert set(sources.values()) == {"decoding.json"}
    [[(translation, score)]] = translate_texts(model, tokenizer, ["A dog runs through the snow."], settings)
    assert isinstance(translation, str) and np.isfinite(score)


def test_the_keras_file_loads_with_the_logits_of_the_checkpoint():
    loaded = keras.models.load_model(FIXTURES / f"{NAME}.keras")
    model, _, config = load_translation_model(FIXTURES / NAME)
    assert loaded.config == config  # the moved settings of its embedded config set aside
    source, target = np.array([[5, 17, 30, 8, 2], [9, 4, 2, 0, 0]]), np.array([[1, 12, 40, 7], [1, 3, 0, 0]])
    np.testing.assert_array_equal(loaded((source, target)).numpy(), model((source, target)).numpy())


def test_a_resumed_run_keeps_its_training_settings_and_decoding_json(old_run):
    recipe = tft.Recipe.of_model_dir(old_run)  # release 0.1 kept them in config.json
    assert recipe.training["warmup_steps"] == 100 and recipe.training["dropout_by_epochs"] == "0:0.1,35:0.2"
    decoding_json = (old_run / "decoding.json").read_text()
    data = DataConfig.from_json(old_run / "data_config.json").replace(**recipe.data)
    run = TrainConfig(model_dir=NAME, train_steps=6, checkpoint_every=2, keep_checkpoints=1, seed=1,
                      deterministic=True, mixed_precision="float32", **recipe.training)  # fmt: skip
    result = train(recipe.model, data, run, recipe.decoding)
    assert (result.status, result.start_step, result.step) == ("completed", 4, 6)
    # Each setting now in the file of its owner; decoding.json, given the same settings, is left as it was.
    assert json.loads((old_run / "config.json").read_text()) == recipe.model.to_dict()
    saved = json.loads((old_run / "train_config.json").read_text())
    assert {name: saved[name] for name in TrainConfig.RECIPE_FIELDS} == recipe.training
    assert saved["decoding"] == json.loads(decoding_json)
    assert (old_run / "decoding.json").read_text() == decoding_json
    assert tft.Recipe.of_model_dir(old_run) == recipe


def test_tft_train_fine_tunes_it_with_another_dropout(old_run, tmp_path):
    # The README's fine-tuning command with --override=dropout=0.2: release 0.1 refused it (dropout_by_epochs
    # differed from the source's model config, "whose weights would not fit").
    new_dir = tmp_path / "tuned"
    result = subprocess.run(
        [sys.executable, "-m", "tf_transformer.cli.train", f"--init_from={old_run}", f"--model_dir={new_dir}",
         "--dataset=files", f"--train_source={CORPUS}/train.en", f"--train_target={CORPUS}/train.de",
         "--override=dropout=0.2", "--train_steps=2", "--checkpoint_every=2", "--batch_tokens=512", "--seed=1",
         "--mixed_precision=float32"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Trained steps 0 -> 2" in result.stdout
    config = json.loads((new_dir / "config.json").read_text())
    assert (config["dropout"], config["attention_dropout"], config["d_model"]) == (0.2, 0.05, 16)
    train_config = json.loads((new_dir / "train_config.json").read_text())
    assert train_config["dropout_by_epochs"] is None  # the override's dropout, not the rule's
    assert (train_config["warmup_steps"], train_config["label_smoothing"]) == (200, 0.2)  # the source's smoothing
    assert train_config["initialized_from"]["checkpoint"] == str(old_run / "checkpoints" / "ckpt-4")
    assert json.loads((new_dir / "decoding.json").read_text()) == json.loads((old_run / "decoding.json").read_text())
