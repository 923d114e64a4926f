"""DataConfig: validated on creation, errors name the field and the fix, JSON round trip."""

import pytest

from tf_transformer.config import ConfigError
from tf_transformer.data import DataConfig


def test_defaults_are_valid_and_documented():
    config = DataConfig()
    assert config.dataset == "multi30k"
    assert config.vocab_type == "sentencepiece" and config.vocab_size == 8000
    assert config.batch_tokens == 4096 and config.long_pairs == "drop"
    assert config.seed is None and config.deterministic is False
    assert config.shuffle_seed is None
    assert config.replace(deterministic=True).shuffle_seed == 0
    assert config.replace(seed=7).shuffle_seed == 7


def test_json_round_trip(tmp_path):
    config = DataConfig(
        dataset="files",
        train_source=tmp_path / "a.en",  # a PathLike is stored as a plain string
        train_target="a.de",
        valid_source="v.en",
        valid_target="v.de",
        seed=3,
        long_pairs="truncate",
    )
    assert config.train_source == str(tmp_path / "a.en")
    path = tmp_path / "data.json"
    config.to_json(path)
    assert DataConfig.from_json(path) == config
    assert DataConfig.from_json(config.to_json()) == config
    assert DataConfig.from_dict(config.to_dict()) == config
    assert config.with_overrides(["batch_tokens=8192", "long_pairs=drop"]).batch_tokens == 8192


def test_tfds_name():
    assert DataConfig(dataset="tfds:wmt14_translate/de-en").tfds_name == "wmt14_translate/de-en"
    assert DataConfig().tfds_name is None


@pytest.mark.parametrize(
    "changes, field, fix",
    [
        ({"dataset": "wmt"}, "dataset", "tfds:<name>"),
        ({"dataset": "tfds:"}, "dataset", "tfds:wmt14_translate/de-en"),
        ({"dataset": "files"}, "train_source", "--train_source=PATH"),
        ({"dataset": "files", "train_source": "a"}, "train_target", "--train_target=PATH"),
        ({"valid_source": "v.en"}, "valid_target", "--valid_target=PATH"),
        ({"source_lang": "cs"}, "source_lang", "en, de, fr"),
        ({"source_lang": "de", "target_lang": "de"}, "target_lang", "two languages"),
        ({"vocab_type": "bpe"}, "vocab_type", "'sentencepiece', 'wordpiece'"),
        ({"spm_model_type": "char"}, "spm_model_type", "'unigram', 'bpe'"),
        ({"vocab_size": 100}, "vocab_size", "vocab_size=8000"),
        ({"max_length": 1}, "max_length", "max_length"),
        ({"batch_tokens": 300}, "batch_tokens", "at least 512"),
        ({"long_pairs": "keep"}, "long_pairs", "'drop', 'truncate'"),
        ({"shuffle_buffer": -1}, "shuffle_buffer", "10000"),
        ({"seed": -1}, "seed", "seed=0"),
        ({"vocab_size": "8000"}, "vocab_size", "vocab_size=8000"),
        ({"tfds_offline": "yes"}, "tfds_offline", "tfds_offline=false"),
        ({"deterministic": 1}, "deterministic", "bool"),
    ],
)
def test_invalid_values_name_the_field_and_the_fix(changes, field, fix):
    with pytest.raises(ConfigError) as raised:
        DataConfig(**changes)
    message = str(raised.value)
    assert message.startswith(f"{field}:"), message
    assert "Fix:" in message and fix in message, message


def test_unknown_key_suggests_the_nearest_field():
    with pytest.raises(ConfigError, match="Did you mean 'batch_tokens'"):
        DataConfig.from_dict({"batch_token": 100})


def test_integral_floats_from_json_become_ints():
    assert DataConfig.from_json('{"batch_tokens": 8192.0}').batch_tokens == 8192
