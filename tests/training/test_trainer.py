"""tf_transformer.training.train: mirrored equals one device, divergence stops cleanly, one run per directory."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import tf_transformer as tft
from tf_transformer.config import ConfigError
from tf_transformer.data import DataConfig, Tokenizer, synthetic_translation_dataset
from tf_transformer.training import (
    StopSignals,
    TrainConfig,
    TrainingDiverged,
    TrainingInterrupted,
    make_optimizer,
    synthetic_task_config,
    train,
)
from tf_transformer.training.callbacks import CheckpointEveryEpoch, EpochProgress, StopAtTimeLimit
from tf_transformer.training.trainer import _check_settings, make_strategy

# One layer a side: these tests are about the run (strategies, restarts, limits), and each train() call's cost is
# mostly tracing, which grows with the layers.
MODEL = tft.TransformerConfig.from_preset("tiny").replace(
    d_model=32, d_ff=64, num_encoder_layers=1, num_decoder_layers=1, dropout=0.0
)
TRAINING = tft.Recipe.load("tiny").training  # the preset's schedule and label smoothing


def data_config(corpus, **changes):
    values = dict(
        dataset="files",
        train_source=str(corpus["train_en"]),
        train_target=str(corpus["train_de"]),
        vocab_size=500,
        batch_tokens=1024,
        max_length=48,
        seed=1,
        deterministic=True,
    )
    return DataConfig(**{**values, **changes})


# Both strategies in one process (one TensorFlow start, not two): the CPU is split into 2 logical devices once,
# and the one-device run uses one of them. argv: model config, data config, a folder for the two model_dirs.
RUN_ON_TWO_CPUS = """
import json, pathlib, sys
import tf_transformer as tft
from tf_transformer.data import DataConfig
from tf_transformer.training import TrainConfig, train
from tf_transformer.training import fit_loop
training = tft.Recipe.load("tiny").training
model_config, data_config = tft.TransformerConfig.from_json(sys.argv[1]), DataConfig.from_json(sys.argv[2])
reads = []  # the datasets the runs distributed with fit_loop.read_per_replica
read_per_replica = fit_loop.read_per_replica
fit_loop.read_per_replica = lambda strategy, make_batches: reads.append(1) or read_per_replica(strategy, make_batches)
summary = {}
for strategy in ("one_device", "mirrored"):
    result = train(model_config, data_config, TrainConfig(
        model_dir=str(pathlib.Path(sys.argv[3]) / strategy), train_steps=12, checkpoint_every=4, strategy=strategy,
        num_cpu_devices=2, seed=1, deterministic=True, **training))
    summary[strategy] = {"loss": result.history["loss"], "val_loss": result.history["val_loss"],
                         "replicas": result.replicas, "read_per_replica": len(reads)}
import tensorflow as tf
summary["devices"] = len(tf.config.list_logical_devices("CPU"))
# Batches of 3 rows (row r of batch b holds 10 * b + r + 1), read per replica as the mirrored run reads its input:
# where each replica's share is, and which rows (3 rows pad to 4; a padding row is all 0).
strategy = tf.distribute.MirroredStrategy([device.name for device in tf.config.list_logical_devices("CPU")])
def batches():
    rows = lambda b: tf.reshape(tf.range(3, dtype=tf.int32) + 10 * tf.cast(b, tf.int32) + 1, [3, 1])
    return tf.data.Dataset.range(2).map(lambda b: ((rows(b), rows(b)), rows(b)))
