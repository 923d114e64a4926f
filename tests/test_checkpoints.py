"""Loading a model directory's checkpoints and averaging the last N: real weights, clear errors."""

import gzip
import json
import shutil

import numpy as np
import pytest
import tensorflow as tf

import tf_transformer as tft
from tf_transformer.checkpoint_files import check_checkpoint_count, check_latest_checkpoint, listed_checkpoints
from tf_transformer.checkpoints import (
    CheckpointError,
    average_checkpoints,
    load_translation_model,
    restore_newest_readable,
)
from tf_transformer.config import ConfigError
from tf_transformer.data import train_sentencepiece
from tf_transformer.training.optimizer import make_optimizer


def tiny_config(vocab_size, **changes):
    return tft.TransformerConfig(
        vocab_size=vocab_size, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
        max_length=32, dropout=0.0, **changes,
    )  # fmt: skip


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, multi30k_dir):
    """A model directory as the trainer writes it, with three checkpoints (steps 10, 20, 30) of random weights.

    Returns (path, {step: [trainable weights as numpy]}).
    """
    path = tmp_path_factory.mktemp("model_dir")
    lines = []
    for lang in ("en", "de"):
        with gzip.open(multi30k_dir / f"train.{lang}.gz", "rt", encoding="utf-8") as handle:
            lines += [next(handle).strip() for _ in range(100)]
    tokenizer = train_sentencepiece(lines, path / "vocab", vocab_size=400, seed=0)
    config = tiny_config(tokenizer.vocab_size)
    config.to_json(path / "config.json")
    # The trainer's checkpoint: model and optimizer (built with the model's trainable variables), numbered by step.
    model = tft.Transformer(config)
    model.build()
    optimizer = make_optimizer(config.d_model)
    optimizer.build(model.trainable_variables)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    manager = tf.train.CheckpointManager(checkpoint, str(path / "checkpoints"), max_to_keep=5)
    rng = np.random.default_rng(0)
    weights = {}
    for step in (10, 20, 30):
        for variable in model.trainable_variables:
            variable.assign(rng.normal(size=variable.shape).astype(np.float32))
        optimizer.iterations.assign(step)
        manager.save(checkpoint_number=step)
        weights[step] = [variable.numpy() for variable in model.trainable_variables]
    return path, weights


def copy_model_dir(path, target, **config_changes):
    """A copy of the module's model directory at `target`, its config.json changed by `config_changes`."""
    shutil.copytree(path, target)
    if config_changes:
        config = tft.TransformerConfig.from_json(target / "config.json")
        config.replace(**config_changes).to_json(target / "config.json")
    return target


def trainable(model):
    return [variable.numpy() for variable in model.trainable_variables]


def test_loading_gives_the_checkpoints_weights(model_dir):
    path, weights = model_dir
    model, tokenizer, config = load_translation_model(path)  # the latest: step 30
    assert config.vocab_size == tokenizer.vocab_size
    assert len(model.trainable_variables) == len(weights[30]) > 10
    for loaded, saved in zip(trainable(model), weights[30], strict=True):
        np.testing.assert_array_equal(loaded, saved)
    model, _, _ = load_translation_model(path, checkpoint=path / "checkpoints" / "ckpt-10")
    for loaded, saved in zip(trainable(model), weights[10], strict=True):
        np.testing.assert_array_equal(loaded, saved)


