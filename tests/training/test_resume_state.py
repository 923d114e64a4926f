"""A run stopped and resumed trains on the batches, with the dropout masks, of the run that went straight through."""

import logging
import shutil
import types

import numpy as np
import pytest
import tensorflow as tf

import tf_transformer as tft
from tf_transformer.data import DataConfig, Tokenizer, build_vocabulary, make_dataset
from tf_transformer.training import TrainConfig, train
from tf_transformer.training.resume_state import ResumeState
from tf_transformer.training.run_data import _saved_report

# Dropout on, so that the masks' random state matters as much as the batches do.
MODEL = tft.TransformerConfig.from_preset("tiny").replace(
    d_model=32, d_ff=64, num_encoder_layers=1, num_decoder_layers=1, dropout=0.1
)
TRAINING = tft.Recipe.load("tiny").training  # the preset's schedule and label smoothing
STEPS = 40


@pytest.fixture(scope="module")
def data(small_corpus, tmp_path_factory):
    # 400 pairs in batches of 1,024 tokens: about 17 batches an epoch, so 40 steps cross two reshuffled epoch ends.
    folder = tmp_path_factory.mktemp("resume_corpus")
    paths = {}
    for lang in ("en", "de"):
        lines = small_corpus[f"train_{lang}"].read_text(encoding="utf-8").splitlines(True)[:400]
        paths[lang] = folder / f"train.{lang}"
        paths[lang].write_text("".join(lines), encoding="utf-8")
    return DataConfig(
        dataset="files", train_source=str(paths["en"]), train_target=str(paths["de"]), vocab_size=500,
        batch_tokens=1024, max_length=48, shuffle_buffer=1000, seed=1, deterministic=True,
    )  # fmt: skip


@pytest.fixture(scope="module")
def vocabulary(data, tmp_path_factory):
    """The data's vocabulary, built once for the module: the runs find it in their model_dir (as a restart does)."""
    path = tmp_path_factory.mktemp("resume_vocab") / "vocab"
    build_vocabulary(data, path)
    return path


def run(model_dir, data, train_steps, vocabulary):
    if not (model_dir / "vocab").exists():
        shutil.copytree(vocabulary, model_dir / "vocab")
    return train(
        MODEL, data, TrainConfig(model_dir=str(model_dir), train_steps=train_steps, checkpoint_every=10, seed=1,
                                 deterministic=True, **TRAINING),
    )  # fmt: skip


def model_tensors(checkpoint_path):
    reader = tf.train.load_checkpoint(checkpoint_path)
    names = [name for name, _ in tf.train.list_variables(checkpoint_path) if name.startswith(("model/", "optimizer/"))]
    return {name: reader.get_tensor(name) for name in names}


def test_40_steps_straight_equal_15_then_25_after_a_restart(tmp_path, data, vocabulary, caplog):
    straight = run(tmp_path / "straight", data, STEPS, vocabulary)
    stopped = run(tmp_path / "resumed", data, 15, vocabulary)  # mid-period: checkpoint_every is 10
    with caplog.at_level(logging.INFO, logger="tf_transformer"):
        resumed = run(tmp_path / "resumed", data, STEPS, vocabulary)
    assert "skipping the 15 batches already trained on" in caplog.text
    assert "not scanned again" in caplog.text  # the restart reuses the run's data_report.json
    assert (stopped.step, resumed.start_step, resumed.step, straight.step) == (15, 15, STEPS, STEPS)

    reader = tf.train.load_checkpoint(stopped.checkpoint)
    assert int(reader.get_tensor("input_state/position/.ATTRIBUTES/VARIABLE_VALUE")) == 15
    expected, actual = model_tensors(straight.checkpoint), model_tensors(resumed.checkpoint)
    assert expected.keys() == actual.keys() and any(name.startswith("model/") for name in expected)
    for name, value in expected.items():
        np.testing.assert_allclose(actual[name], value, atol=1e-6, rtol=0, err_msg=name)
    # The weights did move after the restart, so the equality above is not that of two untouched copies.
    moved = model_tensors(stopped.checkpoint)
    assert any(not np.allclose(moved[name], value, atol=1e-6) for name, value in expected.items())


def test_a_resumed_stream_is_the_uninterrupted_stream_from_its_position(data, vocabulary):
    tokenizer = Tokenizer.from_directory(vocabulary)
    whole = list(make_dataset(data, tokenizer).take(30).as_numpy_iterator())
    rest = list(make_dataset(data, tokenizer, skip_batches=12).take(18).as_numpy_iterator())
    for expected, actual in zip(whole[12:], rest, strict=True):
        (source, target_in), target_out = actual
        (expected_source, expected_target_in), expected_target_out = expected
        np.testing.assert_array_equal(source, expected_source)
        np.testing.assert_array_equal(target_in, expected_target_in)
        np.testing.assert_array_equal(target_out, expected_target_out)
    # The order is the data config's alone: the caller's global seed (0 included) does not change it.
    for global_seed in (0, 5):
        tf.random.set_seed(global_seed)
        again = list(make_dataset(data, tokenizer).take(3).as_numpy_iterator())
        for expected, actual in zip(whole[:3], again, strict=True):
            np.testing.assert_array_equal(actual[1], expected[1])
    with pytest.raises(ValueError, match="skip_batches must be an int >= 0"):
        make_dataset(data, tokenizer, skip_batches=-1)


def test_a_checkpoint_without_input_state_resumes_at_its_step(tmp_path):
    model = tft.Transformer(MODEL.replace(vocab_size=100))
    model.build()
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))  # as written before input_state existed
    state = ResumeState(model, batches_per_step=2)
    state.restore(path, step=7)
    assert int(state.position.numpy()) == 14
    # A checkpoint with the state gives it back, dropout generators included.
    state.position.assign(33)
    for variable in state.random:
        variable.assign(variable + 5)
    saved_random = [variable.numpy().copy() for variable in state.random]
    assert saved_random, "the model has dropout, so it has seed generator states"
    path = tf.train.Checkpoint(model=model, input_state=state.trackable).save(str(tmp_path / "with_state"))
    fresh = ResumeState(model)
    for variable in fresh.random:
        variable.assign(tf.zeros_like(variable))
    fresh.restore(path, step=0)
    assert int(fresh.position.numpy()) == 33
    for variable, value in zip(fresh.random, saved_random, strict=True):
        np.testing.assert_array_equal(variable.numpy(), value)


def test_a_saved_data_report_is_reused_only_for_the_same_corpus(tmp_path, data, vocabulary):
    from tf_transformer.data import open_corpus, scan_lengths

    tokenizer = Tokenizer.from_directory(vocabulary)
    corpus = open_corpus(data, "train")
    report = scan_lengths(data, tokenizer, corpus=corpus)
    path = tmp_path / "data_report.json"
    report.to_json(path)
    assert _saved_report(path, corpus) == report
    grown = types.SimpleNamespace(description=corpus.description, num_lines=corpus.num_lines + 1)
    assert _saved_report(path, grown) is None  # the file changed: scan again
    other = types.SimpleNamespace(description="another corpus", num_lines=corpus.num_lines)
    assert _saved_report(path, other) is None
    path.write_text("{not json")
    assert _saved_report(path, corpus) is None