shares = [strategy.experimental_local_results(target) for _, target in read_per_replica(strategy, batches)]
summary["shares"] = [[(share.device[-5:], share.numpy().ravel().tolist()) for share in step] for step in shares]
print(json.dumps(summary))
"""


def test_mirrored_on_two_cpu_devices_follows_the_one_device_loss_curve(tmp_path, small_corpus):
    config_path, data_path = tmp_path / "model.json", tmp_path / "data.json"
    MODEL.to_json(config_path)
    # The same batches for both runs; 99 validation pairs leave partly filled batches that mirrored
    # validation must still split across the replicas.
    valid_source, valid_target = tmp_path / "valid.en", tmp_path / "valid.de"
    for name, path in (("valid_en", valid_source), ("valid_de", valid_target)):
        path.write_text("".join(small_corpus[name].read_text(encoding="utf-8").splitlines(True)[:99]), "utf-8")
    data = data_config(small_corpus, batch_multiple=2, valid_source=str(valid_source), valid_target=str(valid_target))
    data.to_json(data_path)
    result = subprocess.run(
        [sys.executable, "-c", RUN_ON_TWO_CPUS, str(config_path), str(data_path), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["devices"] == 2
    one_device, mirrored = summary["one_device"], summary["mirrored"]
    assert (one_device["replicas"], mirrored["replicas"]) == (1, 2)
    # The mirrored run read its training and validation batches per replica (one_device's count is before it), not
    # through tf.distribute's multi-device iterator, whose frees took up to 2 minutes (benchmarks/NOTES.md 42, 45):
    # each replica's share stays on the host (the multi-device iterator puts it on the replica's device), and the
    # shares are a batch's consecutive rows, the last padded.
    assert (one_device["read_per_replica"], mirrored["read_per_replica"]) == (0, 2)
    assert summary["shares"] == [[["CPU:0", [1, 2]], ["CPU:0", [3, 0]]], [["CPU:0", [11, 12]], ["CPU:0", [13, 0]]]]
    assert len(one_device["loss"]) == 3
    np.testing.assert_allclose(mirrored["loss"], one_device["loss"], rtol=1e-4)
    np.testing.assert_allclose(mirrored["val_loss"], one_device["val_loss"], rtol=1e-4)
    assert one_device["loss"][-1] < one_device["loss"][0]  # it does learn


def test_one_model_dir_through_a_time_limit_other_settings_a_divergence_and_the_same_command_going_on(
    tmp_path, small_corpus
):
    """One directory, three train() calls (each costs a trace): a time limit, refused restarts, a diverging resume
    that keeps the last good checkpoint, and the same command going on to the end."""
    data = data_config(small_corpus)
    # A limit already passed when training starts: the first step ends the run.
    limited = TrainConfig(
        model_dir=str(tmp_path), train_steps=4, checkpoint_every=2, seed=1, time_limit_minutes=1e-6, **TRAINING
    )
    first = train(MODEL, data, limited)
    assert (first.status, first.start_step, first.step) == ("time_limit", 0, 1)
    assert first.checkpoint.endswith("ckpt-1")
    assert json.loads((tmp_path / "train_config.json").read_text())["time_limit_minutes"] == 1e-6

    # A restart with another model or data is refused before anything runs.
    with pytest.raises(ConfigError, match=r"different settings in config.json \(d_model: 32 -> 64\).*Fix"):
        train(MODEL.replace(d_model=64), data, limited)
    with pytest.raises(ConfigError, match="different settings in data_config.json.*batch_tokens"):
        train(MODEL, data_config(small_corpus, batch_tokens=2048), limited)
    # A data_config.json written before a field existed (here `lowercase`) passes the restart check: the field
    # counts as its default; the same field saved with another value is still refused.
    original = (tmp_path / "data_config.json").read_text()
    saved = json.loads(original)
    del saved["lowercase"]
    (tmp_path / "data_config.json").write_text(json.dumps(saved))
    _check_settings(MODEL, data, limited, multi_worker=False)
    (tmp_path / "data_config.json").write_text(json.dumps({**saved, "lowercase": True}))
    with pytest.raises(ConfigError, match=r"different settings in data_config.json \(lowercase: True -> False\)"):
        _check_settings(MODEL, data, limited, multi_worker=False)
    (tmp_path / "data_config.json").write_text(original)

    # Resuming with a learning rate this high blows the weights up within a few updates (no checkpoint in between
    # here); a longer train_steps passes the restart check (training longer is allowed).
    exploding = limited.replace(
        train_steps=40, checkpoint_every=100, time_limit_minutes=60.0, learning_rate_scale=1e6, warmup_steps=1
    )
    with pytest.raises(TrainingDiverged, match="NaN or infinite.*last good checkpoint.*ckpt-1.*Fix"):
        train(MODEL, data, exploding)
    latest = tf.train.latest_checkpoint(str(tmp_path / "checkpoints"))
    assert latest.endswith("ckpt-1")
    reader = tf.train.load_checkpoint(latest)
    for name, _ in tf.train.list_variables(latest):
        if name.startswith("model/") and name.endswith("VARIABLE_VALUE"):
            assert np.isfinite(reader.get_tensor(name)).all(), name

    # The fix the message gives works, and the time-limited command, given more time, goes on to its end.
    rest = train(MODEL, data, limited.replace(time_limit_minutes=60.0))
    assert (rest.status, rest.start_step, rest.step) == ("completed", 1, 4)


def test_special_ids_other_than_the_tokenizers_are_refused_before_anything_is_written(tmp_path, small_corpus):
    train_config = TrainConfig(model_dir=str(tmp_path / "run"), train_steps=2, checkpoint_every=2, seed=1)
    with pytest.raises(ConfigError, match=r"^bos_id=4: this package's tokenizers reserve pad 0, BOS 1 and EOS 2"):
        train(MODEL.replace(bos_id=4), data_config(small_corpus), train_config)
    assert not (tmp_path / "run").exists()


def test_data_longer_than_the_model_allows_is_refused(tmp_path, small_corpus):
    with pytest.raises(ConfigError, match="max_length.*Fix"):
        train(
            MODEL.replace(max_length=32),
            data_config(small_corpus, max_length=48),
            TrainConfig(model_dir=str(tmp_path), train_steps=1),
        )
    assert not (tmp_path / "config.json").exists()


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(train_steps=0), "train_steps"),
        (dict(strategy="horovod"), "strategy"),
        (dict(mixed_precision="float8"), "mixed_precision"),
        (dict(num_cpu_devices=-1), "num_cpu_devices"),
        (dict(model_dir=""), "model_dir"),
        (dict(time_limit_minutes=0), "time_limit_minutes"),
        (dict(time_limit_minutes=-5.0), "time_limit_minutes"),
    ],
)
def test_train_config_validation_names_the_field(changes, field):
    with pytest.raises(ConfigError, match=f"^{field}:.*Fix"):
        TrainConfig(**{"model_dir": "runs/x", **changes})


def test_one_device_on_the_cpu_is_the_default_strategy_so_fit_reads_the_dataset_itself():
    # OneDeviceStrategy's multi-device input iterator would run tf.data's autotuning thread, which can keep a
    # freed iterator waiting up to a minute (benchmarks/NOTES.md entry 40).
    chosen = make_strategy(TrainConfig(model_dir="unused", strategy="one_device"))
    if tf.config.list_logical_devices("GPU"):
        assert isinstance(chosen, tf.distribute.OneDeviceStrategy)  # its input iterator prefetches to the GPU
        return
    assert chosen is tf.distribute.get_strategy() and not tf.distribute.has_strategy()
    assert chosen.num_replicas_in_sync == 1
    dataset = tf.data.Dataset.range(4)
    assert chosen.experimental_distribute_dataset(dataset) is dataset  # what Keras' fit then iterates
    if len(tf.config.list_logical_devices("CPU")) == 1:
        assert make_strategy(TrainConfig(model_dir="unused")) is chosen  # "auto"


def test_stop_signals_record_the_first_signal_then_give_the_handlers_back():
    before = {number: signal.getsignal(number) for number in StopSignals.SIGNALS}
    with StopSignals() as stop_signals:
        assert stop_signals.received is None
        os.kill(os.getpid(), signal.SIGTERM)  # would end the process without the context
        for _ in range(100):
            if stop_signals.received is not None:
                break
            time.sleep(0.01)
        assert stop_signals.received == signal.SIGTERM
        # A second signal acts as it did before (SIGINT: KeyboardInterrupt; SIGTERM: the process ends).
        assert {number: signal.getsignal(number) for number in StopSignals.SIGNALS} == before
    assert {number: signal.getsignal(number) for number in StopSignals.SIGNALS} == before


def test_a_recorded_signal_saves_after_the_step_in_progress_and_raises(tmp_path):
    config = synthetic_task_config(num_encoder_layers=1, num_decoder_layers=1)
    model = tft.Transformer(config)
    optimizer = make_optimizer(config.d_model, warmup_steps=200)  # the synthetic task's schedule
    model.compile(optimizer=optimizer, loss=tft.MaskedCrossEntropy(0.0, config.pad_id))
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=model, optimizer=model.optimizer), str(tmp_path / "checkpoints"), max_to_keep=2
    )
    stop_signals = StopSignals()
    stop_signals.received = signal.SIGINT  # as if Ctrl-C came during the first step
    callback = CheckpointEveryEpoch(manager, model.optimizer.iterations, stop_signals)
    data = synthetic_translation_dataset("copy", 64, 16, seed=0)
    with pytest.raises(TrainingInterrupted) as raised:
        model.fit(data, epochs=1, steps_per_epoch=4, callbacks=[callback], verbose=0)
    assert (raised.value.signal_number, raised.value.step) == (signal.SIGINT, 1)
    assert raised.value.checkpoint == manager.latest_checkpoint == str(tmp_path / "checkpoints" / "ckpt-1")
    assert "SIGINT received: training stopped at step 1 and saved" in str(raised.value)


def test_checkpoints_stay_on_the_multiples_after_a_resume_mid_period(tmp_path):
    # A signal's checkpoint (step 3 here) shifts the resumed run's epochs; the saves must not shift with them.
    config = synthetic_task_config(num_encoder_layers=1, num_decoder_layers=1)
    model = tft.Transformer(config)
    optimizer = make_optimizer(config.d_model, warmup_steps=200)  # the synthetic task's schedule
    model.compile(optimizer=optimizer, loss=tft.MaskedCrossEntropy(0.0, config.pad_id))
    model.build()
    model.optimizer.build(model.trainable_variables)
    model.optimizer.iterations.assign(3)
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=model, optimizer=model.optimizer), str(tmp_path / "checkpoints"), max_to_keep=5
    )
    callback = CheckpointEveryEpoch(manager, model.optimizer.iterations, checkpoint_every=4)
    data = synthetic_translation_dataset("copy", 64 * 8, 8, seed=0).repeat()
    model.fit(data, epochs=2, steps_per_epoch=4, callbacks=[callback], verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 11
    assert [path.rsplit("-", 1)[1] for path in manager.checkpoints] == ["4", "8", "11"]


def test_the_time_limit_stops_after_the_step_that_passes_it_and_saves_there(tmp_path, capsys):
    config = synthetic_task_config(num_encoder_layers=1, num_decoder_layers=1)
    model = tft.Transformer(config)
    optimizer = make_optimizer(config.d_model, warmup_steps=200)  # the synthetic task's schedule
    model.compile(optimizer=optimizer, loss=tft.MaskedCrossEntropy(0.0, config.pad_id))
    step = model.optimizer.iterations
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=model, optimizer=model.optimizer), str(tmp_path / "checkpoints"), max_to_keep=5
    )
    # A clock that reads the step: the deadline "3.0" passes at the end of step 3.
    limit = StopAtTimeLimit(3.0, step, clock=lambda: float(step.numpy()))
    saves = CheckpointEveryEpoch(manager, step, checkpoint_every=4)
    data = synthetic_translation_dataset("copy", 64 * 8, 8, seed=0).repeat()
    model.fit(data, epochs=2, steps_per_epoch=4, callbacks=[limit, saves, EpochProgress()], verbose=2)
    assert (int(step.numpy()), limit.stopped_at_step) == (3, 3)
    assert [path.rsplit("-", 1)[1] for path in manager.checkpoints] == ["3"]
    # The epoch's line counts the 3 steps it ran, and the time a step over those (Keras' own: "4/4", over 4).
    [line] = [line for line in capsys.readouterr().out.splitlines() if " - loss: " in line]
    assert line.startswith("3/4 - "), line


def test_a_time_limit_is_refused_for_multi_worker_training(tmp_path, small_corpus):
    train_config = TrainConfig(model_dir=str(tmp_path / "run"), train_steps=2, time_limit_minutes=30, seed=1)
    with pytest.raises(ConfigError, match="^time_limit_minutes: not supported with strategy=multi_worker.*Fix"):
        _check_settings(MODEL, data_config(small_corpus), train_config, multi_worker=True)


@pytest.mark.parametrize("deterministic, multi_worker", [(True, False), (False, True)])
def test_subword_sampling_is_refused_where_batches_must_repeat(tmp_path, small_corpus, deterministic, multi_worker):
    train_config = TrainConfig(model_dir=str(tmp_path / "run"), train_steps=2, seed=1)
    data = data_config(small_corpus, deterministic=deterministic)
    with pytest.raises(ConfigError, match="^subword_nbest_size: .*takes no seed. Fix: pass --override=subword_nbest"):
        _check_settings(MODEL, data.replace(subword_nbest_size=64), train_config, multi_worker=multi_worker)
    _check_settings(MODEL, data.replace(subword_nbest_size=1), train_config, multi_worker=multi_worker)  # 1: off


def test_a_run_with_subword_sampling_trains_and_its_training_tokenizer_samples(tmp_path, small_corpus):
    import shutil

    from tf_transformer.training.fit_loop import _training_tokenizer

    data = data_config(small_corpus, deterministic=False, valid_source=str(small_corpus["valid_en"]),
                       valid_target=str(small_corpus["valid_de"]))  # fmt: skip
    result = train(
        MODEL,
        data.replace(subword_nbest_size=-1, subword_alpha=0.1),
        TrainConfig(model_dir=str(tmp_path / "sampled"), train_steps=4, checkpoint_every=4, seed=1, **TRAINING),
    )
    assert result.status == "completed" and result.step == 4 and np.isfinite(result.history["val_loss"][-1])
    # The run trained on sampled cuts: the same run on the one best cut (same seed, vocabulary, batches' order)
    # ends with other weights. (Without sampling, two such runs end with the same weights.)
    shutil.copytree(tmp_path / "sampled" / "vocab", tmp_path / "best_cut" / "vocab")
    best_cut = train(MODEL, data, TrainConfig(model_dir=str(tmp_path / "best_cut"), train_steps=4, checkpoint_every=4,
                                              seed=1, **TRAINING))  # fmt: skip
    assert best_cut.step == 4 and best_cut.weights_digest != result.weights_digest
    tokenizer = Tokenizer.from_directory(tmp_path / "sampled" / "vocab")
    assert _training_tokenizer(tokenizer, data) is tokenizer  # off: the one best cut
    sampling = _training_tokenizer(tokenizer, data.replace(subword_nbest_size=-1, subword_alpha=0.1))
    sentence = "Two young, White males are outside near many bushes."
    cuts = {tuple(sampling.tokenize(sentence).numpy().tolist()) for _ in range(10)}
    assert len(cuts) > 1  # a new cut on (nearly) every call