def test_averaging_the_last_two_checkpoints_gives_the_mean_of_their_weights(model_dir, tmp_path):
    path, weights = model_dir
    output = tmp_path / "averaged"
    averaged = average_checkpoints(path, num_checkpoints=2, output_dir=output)
    assert averaged == str(output / "ckpt-30")
    summary = json.loads((output / "averaged_checkpoints.json").read_text())
    assert summary["steps"] == [20, 30] and summary["checkpoint"] == averaged
    assert [p.rsplit("/", 1)[-1] for p in summary["averaged"]] == ["ckpt-20", "ckpt-30"]

    expected = [(a.astype(np.float64) + b) / 2 for a, b in zip(weights[20], weights[30], strict=True)]
    model, _, _ = load_translation_model(path, checkpoint=averaged)
    for loaded, mean in zip(trainable(model), expected, strict=True):
        np.testing.assert_allclose(loaded, mean, rtol=1e-6, atol=1e-7)
    # The folder works too (its latest checkpoint), and averaging in memory gives the same weights.
    from_folder, _, _ = load_translation_model(path, checkpoint=output)
    in_memory, _, _ = load_translation_model(path, average_last=2)
    for a, b, c in zip(trainable(model), trainable(from_folder), trainable(in_memory), strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_averaging_all_three_and_the_default_output_dir(model_dir, tmp_path):
    path, weights = model_dir
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)  # the checkpoint index holds relative paths: a moved model_dir still works
    averaged = average_checkpoints(copy, num_checkpoints=3)
    assert averaged == str(copy / "averaged" / "ckpt-30")
    model, _, _ = load_translation_model(copy, checkpoint=averaged)
    for loaded, *saved in zip(trainable(model), weights[10], weights[20], weights[30], strict=True):
        np.testing.assert_allclose(loaded, np.mean(np.array(saved, np.float64), axis=0), rtol=1e-6, atol=1e-7)


def test_too_few_checkpoints_is_an_error_that_says_how_many_there_are(model_dir):
    path, _ = model_dir
    with pytest.raises(ValueError, match=r"last 4 checkpoints.*has only 3 \(ckpt-10, ckpt-20, ckpt-30\)") as raised:
        average_checkpoints(path, num_checkpoints=4)
    with pytest.raises(ValueError) as early:  # what tft-average-checkpoints checks before TensorFlow starts
        check_checkpoint_count(path, 4)
    assert str(early.value) == str(raised.value)
    check_checkpoint_count(path, 3)
    # The decoding commands' --average_last (or decoding.json's average_last): refused before TensorFlow starts too.
    with pytest.raises(ValueError) as loading:
        load_translation_model(path, average_last=4)
    with pytest.raises(ValueError) as early:
        check_latest_checkpoint(path, average_last=4)
    assert str(early.value) == str(loading.value) == str(raised.value).replace("num_checkpoints", "average_last")
    assert "Fix: average_last=3 or fewer" in str(early.value)
    check_latest_checkpoint(path, average_last=3)
    check_latest_checkpoint(path, checkpoint=str(path / "checkpoints" / "ckpt-10"), average_last=4)  # not averaged
    with pytest.raises(ValueError, match="num_checkpoints: must be an int >= 1"):
        average_checkpoints(path, num_checkpoints=0)
    with pytest.raises(ValueError, match="training checkpoint folder"):
        average_checkpoints(path, num_checkpoints=2, output_dir=path / "checkpoints")


def test_missing_pieces_are_named(model_dir, tmp_path):
    path, _ = model_dir
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        load_translation_model(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="config.json does not exist"):
        load_translation_model(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"ckpt-99\.index does not exist"):
        load_translation_model(path, checkpoint=path / "checkpoints" / "ckpt-99")

    no_checkpoints = tmp_path / "untrained"
    no_checkpoints.mkdir()
    shutil.copy(path / "config.json", no_checkpoints / "config.json")
    with pytest.raises(FileNotFoundError, match="vocab"):
        load_translation_model(no_checkpoints)
    shutil.copytree(path / "vocab", no_checkpoints / "vocab")
    with pytest.raises(FileNotFoundError, match="no checkpoints.*Fix: train first"):
        load_translation_model(no_checkpoints)
    with pytest.raises(FileNotFoundError, match="no checkpoints"):
        average_checkpoints(no_checkpoints, num_checkpoints=1)


