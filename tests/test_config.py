"""TransformerConfig: validation errors that name the field and the fix, JSON in and out, presets."""

import dataclasses
import json

import pytest

import tf_transformer as tft
from tf_transformer import ConfigError, Recipe, TransformerConfig
from tf_transformer.data import DataConfig
from tf_transformer.training import TrainConfig


def test_defaults_are_the_papers_base_model():
    config, training = TransformerConfig(), TrainConfig(model_dir="run")
    assert (config.d_model, config.d_ff, config.num_heads) == (512, 2048, 8)
    assert (config.num_encoder_layers, config.num_decoder_layers) == (6, 6)
    assert (config.dropout, training.label_smoothing, training.warmup_steps) == (0.1, 0.1, 4000)
    assert config.key_dim == config.value_dim == 64
    assert config.pad_id == 0 and config.position_encoding == "sinusoidal" and not config.norm_first


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TransformerConfig().d_model = 256


@pytest.mark.parametrize(
    "changes, field, fix",
    [
        (dict(d_model=510), "d_model", "multiple of num_heads"),
        (dict(d_model=0), "d_model", "positive"),
        (dict(d_ff=-1), "d_ff", "positive"),
        (dict(num_heads=0), "num_heads", "positive"),
        (dict(num_encoder_layers=0), "num_encoder_layers", ">= 1"),
        (dict(num_decoder_layers=-1), "num_decoder_layers", ">= 0"),
        (dict(vocab_size=0), "vocab_size", "positive"),
        (dict(dropout=1.0), "dropout", "[0, 1)"),
        (dict(dropout=-0.1), "dropout", "[0, 1)"),
        (dict(attention_dropout=1.5), "attention_dropout", "[0, 1)"),
        (dict(activation_dropout=-0.1), "activation_dropout", "[0, 1)"),
        (dict(position_encoding="rotary"), "position_encoding", "'sinusoidal', 'learned'"),
        (dict(activation="swish"), "activation", "'relu', 'gelu'"),
        (dict(attention_window=-2), "attention_window", "null for full attention"),
        (dict(pad_id=3), "pad_id", "pad_id=0"),
        (dict(bos_id=0), "bos_id", "0 is padding"),
        (dict(eos_id=40000), "eos_id", "[1, 37000)"),
        (dict(bos_id=2, eos_id=2), "bos_id, eos_id", "different ids"),
        (dict(target_vocab_size=1000), "share_embeddings", "share_embeddings=false"),
        (dict(d_k=0), "d_k", ">= 1"),
        (dict(d_model="512"), "d_model", "expected int"),
        (dict(share_embeddings="yes"), "share_embeddings", "expected bool"),
    ],
)
def test_invalid_fields_name_the_field_and_the_fix(changes, field, fix):
    with pytest.raises(ConfigError) as error:
        TransformerConfig(**changes)
    message = str(error.value)
    assert message.startswith(field + ":"), message
    assert fix in message and "Fix:" in message, message


@pytest.mark.parametrize(
    "owner, changes, field, fix",
    [
        ("training", dict(label_smoothing=1.0), "label_smoothing", "[0, 1)"),
        ("training", dict(warmup_steps=0), "warmup_steps", "positive"),
        ("data", dict(subword_nbest_size=64, subword_alpha=0.0), "subword_alpha", "subword_nbest_size=0"),
        ("data", dict(subword_nbest_size=-1, subword_alpha=-0.5), "subword_alpha", "positive"),
        ("data", dict(subword_nbest_size=1.5), "subword_nbest_size", "expected int"),
    ],
)
def test_invalid_training_and_subword_settings_name_the_field_and_the_fix(owner, changes, field, fix):
    # Release 0.1 kept them in the model config; their owners check them now, also those a recipe carries (once a
    # run, when its configs are made from the recipe's values).
    def from_recipe():
        recipe = Recipe().replace(**changes)
        TrainConfig(model_dir="run", **recipe.training), DataConfig(**recipe.data)

    for build in ((lambda: TrainConfig(model_dir="run", **changes)) if owner == "training" else
                  (lambda: DataConfig(**changes)), from_recipe):  # fmt: skip
        with pytest.raises(ConfigError) as error:
            build()
        message = str(error.value)
        assert message.startswith(field + ":"), message
        assert fix in message and "Fix:" in message, message


def test_explicit_head_widths_allow_any_d_model():
    config = TransformerConfig(d_model=510, d_k=64, d_v=32)
    assert (config.key_dim, config.value_dim) == (64, 32)


def test_separate_vocabularies():
    config = TransformerConfig(vocab_size=1000, target_vocab_size=2000, share_embeddings=False)
    assert config.output_vocab_size == 2000


def test_numbers_from_json_are_normalised():
    config = TransformerConfig.from_dict({"d_model": 512.0, "dropout": 0})
    assert config.d_model == 512 and isinstance(config.d_model, int)
    assert config.dropout == 0.0 and isinstance(config.dropout, float)


def test_unknown_field_suggests_the_nearest():
    with pytest.raises(ConfigError, match=r"d_modle: not a TransformerConfig field. Did you mean 'd_model'\?"):
        TransformerConfig.from_dict({"d_modle": 256})


def test_json_round_trip(tmp_path):
    config = TransformerConfig(vocab_size=1234, d_model=128, num_heads=4, attention_window=3, norm_first=True)
    assert TransformerConfig.from_json(config.to_json()) == config
    path = tmp_path / "config.json"
    config.to_json(path)
    assert json.loads(path.read_text())["attention_window"] == 3
    assert TransformerConfig.from_json(path) == config
    assert TransformerConfig.from_json(str(path)) == config


