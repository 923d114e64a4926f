"""DecodingSettings, the one decoding value (its defaults, checks and sources), and decoding.json: what tft-train
writes, and the precedence the commands apply (flag, decoding.json, default)."""

import dataclasses
import inspect
import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tf_transformer.config import ConfigError
from tf_transformer.decoding.settings import (
    COMMAND_DEFAULTS,
    DEFAULTS,
    EXTRA_DECODE_LENGTH,
    PAPER,
    DecodingSettings,
    command_settings,
    describe,
    is_int,
    parse_max_decode_length,
    read_decoding_json,
    recorded_settings,
    require_settings,
    resolve_settings,
    update_decoding_json,
)
from tf_transformer.model_dir import CONFIG_FILE, DECODING_FILE, TRAIN_CONFIG_FILE
from tf_transformer.recipe import Recipe
from tf_transformer.training import TrainConfig


def test_the_defaults_are_the_papers_and_the_multi30k_recipe_sets_its_own():
    # The paper's, and the loop guards (README: no repeated 4-gram of pieces, at most 1.5 x the source + 10).
    assert DEFAULTS == {"beam_size": 4, "length_penalty": 0.6, "method": "beam", "average_last": None,
                        "no_repeat_ngram_size": 4, "max_decode_length": "1.5x+10"}  # fmt: skip
    recipe = Recipe.load("multi30k").decoding
    assert (recipe.beam_size, recipe.length_penalty, recipe.average_last) == (4, 1.5, 5)
    assert Recipe.load("tiny").decoding == COMMAND_DEFAULTS  # a preset without a decoding section


def test_a_flag_beats_decoding_json_which_beats_the_default(tmp_path):
    (tmp_path / DECODING_FILE).write_text(json.dumps({"beam_size": 2, "length_penalty": 1.5, "average_last": 3}))
    settings, sources = resolve_settings({"length_penalty": 0.8}, tmp_path)
    assert settings == {"beam_size": 2, "length_penalty": 0.8, "method": "beam", "average_last": 3,
                        "no_repeat_ngram_size": 4, "max_decode_length": "1.5x+10"}  # fmt: skip
    assert sources == {"beam_size": "decoding.json", "length_penalty": "flag", "method": "default",
                       "average_last": "decoding.json", "no_repeat_ngram_size": "default",
                       "max_decode_length": "default"}  # fmt: skip
    assert describe(settings, sources) == (
        "Decoding: beam_size=2 (decoding.json), length_penalty=0.8 (flag), method=beam (default), "
        "average_last=3 (decoding.json), no_repeat_ngram_size=4 (default), max_decode_length=1.5x+10 (default)"
    )
    # A checkpoint the user names is the weights: no averaging from the file.
    settings, sources = resolve_settings({}, tmp_path, checkpoint_given=True)
    assert settings["average_last"] is None and sources["average_last"] == "--checkpoint given"
    # An older model directory without the file: the defaults.
    assert resolve_settings({}, tmp_path / "old") == (DEFAULTS, {name: "default" for name in DEFAULTS})


@pytest.mark.parametrize("text, message", [
    ("{", "not JSON"), ("[4]", "must be a JSON object"), ('{"beam": 4}', "'beam' is not a decoding setting"),
    ('{"beam_size": 0}', "beam_size: must be an integer >= 1"), ('{"method": "top_k"}', "method: must be one of"),
])  # fmt: skip
def test_a_bad_decoding_json_is_one_clear_error(tmp_path, text, message):
    (tmp_path / DECODING_FILE).write_text(text)
    with pytest.raises(ValueError, match=message) as error:
        read_decoding_json(tmp_path)
    assert "Fix:" in str(error.value) and DECODING_FILE in str(error.value)


def test_training_writes_decoding_json_and_a_resume_keeps_an_edit(tmp_path):
    settings = Recipe.load("tiny").with_overrides(["decode_length_penalty=1.5", "decode_average_last=5"]).decoding
    assert update_decoding_json(tmp_path, settings)
    written = {"beam_size": 4, "length_penalty": 1.5, "method": "beam", "average_last": 5,
               "no_repeat_ngram_size": 4, "max_decode_length": "1.5x+10"}  # fmt: skip
    assert json.loads((tmp_path / DECODING_FILE).read_text()) == written
    # What the trainer writes next: train_config.json records the settings the run was given.
    TrainConfig(model_dir=str(tmp_path)).to_json(tmp_path / TRAIN_CONFIG_FILE, decoding=settings.json_settings())
    assert recorded_settings(tmp_path) == written
    (tmp_path / DECODING_FILE).write_text(json.dumps({**written, "length_penalty": 1.0}))  # tuned by hand
    assert not update_decoding_json(tmp_path, settings)  # a resume with the same settings keeps the edit
    assert read_decoding_json(tmp_path)["length_penalty"] == 1.0
    assert update_decoding_json(tmp_path, dataclasses.replace(settings, beam_size=6))  # a changed one rewrites it
    assert read_decoding_json(tmp_path) == {**written, "beam_size": 6}


