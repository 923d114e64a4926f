"""Recipe: a preset's settings, each in the value that owns it; overrides routed by flat name; old flat files."""

import dataclasses
import json
import pathlib

import pytest

from tf_transformer import ConfigError, Recipe, TransformerConfig
from tf_transformer.config import MOVED_FIELDS
from tf_transformer.data import DataConfig
from tf_transformer.decoding.settings import COMMAND_DEFAULTS, JSON_SETTINGS
from tf_transformer.training import TrainConfig

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "release_0_1_model"


def test_the_multi30k_preset_holds_the_whole_recipe():
    recipe = Recipe.load("multi30k")
    assert (recipe.model.d_model, recipe.model.norm_first, recipe.model.attention_dropout) == (128, True, 0.1)
    assert recipe.training == {
        "warmup_steps": 2000, "learning_rate_scale": 2.0, "label_smoothing": 0.1,
        "dropout_by_epochs": "0:0.1,35:0.2,80:0.3", "dropout_rule_parameters": 1310720, "initial_dropout": 0.0,
        "initial_dropout_fraction": 0.0,
    }  # fmt: skip
    assert recipe.data == {"subword_nbest_size": 0, "subword_alpha": 0.1}
    assert (recipe.decoding.beam_size, recipe.decoding.length_penalty, recipe.decoding.average_last) == (4, 1.5, 5)
    assert Recipe.load("configs/multi30k.json") == recipe and Recipe.from_dict(json.loads(recipe.to_json())) == recipe


def test_overrides_go_to_the_value_that_owns_each_field():
    overrides = ["d_model=256", "warmup_steps=4000", "subword_nbest_size=64", "decode_beam_size=6"]
    recipe = Recipe.load("multi30k").with_overrides([*overrides, "decode_max_decode_length=200"])
    assert (recipe.model.d_model, recipe.training["warmup_steps"], recipe.data["subword_nbest_size"]) == (256, 4000, 64)
    assert (recipe.decoding.beam_size, recipe.decoding.max_decode_length) == (6, "200")  # a cap of N kept as text
    # The run's configs take them whole.
    train_config = TrainConfig(model_dir="run", **recipe.training)
    assert (train_config.warmup_steps, train_config.dropout_by_epochs) == (4000, "0:0.1,35:0.2,80:0.3")
    assert DataConfig(**recipe.data).samples_subwords


def test_a_dropout_override_turns_the_dropout_rule_off_unless_it_is_given_too():
    recipe = Recipe.load("multi30k")
    assert recipe.with_overrides(["dropout=0.3"]).training["dropout_by_epochs"] is None
    assert recipe.with_overrides(["dropout=0.3"]).model.dropout == 0.3
    both = recipe.with_overrides(["dropout=0.3", "dropout_by_epochs=0:0.3,50:0.4"])
    assert both.training["dropout_by_epochs"] == "0:0.3,50:0.4"
    assert recipe.replace(dropout=0.3).training["dropout_by_epochs"] == "0:0.1,35:0.2,80:0.3"  # replace: as given


@pytest.mark.parametrize(
    "override, message",
    [
        ("d_modle=64", "d_modle: not a setting of a recipe (a model, training, subword or decode_* field). Did you "
                       "mean 'd_model'?"),
        ("warmup_step=10", "Did you mean 'warmup_steps'?"),
        ("decode_beam=6", "Did you mean 'decode_beam_size'?"),
        ("train_steps=10", "train_steps: a TrainConfig setting of the run, not of a recipe. Fix: set it with "
                           "tft-train --train_steps"),
        ("decode_beam_size=0", "decode_beam_size: must be an integer >= 1"),
        ("learning_rate_scale=0", "learning_rate_scale: must be positive"),
        ("subword_nbest_size=8", "subword_alpha: must be positive"),
    ],
)  # fmt: skip
def test_an_unknown_or_bad_setting_is_refused_naming_it(override, message):
    recipe = Recipe().replace(subword_alpha=0.0)  # not checked while sampling is off
    with pytest.raises(ConfigError) as error:
        # Names, model and decoding values when the recipe is made; training and subword values by the run's configs.
        changed = recipe.with_overrides([override])
        TrainConfig(model_dir="runs/m", **changed.training), DataConfig(**changed.data)
    assert message in str(error.value) and "Fix:" in str(error.value)


def test_a_sectioned_file_names_each_sections_fields(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"model": {"d_model": 256}, "training": {"warmup_step": 10}}))
    with pytest.raises(ConfigError, match="warmup_step: not a training setting of a recipe. Did you mean 'warmup_st"):
        Recipe.load(path)
    path.write_text(json.dumps({"model": {"d_model": 256}, "warmup_steps": 10}))
    with pytest.raises(ConfigError, match="warmup_steps: a recipe with sections holds only model, training, data"):
        Recipe.load(path)
    path.write_text(json.dumps({"model": {"d_model": 256}, "decoding": {"beam_size": 2}}))
    recipe = Recipe.load(str(path))
    expected = (256, dataclasses.replace(COMMAND_DEFAULTS, beam_size=2), Recipe().training)
    assert (recipe.model.d_model, recipe.decoding, recipe.training) == expected


def test_a_flat_config_of_release_0_1_loads_with_each_setting_where_it_lives_now():
    # config.json of a model directory of release 0.1 (tests/fixtures/make_release_0_1_model.py): 38 flat fields.
    old = json.loads((FIXTURE / "config.json").read_text())
    assert set(MOVED_FIELDS) <= set(old) and len(old) == 38
    recipe = Recipe.from_dict(old)
    assert recipe.model == TransformerConfig.from_json(FIXTURE / "config.json")
    assert recipe.model.dropout == 0.1 and recipe.model.attention_dropout == 0.05
    assert recipe.training == {
        "warmup_steps": 100, "learning_rate_scale": 2.0, "label_smoothing": 0.2, "dropout_by_epochs": "0:0.1,35:0.2",
        "dropout_rule_parameters": 12288, "initial_dropout": 0.0, "initial_dropout_fraction": 0.0,
    }  # fmt: skip
    assert recipe.data == {"subword_nbest_size": 0, "subword_alpha": 0.2}
    assert recipe.decoding.json_settings() == json.loads((FIXTURE / "decoding.json").read_text())
    # The same of the model directory (its training settings are in config.json too: release 0.1 wrote them there).
    assert Recipe.of_model_dir(FIXTURE) == recipe
    assert set(recipe.to_dict()["decoding"]) == set(JSON_SETTINGS)


def test_load_with_overrides_then_the_runs_configs_check_each_config_once(monkeypatch):
    # tft-train's --config and --override, then the run's configs: each config is made and checked once.
    checks = []
    for config in (TransformerConfig, TrainConfig, DataConfig):
        original = config.__post_init__
        check = lambda self, original=original: (checks.append(type(self).__name__), original(self))[1]  # noqa: E731
        monkeypatch.setattr(config, "__post_init__", check)
    recipe = Recipe.load("multi30k", ["d_model=64", "dropout=0.2", "warmup_steps=400", "decode_beam_size=6"])
    TrainConfig(model_dir="runs/m", **recipe.training), DataConfig(**recipe.data)
    assert sorted(checks) == ["DataConfig", "TrainConfig", "TransformerConfig"]
    assert (recipe.model.d_model, recipe.model.dropout, recipe.training["warmup_steps"]) == (64, 0.2, 400)
    assert recipe.training["dropout_by_epochs"] is None and recipe.decoding.beam_size == 6