def test_bad_json_and_missing_file_are_clear(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        TransformerConfig.from_json(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"d_model": 512,,}')
    with pytest.raises(ConfigError, match="not valid JSON") as error:
        TransformerConfig.from_json(bad)
    assert str(bad) in str(error.value)  # which file
    with pytest.raises(ConfigError, match="^config text is not valid JSON"):
        TransformerConfig.from_json('{"d_model": 512,,}')


def test_replace_and_overrides_validate_again():
    config = TransformerConfig().with_overrides(["d_model=256", "attention_window=null", "position_encoding=learned"])
    assert (config.d_model, config.attention_window, config.position_encoding) == (256, None, "learned")
    with pytest.raises(ConfigError, match="^d_model:"):
        TransformerConfig().replace(d_model=100, num_heads=16)
    with pytest.raises(ConfigError, match="field=value"):
        TransformerConfig().with_overrides(["d_model"])


PAPER_TABLE3 = {  # the paper's Table 3 rows as config changes of the base model
    "table3_a_heads1": dict(num_heads=1),
    "table3_a_heads4": dict(num_heads=4),
    "table3_a_heads16": dict(num_heads=16),
    "table3_a_heads32": dict(num_heads=32),
    "table3_b_dk16": dict(d_k=16),
    "table3_b_dk32": dict(d_k=32),
    "table3_c_layers2": dict(num_encoder_layers=2, num_decoder_layers=2),
    "table3_c_layers4": dict(num_encoder_layers=4, num_decoder_layers=4),
    "table3_c_layers8": dict(num_encoder_layers=8, num_decoder_layers=8),
    "table3_c_dmodel256": dict(d_model=256),
    "table3_c_dmodel1024": dict(d_model=1024),
    "table3_c_dff1024": dict(d_ff=1024),
    "table3_c_dff4096": dict(d_ff=4096),
    "table3_d_dropout0": dict(dropout=0.0),
    "table3_d_dropout02": dict(dropout=0.2),
    "table3_d_smoothing0": dict(label_smoothing=0.0),
    "table3_d_smoothing02": dict(label_smoothing=0.2),
    "table3_e_learned_positions": dict(position_encoding="learned"),
    "big": dict(d_model=1024, d_ff=4096, num_heads=16, dropout=0.3),
}


@pytest.mark.parametrize("name", sorted(PAPER_TABLE3))
def test_presets_are_the_papers_variations(name):
    expected = Recipe.load("base").replace(**PAPER_TABLE3[name])
    assert Recipe.load(name) == expected
    assert TransformerConfig.from_preset(name) == expected.model


def test_base_preset_is_the_default_and_tiny_is_small():
    assert TransformerConfig.from_preset("base") == TransformerConfig()
    assert Recipe.load("base") == Recipe()  # the paper's training settings are TrainConfig's defaults
    tiny = TransformerConfig.from_preset("tiny")
    assert tiny.d_model <= 128 and tiny.num_encoder_layers <= 2


def test_unknown_preset_lists_the_presets():
    assert {"tiny", "base", "big"} <= set(tft.list_presets())
    with pytest.raises(ConfigError, match="Did you mean 'base'"):
        TransformerConfig.from_preset("bas")


def test_load_takes_a_preset_name_or_a_json_path(tmp_path):
    assert TransformerConfig.load("tiny") == TransformerConfig.from_preset("tiny")
    path = tmp_path / "mine.json"
    TransformerConfig(d_model=256).to_json(path)
    assert TransformerConfig.load(str(path)).d_model == 256
    with pytest.raises(ConfigError, match="does not exist"):
        TransformerConfig.load(str(tmp_path / "missing.json"))


@pytest.mark.parametrize("nbest_size, samples", [(0, False), (1, False), (64, True), (-1, True)])
def test_subword_sampling_is_on_for_nbest_sizes_other_than_0_and_1(nbest_size, samples):
    # alpha does not matter (nor is it checked) while sampling is off
    config = DataConfig(subword_nbest_size=nbest_size, subword_alpha=0.1 if samples else 0.0)
    assert config.samples_subwords is samples


def test_the_model_config_holds_what_shapes_or_computes_the_weights():
    # The fields a resumed or fine-tuning run may change are marked once, in the dataclass: the dropout rates.
    names = [field.name for field in dataclasses.fields(TransformerConfig)]
    assert len(names) == 23
    assert TransformerConfig.CHANGEABLE_FIELDS == ("dropout", "attention_dropout", "activation_dropout")
    assert not set(names) & set(tft.config.MOVED_FIELDS)


def test_a_release_0_1_config_loads_and_a_moved_field_is_refused_where_it_is_set():
    # A flat config of release 0.1 (config.json, a user's file, a .keras file's config): its moved settings set aside.
    old = {**TransformerConfig(d_model=256).to_dict(), "warmup_steps": 2000, "label_smoothing": 0.2,
           "subword_nbest_size": 64, "decode_beam_size": 6}  # fmt: skip
    assert TransformerConfig.from_dict(old) == TransformerConfig(d_model=256)
    with pytest.raises(ConfigError, match=r"d_modle: not a TransformerConfig field. Did you mean 'd_model'\?"):
        TransformerConfig.from_dict({**old, "d_modle": 256})  # a genuinely unknown key is still refused
    # Set as a model field, a moved setting is an error naming its owner (not silently dropped).
    with pytest.raises(ConfigError, match="warmup_steps: not a TransformerConfig field: a training setting, kept by "
                                          "TrainConfig. Fix: set it there"):  # fmt: skip
        TransformerConfig().replace(warmup_steps=2000)
    with pytest.raises(ConfigError, match="decode_beam_size: .* kept by decoding.json"):
        TransformerConfig().with_overrides(["decode_beam_size=6"])