def test_a_model_directory_of_release_0_1_records_its_settings_in_config_json(tmp_path):
    # Release 0.1 kept them as decode_* fields of config.json (tests/fixtures/release_0_1_model): a resume with the
    # same settings keeps its decoding.json; the first start of the new release records them in train_config.json.
    fixture = pathlib.Path(__file__).parents[1] / "fixtures" / "release_0_1_model"
    shutil.copy(fixture / CONFIG_FILE, tmp_path / CONFIG_FILE)
    shutil.copy(fixture / DECODING_FILE, tmp_path / DECODING_FILE)
    recorded = recorded_settings(tmp_path)
    assert recorded == json.loads((fixture / DECODING_FILE).read_text())
    assert not update_decoding_json(tmp_path, dataclasses.replace(COMMAND_DEFAULTS, **recorded))
    assert recorded_settings(tmp_path / "missing") is None


@pytest.mark.parametrize("value, expected", [
    ("1.5x+10", (None, 1.5, 10)), ("x+50", (None, 1.0, 50)), ("2x", (None, 2.0, 0)), (" .5x + 3 ", (None, 0.5, 3)),
    ("120", (120, 1.0, 50)), (7, (7, 1.0, 50)),
])  # fmt: skip
def test_max_decode_length_is_n_or_a_ratio_and_an_offset(value, expected):
    assert parse_max_decode_length(value) == expected
    assert DecodingSettings(max_decode_length=value).length_cap == expected


@pytest.mark.parametrize("value", ["1.5y", "1.5x-3", "x+1.5", "-2x", "0", 0, True, None, ""])
def test_a_bad_max_decode_length_is_one_clear_error(tmp_path, value):
    with pytest.raises(ValueError, match=r"--max_decode_length: must be N .* or Ax\+B .*Fix: set --max_decode_length"):
        resolve_settings({"max_decode_length": value}, None)
    (tmp_path / DECODING_FILE).write_text(json.dumps({"max_decode_length": value}))
    with pytest.raises(ValueError, match="decoding.json: max_decode_length: must be"):
        read_decoding_json(tmp_path)
    with pytest.raises(ConfigError, match="decode_max_decode_length: (must be|expected str)"):
        Recipe().with_overrides([f"decode_max_decode_length={json.dumps(value)}"])


def test_the_guards_are_recipe_settings_and_an_int_cap_is_kept_as_text():
    recipe = Recipe().with_overrides(["decode_no_repeat_ngram_size=0", "decode_max_decode_length=200"])
    assert recipe.decoding.max_decode_length == "200" and recipe.decoding.no_repeat_ngram_size == 0
    assert Recipe.from_dict(json.loads(recipe.to_json())) == recipe
    with pytest.raises(ValueError, match="no_repeat_ngram_size: must be an integer >= 0"):
        resolve_settings({"no_repeat_ngram_size": -1}, None)


# ------------------------------------------------------------------------------------ the DecodingSettings value


def test_the_two_default_sets_each_number_once():
    # The library's: the paper's decoding (beam 4, alpha 0.6, no n-gram ban, source length + 50).
    assert (PAPER.method, PAPER.beam_size, PAPER.length_penalty, PAPER.n_best) == ("beam", 4, 0.6, 1)
    assert (PAPER.no_repeat_ngram_size, PAPER.max_decode_length, PAPER.min_decode_length) == (0, "x+50", 0)
    assert PAPER.length_cap == (None, 1.0, EXTRA_DECODE_LENGTH) and PAPER == DecodingSettings()
    # The commands' and decoding.json's: the paper's with the loop guards.
    assert COMMAND_DEFAULTS == dataclasses.replace(PAPER, no_repeat_ngram_size=4, max_decode_length="1.5x+10")
    assert DEFAULTS == COMMAND_DEFAULTS.json_settings()
    recipe = Recipe()
    assert recipe.decoding == COMMAND_DEFAULTS
    assert recipe.decoding.length_penalty == PAPER.length_penalty


