"""Target prefixes and the loop guards in the export: the translate_with_prefix signature equals the in-process
translator with the same prefixes, every translation starts with its prefix, and export_config.json records the
guards tools/export.py used."""

import json

import pytest
import tensorflow as tf

from tf_transformer.export import EXPORT_CONFIG_FILE, SavedModelTranslator


@pytest.fixture(scope="module")
def prefixes(sentences):
    # A prefix for some sentences, none ("") for others, and one for an empty sentence (which stays "").
    chosen = ["Ein Hund", "", "Zwei", "Ein", "", "Eine Frau", "", "Kinder", "Ein Mann"]
    assert len(chosen) == len(sentences)
    return chosen


@pytest.fixture(scope="module")
def expected(translator, sentences, prefixes):
    return translator(sentences, target_prefixes=prefixes)


def test_translate_with_prefix_equals_the_in_process_translator(loaded, sentences, prefixes, expected):
    result = loaded.signatures["translate_with_prefix"](
        inputs=tf.constant(sentences), target_prefixes=tf.constant(prefixes)
    )
    assert [text.decode("utf-8") for text in result["outputs"].numpy()] == [h[0][0] for h in expected]
    assert result["scores"].numpy().tolist() == pytest.approx([h[0][1] for h in expected], abs=1e-5)


def test_every_translation_starts_with_its_prefix(sentences, prefixes, expected, translator):
    for sentence, prefix, hypotheses in zip(sentences, prefixes, expected, strict=True):
        if sentence.strip():
            assert hypotheses[0][0].startswith(prefix), (prefix, hypotheses)
        else:
            assert hypotheses == [("", 0.0)]  # an empty source is not decoded, prefix or not
    without = translator(sentences)
    assert [h[0][0] for h in without][1] == expected[1][0][0]  # "" prefix: the translation without one


def test_the_saved_model_translator_takes_prefixes_and_the_export_records_its_guards(
    export_path, sentences, prefixes, expected
):
    translator = SavedModelTranslator(export_path, batch_tokens=60)  # several batches, as in-process
    assert [h[0][0] for h in translator(sentences, target_prefixes=prefixes)] == [h[0][0] for h in expected]
    with pytest.raises(ValueError, match="target_prefixes: 2 prefixes for 9 sentences"):
        translator(sentences, target_prefixes=prefixes[:2])
    written = json.loads((export_path / "assets" / EXPORT_CONFIG_FILE).read_text())
    # tools/export.py without flags: decoding.settings.COMMAND_DEFAULTS' guards (no repeated 4-gram, 1.5x+10).
    assert {
        key: written[key] for key in ("no_repeat_ngram_size", "max_decode_length_ratio", "extra_decode_length")
    } == {"no_repeat_ngram_size": 4, "max_decode_length_ratio": 1.5, "extra_decode_length": 10}
    assert "translate_with_prefix" in written["signatures"]