def test_a_checkpoint_of_another_architecture_is_refused(model_dir, tmp_path):
    path, _ = model_dir
    other = copy_model_dir(path, tmp_path / "other", d_ff=48)
    config = tft.TransformerConfig.from_json(path / "config.json")
    with pytest.raises(ValueError, match="(?s)does not hold the weights of the model in config.json.*Fix"):
        load_translation_model(other)
    config.replace(num_decoder_layers=2).to_json(other / "config.json")
    with pytest.raises(ValueError, match="(?s)does not hold the weights of the model in config.json.*Fix"):
        average_checkpoints(other, num_checkpoints=2)


def test_a_checkpoint_of_the_model_alone_loads_every_weight(model_dir, tmp_path):
    # The stacks keep their layers as attributes, so tf.train.Checkpoint(model=model) holds every weight.
    path, _ = model_dir
    model, _, _ = load_translation_model(path)
    model_only = tf.train.Checkpoint(model=model).write(str(tmp_path / "model_only"))
    loaded, _, _ = load_translation_model(path, checkpoint=model_only)
    assert len(loaded.weights) == len(model.weights)
    for original, restored in zip(model.weights, loaded.weights, strict=True):
        np.testing.assert_array_equal(restored.numpy(), original.numpy())


# ------------------------------------------------------------------ damaged checkpoints (truncated, deleted)