def test_every_decoding_entry_point_defaults_to_the_papers_settings():
    from tf_transformer.decoding import beam_search, greedy_decode, sample_decode, translate, translate_texts
    from tf_transformer.decoding.text import TextTranslator
    from tf_transformer.decoding.tuning import tune_length_penalty
    from tf_transformer.export import TranslationModule, export_saved_model
    from tf_transformer.visualization import sentence_attention, write_attention_plots

    functions = [
        beam_search, greedy_decode, sample_decode, translate, translate_texts, TextTranslator, TranslationModule,
        export_saved_model, sentence_attention, write_attention_plots, tune_length_penalty,
    ]  # fmt: skip
    for function in functions:
        assert inspect.signature(function).parameters["settings"].default is PAPER, function.__name__


def test_the_value_is_frozen_and_replace_checks_again():
    settings = DecodingSettings(beam_size=5, n_best=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.beam_size = 0
    with pytest.raises(ValueError, match=r"n_best: must be an int in \[1, beam_size=1\].*Fix"):
        dataclasses.replace(settings, beam_size=1)
    with pytest.raises(TypeError, match="settings: expected a DecodingSettings, got dict.*Fix"):
        require_settings({"beam_size": 4})


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(method="nucleus"), r"method: must be one of beam, greedy, sample.*Fix"),
        (dict(beam_size=0), r"beam_size: must be an integer >= 1.*Fix"),
        (dict(beam_size=2.0), r"beam_size: must be an integer >= 1"),
        (dict(beam_size=True), r"beam_size: must be an integer >= 1"),
        (dict(length_penalty=-1.0), r"length_penalty: must be a number >= 0.*Fix"),
        (dict(n_best=0), r"n_best: must be an integer >= 1"),
        (dict(beam_size=2, n_best=3), r"n_best: must be an int in \[1, beam_size=2\].*Fix"),
        (dict(method="greedy", n_best=2), r"n_best: greedy decoding gives one hypothesis.*Fix"),
        (dict(top_k=5), r"top_k: sampling arguments need method='sample'.*Fix"),
        (dict(method="greedy", temperature=0.5, seed=3), r"temperature, seed: sampling arguments need"),
        (dict(method="sample", temperature=-1.0), r"temperature: must be a number >= 0"),
        (dict(method="sample", top_k=-2), r"top_k: must be an integer >= 0"),
        (dict(method="sample", top_p=0.0), r"top_p: must be a number in \(0, 1\]"),
        (dict(method="sample", seed="7"), r"seed: must be None"),
        (dict(no_repeat_ngram_size=-1), r"no_repeat_ngram_size: must be an integer >= 0.*Fix"),
        (dict(max_decode_length=0), r"max_decode_length: must be N .* or Ax\+B.*Fix"),
        (dict(max_decode_length="1.5x-3"), r"max_decode_length: must be N"),
        (dict(max_decode_length=None), r"max_decode_length: must be N"),
        (dict(min_decode_length=-1), r"min_decode_length: must be an integer >= 0.*Fix"),
        (dict(average_last=0), r"average_last: must be null .* or an integer >= 1.*Fix"),
    ],
)
def test_each_bad_setting_is_one_clear_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DecodingSettings(**kwargs)


def test_numpy_integers_and_length_forms_are_accepted():
    settings = DecodingSettings(beam_size=np.int64(3), n_best=np.int32(2), max_decode_length=np.int64(9))
    assert settings.length_cap == (9, 1.0, EXTRA_DECODE_LENGTH)
    assert DecodingSettings(max_decode_length="120").length_cap == (120, 1.0, EXTRA_DECODE_LENGTH)
    assert DecodingSettings(method="sample", temperature=0, top_k=1, top_p=0.5, seed=4).top_p == 0.5
    assert is_int(3) and is_int(np.int64(3)) and not is_int(True) and not is_int(3.0) and not is_int("3")


def test_command_settings_a_flag_beats_decoding_json_which_beats_the_default(tmp_path):
    assert command_settings({}, tmp_path) == (COMMAND_DEFAULTS, {name: "default" for name in DEFAULTS})
    (tmp_path / DECODING_FILE).write_text(json.dumps({"beam_size": 2, "length_penalty": 1.5, "average_last": 3}))
    settings, sources = command_settings({"length_penalty": 0.8}, tmp_path, n_best=2)
    assert settings == dataclasses.replace(COMMAND_DEFAULTS, beam_size=2, length_penalty=0.8, average_last=3, n_best=2)
    assert (sources["beam_size"], sources["length_penalty"], sources["method"]) == ("decoding.json", "flag", "default")
    # A bad flag names the flag, before any model is read.
    with pytest.raises(ValueError, match=r"--beam_size: must be an integer >= 1 .*Fix: set --beam_size"):
        command_settings({"beam_size": 0}, tmp_path)


def test_the_settings_module_imports_no_tensorflow():
    code = "import sys, tf_transformer.decoding.settings, tf_transformer.config; print('tensorflow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
