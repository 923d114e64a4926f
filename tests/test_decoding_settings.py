"""decoding.json: what tft-train writes, and the precedence the commands apply (flag, decoding.json, default)."""

import json

import pytest

from tf_transformer.config import TransformerConfig
from tf_transformer.decoding_settings import (
    DEFAULTS,
    describe,
    guard_arguments,
    parse_max_decode_length,
    read_decoding_json,
    resolve_settings,
    update_decoding_json,
)
from tf_transformer.model_dir import CONFIG_FILE, DECODING_FILE


def test_the_defaults_are_the_papers_and_the_multi30k_recipe_sets_its_own():
    # The paper's, and the loop guards (README: no repeated 4-gram of pieces, at most 1.5 x the source + 10).
    assert DEFAULTS == {"beam_size": 4, "length_penalty": 0.6, "method": "beam", "average_last": None,
                        "no_repeat_ngram_size": 4, "max_decode_length": "1.5x+10"}  # fmt: skip
    recipe = TransformerConfig.from_preset("multi30k")
    assert (recipe.decode_beam_size, recipe.decode_length_penalty, recipe.decode_average_last) == (4, 1.5, 5)
    config = TransformerConfig.from_preset("tiny")
    assert TransformerConfig.from_json(config.to_json()) == config  # the new fields round-trip


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
    config = TransformerConfig.from_preset("tiny").replace(decode_length_penalty=1.5, decode_average_last=5)
    assert update_decoding_json(tmp_path, config)
    written = {"beam_size": 4, "length_penalty": 1.5, "method": "beam", "average_last": 5,
               "no_repeat_ngram_size": 4, "max_decode_length": "1.5x+10"}  # fmt: skip
    assert json.loads((tmp_path / DECODING_FILE).read_text()) == written
    config.to_json(tmp_path / CONFIG_FILE)  # what the trainer writes next
    (tmp_path / DECODING_FILE).write_text(json.dumps({**written, "length_penalty": 1.0}))  # tuned by hand
    assert not update_decoding_json(tmp_path, config)  # a resume with the same config keeps the edit
    assert read_decoding_json(tmp_path)["length_penalty"] == 1.0
    assert update_decoding_json(tmp_path, config.replace(decode_beam_size=6))  # a changed setting rewrites it
    assert read_decoding_json(tmp_path) == {**written, "beam_size": 6}


@pytest.mark.parametrize("value, expected", [
    ("1.5x+10", (None, 1.5, 10)), ("x+50", (None, 1.0, 50)), ("2x", (None, 2.0, 0)), (" .5x + 3 ", (None, 0.5, 3)),
    ("120", (120, 1.0, 50)), (7, (7, 1.0, 50)),
])  # fmt: skip
def test_max_decode_length_is_n_or_a_ratio_and_an_offset(value, expected):
    assert parse_max_decode_length(value) == expected
    assert guard_arguments({"no_repeat_ngram_size": 3, "max_decode_length": value}) == {
        "no_repeat_ngram_size": 3, "max_decode_length": expected[0], "max_decode_length_ratio": expected[1],
        "extra_decode_length": expected[2],
    }  # fmt: skip


@pytest.mark.parametrize("value", ["1.5y", "1.5x-3", "x+1.5", "-2x", "0", 0, True, None, ""])
def test_a_bad_max_decode_length_is_one_clear_error(tmp_path, value):
    with pytest.raises(ValueError, match=r"--max_decode_length: must be N .* or Ax\+B .*Fix: set --max_decode_length"):
        resolve_settings({"max_decode_length": value}, None)
    (tmp_path / DECODING_FILE).write_text(json.dumps({"max_decode_length": value}))
    with pytest.raises(ValueError, match="decoding.json: max_decode_length: must be"):
        read_decoding_json(tmp_path)
    with pytest.raises(ValueError, match="decode_max_decode_length: (must be|expected str)"):
        TransformerConfig(decode_max_decode_length=value)


def test_the_guards_are_config_fields_and_an_int_cap_is_kept_as_text():
    config = TransformerConfig(decode_no_repeat_ngram_size=0, decode_max_decode_length=200)
    assert config.decode_max_decode_length == "200"
    assert TransformerConfig.from_json(config.to_json()) == config
    with pytest.raises(ValueError, match="no_repeat_ngram_size: must be an integer >= 0"):
        resolve_settings({"no_repeat_ngram_size": -1}, None)