def damage(checkpoint_prefix, how):
    """Damages a checkpoint as a full disk, a partial copy or a storage error would."""
    data = checkpoint_prefix.parent / (checkpoint_prefix.name + ".data-00000-of-00001")
    if how == "truncated":
        with open(data, "r+b") as handle:
            handle.truncate(data.stat().st_size // 2)
    elif how == "deleted":
        data.unlink()
    elif how == "corrupted index":
        index = checkpoint_prefix.parent / (checkpoint_prefix.name + ".index")
        index.write_bytes(index.read_bytes()[:40])
    else:
        raise ValueError(how)


def trainer_checkpoint(config):
    """A fresh model and optimizer in the trainer's checkpoint layout."""
    model = tft.Transformer(config)
    model.build()
    optimizer = make_optimizer(config.d_model)
    optimizer.build(model.trainable_variables)
    return model, optimizer, tf.train.Checkpoint(model=model, optimizer=optimizer)


@pytest.mark.parametrize("how", ["truncated", "deleted", "corrupted index"])
def test_a_damaged_latest_checkpoint_is_named_with_an_older_one_to_load(model_dir, tmp_path, how):
    path, _ = model_dir
    damaged = copy_model_dir(path, tmp_path / "damaged")
    damage(damaged / "checkpoints" / "ckpt-30", how)
    older = damaged / "checkpoints" / "ckpt-20"
    with pytest.raises(CheckpointError) as raised:
        load_translation_model(damaged)
    message = str(raised.value)
    assert message.startswith(f"checkpoint {damaged / 'checkpoints' / 'ckpt-30'} cannot be read: "), message
    assert {"truncated": "truncated", "deleted": "is missing", "corrupted index": "corrupted"}[how] in message
    assert message.endswith(f"Fix: pass an older checkpoint (--checkpoint={older})."), message
    assert "\n" not in message
    with pytest.raises(CheckpointError, match="(?s)ckpt-30 cannot be read.*Fix: restore its files.*training command"):
        average_checkpoints(damaged, num_checkpoints=2)
    model, _, _ = load_translation_model(damaged, checkpoint=older)  # the fix works
    assert model.built


def test_resuming_skips_a_damaged_latest_checkpoint_and_sets_its_files_aside(model_dir, tmp_path, caplog):
    path, weights = model_dir
    damaged = copy_model_dir(path, tmp_path / "damaged")
    folder = damaged / "checkpoints"
    damage(folder / "ckpt-30", "truncated")
    config = tft.TransformerConfig.from_json(damaged / "config.json")
    model, optimizer, checkpoint = trainer_checkpoint(config)

    with caplog.at_level("WARNING", logger="tf_transformer"):
        restored = restore_newest_readable(checkpoint, folder, set_aside=True)
    assert restored == str(folder / "ckpt-20")
    assert int(optimizer.iterations.numpy()) == 20
    for actual, expected in zip(trainable(model), weights[20], strict=True):
        np.testing.assert_array_equal(actual, expected)
    warning = " ".join(record.getMessage() for record in caplog.records)
    assert f"checkpoint {folder / 'ckpt-30'} cannot be read: a data file is shorter" in warning
    assert "unreadable" in warning
    # Kept, not deleted; the index no longer lists it, so a new save and the tools see good checkpoints only.
    assert sorted(p.name for p in (folder / "unreadable").iterdir()) == [
        "ckpt-30.data-00000-of-00001", "ckpt-30.index"
    ]  # fmt: skip
    manager = tf.train.CheckpointManager(checkpoint, str(folder), max_to_keep=5)
    assert manager.latest_checkpoint == str(folder / "ckpt-20")
    assert manager.checkpoints == [str(folder / "ckpt-10"), str(folder / "ckpt-20")]
    optimizer.iterations.assign(30)
    manager.save(checkpoint_number=30)
    loaded, _, _ = load_translation_model(damaged)
    assert len(loaded.weights) == len(model.weights)
    assert (folder / "unreadable" / "ckpt-30.index").is_file()


def test_resuming_without_set_aside_changes_no_file(model_dir, tmp_path):
    path, _ = model_dir
    damaged = copy_model_dir(path, tmp_path / "damaged")
    folder = damaged / "checkpoints"
    damage(folder / "ckpt-30", "deleted")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    _, optimizer, checkpoint = trainer_checkpoint(tft.TransformerConfig.from_json(damaged / "config.json"))
    assert restore_newest_readable(checkpoint, folder, set_aside=False) == str(folder / "ckpt-20")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert int(optimizer.iterations.numpy()) == 20


def test_resuming_with_an_unreadable_index_uses_the_checkpoint_files(model_dir, tmp_path):
    path, weights = model_dir
    damaged = copy_model_dir(path, tmp_path / "damaged")
    folder = damaged / "checkpoints"
    (folder / "checkpoint").write_text("garbage\n")
    model, optimizer, checkpoint = trainer_checkpoint(tft.TransformerConfig.from_json(damaged / "config.json"))
    assert restore_newest_readable(checkpoint, folder, set_aside=True) == str(folder / "ckpt-30")
    assert int(optimizer.iterations.numpy()) == 30
    np.testing.assert_array_equal(trainable(model)[0], weights[30][0])
    assert tf.train.CheckpointManager(checkpoint, str(folder), max_to_keep=5).checkpoints == [
        str(folder / f"ckpt-{step}") for step in (10, 20, 30)
    ]


def test_resuming_when_no_checkpoint_can_be_read_is_a_clear_error(model_dir, tmp_path):
    path, _ = model_dir
    damaged = copy_model_dir(path, tmp_path / "damaged")
    folder = damaged / "checkpoints"
    for step, how in ((10, "deleted"), (20, "truncated"), (30, "corrupted index")):
        damage(folder / f"ckpt-{step}", how)
    _, _, checkpoint = trainer_checkpoint(tft.TransformerConfig.from_json(damaged / "config.json"))
    with pytest.raises(CheckpointError, match=r"none of the 3 checkpoints in .* can be read .*Fix: restore"):
        restore_newest_readable(checkpoint, folder, set_aside=True)
    assert not (folder / "unreadable").exists(), "nothing is moved when there is nothing to resume from"
    empty = tmp_path / "fresh"
    assert restore_newest_readable(checkpoint, empty, set_aside=True) is None


def test_a_config_whose_special_ids_differ_from_the_tokenizers_is_refused(model_dir, tmp_path):
    # Training data and detokenization use the tokenizer's ids (pad 0, BOS 1, EOS 2), decoding the config's.
    path, _ = model_dir
    other = copy_model_dir(path, tmp_path / "other", eos_id=5)
    with pytest.raises(ConfigError, match=r"^eos_id=5: this package's tokenizers reserve .*Fix: leave"):
        load_translation_model(other)


def test_a_relative_model_dir_resumes_and_names_the_older_checkpoint(model_dir, tmp_path, monkeypatch):
    # The README's commands pass relative paths (--model_dir=runs/multi30k): the folder's index lists the
    # checkpoints joined with the folder as it was given.
    path, weights = model_dir
    shutil.copytree(path, tmp_path / "intact")
    shutil.copytree(path, tmp_path / "damaged")
    monkeypatch.chdir(tmp_path)
    config = tft.TransformerConfig.from_json("intact/config.json")
    _, optimizer, checkpoint = trainer_checkpoint(config)
    assert restore_newest_readable(checkpoint, "intact/checkpoints", set_aside=True) == "intact/checkpoints/ckpt-30"
    assert int(optimizer.iterations.numpy()) == 30

    damage(tmp_path / "damaged" / "checkpoints" / "ckpt-30", "truncated")
    with pytest.raises(
        CheckpointError, match=r"Fix: pass an older checkpoint \(--checkpoint=damaged/checkpoints/ckpt-20\)"
    ):
        load_translation_model("damaged")
    model, optimizer, checkpoint = trainer_checkpoint(config)
    assert restore_newest_readable(checkpoint, "damaged/checkpoints", set_aside=True) == "damaged/checkpoints/ckpt-20"
    assert int(optimizer.iterations.numpy()) == 20
    np.testing.assert_array_equal(trainable(model)[0], weights[20][0])
    assert (tmp_path / "damaged" / "checkpoints" / "unreadable" / "ckpt-30.index").is_file()
    assert tf.train.latest_checkpoint("damaged/checkpoints") == "damaged/checkpoints/ckpt-20"


def test_the_index_reader_without_tensorflow_lists_what_tensorflow_lists(model_dir, tmp_path, monkeypatch):
    path, _ = model_dir
    copy_model_dir(path, tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    for folder in (str(tmp_path / "run" / "checkpoints"), "run/checkpoints"):  # absolute and relative
        state = tf.train.get_checkpoint_state(folder)
        assert listed_checkpoints(folder) == list(state.all_model_checkpoint_paths)
        assert listed_checkpoints(folder)[-1] == state.model_checkpoint_path
    # A path line it does not take apart (an escaped character) leaves the decision to TensorFlow's reader.
    index = tmp_path / "run" / "checkpoints" / "checkpoint"
    index.write_text(index.read_text().replace('"ckpt-30"', '"ckpt\\\\-30"', 1))
    assert listed_checkpoints(tmp_path / "run" / "checkpoints") is None
    assert listed_checkpoints(tmp_path / "missing") is None


@pytest.mark.parametrize("how", ["deleted", "empty index", "truncated", "fine"])
def test_the_early_check_refuses_a_missing_file_as_loading_would_and_leaves_the_rest_to_it(model_dir, tmp_path, how):
    path, _ = model_dir
    damaged = copy_model_dir(path, tmp_path / "damaged")
    latest = damaged / "checkpoints" / "ckpt-30"
    if how == "empty index":
        (damaged / "checkpoints" / "ckpt-30.index").write_bytes(b"")
    elif how != "fine":
        damage(latest, how)
    if how in ("deleted", "empty index"):
        with pytest.raises(CheckpointError) as early:
            check_latest_checkpoint(damaged)
        with pytest.raises(CheckpointError) as loading:
            load_translation_model(damaged)
        assert str(early.value) == str(loading.value) and early.value.path == str(latest)
        assert str(early.value).endswith(f"(--checkpoint={damaged / 'checkpoints' / 'ckpt-20'}).")
        # Another checkpoint or an average chosen: not the latest one's files to check here.
        check_latest_checkpoint(damaged, checkpoint=str(damaged / "checkpoints" / "ckpt-20"))
        check_latest_checkpoint(damaged, average_last=2)
    else:
        check_latest_checkpoint(damaged)  # a truncated file shows only when read: loading says so
