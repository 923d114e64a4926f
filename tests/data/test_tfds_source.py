"""TFDS translation corpora under tfds.testing.mock_data: no network, no prepared data needed."""

import pytest
import tensorflow_datasets as tfds  # a dependency of the package (setup.cfg): failing to import it is a failure

from tf_transformer.data import DataConfig, DataError, make_dataset, open_corpus, scan_lengths


@pytest.fixture
def mock_tfds():
    # The default policy found the builders' metadata offline here (it falls back to the builder code).
    with tfds.testing.mock_data(num_examples=20):
        yield


def test_pairs_follow_the_supervised_keys(mock_tfds, tmp_path):
    config = DataConfig(dataset="tfds:wmt14_translate/de-en", tfds_data_dir=str(tmp_path))
    corpus = open_corpus(config, "train")
    assert (corpus.source_lang, corpus.target_lang) == ("de", "en")
    pairs = list(corpus.pairs())
    assert 0 < len(pairs) <= 20
    assert all(isinstance(s, str) and isinstance(t, str) and s and t for s, t in pairs)
    assert corpus.description == "tfds wmt14_translate/de-en de-en train"


def test_languages_can_be_reversed_and_are_checked(mock_tfds):
    forward = list(open_corpus(DataConfig(dataset="tfds:ted_hrlr_translate/pt_to_en"), "valid").pairs())
    reverse = open_corpus(
        DataConfig(dataset="tfds:ted_hrlr_translate/pt_to_en", source_lang="en", target_lang="pt"), "valid"
    )
    assert [(t, s) for s, t in reverse.pairs()] == forward
    with pytest.raises(DataError, match="no language 'de'. Fix: set --target_lang to one of its features: en, pt"):
        open_corpus(DataConfig(dataset="tfds:ted_hrlr_translate/pt_to_en", source_lang="en", target_lang="de"), "test")


def test_a_working_pipeline(mock_tfds, tokenizer):
    config = DataConfig(dataset="tfds:wmt14_translate/de-en", tfds_offline=True, batch_tokens=512, max_length=128)
    report = scan_lengths(config, tokenizer, "valid")
    assert report.pairs_read == 20 and report.kept + report.empty_skipped + report.dropped == 20
    dataset = make_dataset(config, tokenizer, "train")
    for (source, target_in), target_out in dataset.take(3).as_numpy_iterator():
        assert source.shape[0] * (source.shape[1] + target_in.shape[1]) <= 512
        assert (target_in[:, 0] == 1).all() and target_in.shape == target_out.shape


def test_offline_without_prepared_data_is_a_clear_error(tmp_path):
    config = DataConfig(dataset="tfds:wmt14_translate/de-en", tfds_data_dir=str(tmp_path), tfds_offline=True)
    with pytest.raises(DataError) as raised:
        open_corpus(config, "train")
    message = str(raised.value)
    assert "wmt14_translate/de-en is not prepared" in message
    assert "Fix: prepare it once" in message and "--tfds_data_dir" in message


def test_unknown_builder_is_a_clear_error():
    with pytest.raises(DataError, match="Dataset no_such_dataset_xyz not found. Fix: use a TFDS translation builder"):
        open_corpus(DataConfig(dataset="tfds:no_such_dataset_xyz"), "train")
