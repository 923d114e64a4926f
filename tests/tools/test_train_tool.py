"""tools/train.py as users run it: kill -9, SIGTERM and restarts, clear errors on bad data and config."""

import json
import os
import pathlib
import platform
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

ROOT = pathlib.Path(__file__).resolve().parents[2]
TRAIN = str(ROOT / "tools" / "train.py")
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def train_command(model_dir, corpus, *extra):
    return [
        sys.executable, TRAIN, "--config=tiny", "--override=d_model=32", "--override=d_ff=64",
        "--override=num_encoder_layers=1", "--override=num_decoder_layers=1", "--dataset=files",
        f"--train_source={corpus['train_en']}", f"--train_target={corpus['train_de']}",
        f"--valid_source={corpus['valid_en']}", f"--valid_target={corpus['valid_de']}",
        f"--model_dir={model_dir}", "--override=vocab_size=500", "--batch_tokens=1024", "--max_length=48",
        "--seed=1", "--validation_batches=1", "--log_every=5", *extra,
    ]  # fmt: skip


def run(command, timeout=300, cwd=None):
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=ENV, cwd=cwd)


def latest_step(model_dir):
    return int(tf.train.latest_checkpoint(str(model_dir / "checkpoints")).rsplit("ckpt-", 1)[1])


def assert_no_valid_model_dir(model_dir):
    assert not (model_dir / "config.json").exists()
    assert not (model_dir / "checkpoints").exists()


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def imported_modules(stderr):
    """The modules a command run with `python -X importtime` imported (Python lists them on stderr)."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def refused_before_tensorflow(command):
    """Runs `command` under `-X importtime`; asserts that it failed without starting TensorFlow; its stderr."""
    command = [command[0], "-X", "importtime", *command[1:]]
    result = run(command)
    assert result.returncode == 1, result.stderr[-3000:]
    imported = imported_modules(result.stderr)
    assert "tf_transformer.cli" in imported and "tensorflow" not in imported, result.stderr[-3000:]
    return "\n".join(line for line in result.stderr.splitlines() if not line.startswith("import time:"))


def test_misaligned_files_are_refused_clearly(tmp_path, small_corpus):
    short_target = write_lines(tmp_path / "short.de", small_corpus["train_de"].read_text().splitlines()[:1500])
    corpus = {**small_corpus, "train_de": short_target}
    stderr = refused_before_tensorflow(train_command(tmp_path / "run", corpus, "--train_steps=5"))
    assert stderr.startswith("error: misaligned files:") and len(stderr.splitlines()) == 1, stderr
    assert "short.de" in stderr and "Fix" in stderr and "2000" in stderr and "1500" in stderr
    assert_no_valid_model_dir(tmp_path / "run")


@pytest.mark.parametrize("split", ["train", "valid"])
def test_an_empty_file_is_refused_clearly(tmp_path, small_corpus, split):
    empty = write_lines(tmp_path / "empty.en", [])
    corpus = {**small_corpus, f"{split}_en": empty}
    stderr = refused_before_tensorflow(train_command(tmp_path / "run", corpus, "--train_steps=5"))
    assert stderr == f"error: {empty}: the file is empty. Fix: set --{split}_source to a file with one sentence a line."
    assert_no_valid_model_dir(tmp_path / "run")


@pytest.mark.parametrize(
    "override, message",
    [("num_heads=3", "d_model: 32 is not divisible by num_heads=3"), ("d_modle=64", "Did you mean 'd_model'")],
)
def test_a_bad_config_is_refused_clearly(tmp_path, small_corpus, override, message):
    stderr = refused_before_tensorflow(
        train_command(tmp_path / "run", small_corpus, "--train_steps=5", f"--override={override}")
    )
    assert message in stderr and "Fix" in stderr
    assert not (tmp_path / "run").exists()


def test_the_readmes_training_command_trains_the_multi30k_config(tmp_path, multi30k_dir):
    readme = (ROOT / "README.md").read_text()
    main_job = [line for line in readme.splitlines() if line.startswith("python3 -m venv")][0]
    arguments = main_job.split(" && ")[-1].split()
    assert arguments[0] == "tft-train"  # the console command of tools/train.py, which runs it here
    assert "--config=configs/multi30k.json" in arguments
    arguments = [argument for argument in arguments[1:] if not argument.startswith(("--model_dir", "--data_dir"))]
    # The README's command, shortened: three steps of configs/multi30k.json, into a temporary directory.
    model_dir = tmp_path / "run"
    command = [sys.executable, TRAIN, *arguments, f"--data_dir={multi30k_dir}", f"--model_dir={model_dir}",
               "--train_steps=3", "--checkpoint_every=3", "--validation_batches=1"]  # fmt: skip
    result = run(command, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Trained steps 0 -> 3" in result.stdout
    # Its log's memory line (tf_transformer/allocator.py): malloc keeps what TensorFlow frees, on glibc.
    assert platform.libc_ver()[0] != "glibc" or "Memory: glibc malloc keeps freed memory" in result.stderr
    # Its threads line (tf_transformer/training/threads.py): the tests' one thread an op, from the environment.
    assert "Threads: 1 an op, as the environment sets it (TF_NUM_INTRAOP_THREADS)." in result.stderr
    # The run used the file's recipe as is, each part in the file of its owner, on the whole corpus (a NaN loss would
    # have failed it above).
    recipe = json.loads((ROOT / "configs" / "multi30k.json").read_text())
    expected = recipe["model"]
    assert json.loads((model_dir / "config.json").read_text()) == expected
    train_config = json.loads((model_dir / "train_config.json").read_text())
    assert {name: train_config[name] for name in recipe["training"]} == recipe["training"]
    assert json.loads((model_dir / "decoding.json").read_text()) == recipe["decoding"]
    report = json.loads((model_dir / "data_report.json").read_text())
    assert report["kept"] == 29000
    # The README's --lowercase (or its absence) reaches the data config, and so the vocabulary's case folding.
    data_config = json.loads((model_dir / "data_config.json").read_text())
    assert data_config["lowercase"] == ("--lowercase" in arguments)
    assert {name: data_config[name] for name in recipe["data"]} == recipe["data"]
    vocabulary = json.loads((model_dir / "vocab" / "tokenizer.json").read_text())
    assert vocabulary["normalization"] == ("nmt_nfkc_cf" if data_config["lowercase"] else "nmt_nfkc")
    reader = tf.train.load_checkpoint(str(model_dir / "checkpoints"))
    shapes = reader.get_variable_to_shape_map()
    embedding = [shape for name, shape in shapes.items() if "embedding" in name and "OPTIMIZER" not in name]
    assert [expected["vocab_size"], expected["d_model"]] in embedding


def wait_until(done, process, log, what, seconds=240):
    """Polls `done()`; fails with the end of `log` (the process's output file) if `process` ends first or time runs
    out."""
    deadline = time.time() + seconds
    while not done():
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.time() < deadline, f"{what} not within {seconds} s"
        time.sleep(0.2)


def test_a_killed_or_stopped_run_resumes_where_it_saved_and_stops_at_train_steps(tmp_path, small_corpus):
    """One run directory through kill -9, a truncated latest checkpoint, a resume stopped by SIGTERM, a resume to
    train_steps and a run with nothing left to do (one chain: each tools/train.py start costs a TensorFlow start)."""
    model_dir = tmp_path / "run"
    command = train_command(model_dir, small_corpus, "--train_steps=40", "--checkpoint_every=5")
    killed_log = tmp_path / "killed.txt"
    with open(killed_log, "w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, text=True, env=ENV)
    third = model_dir / "checkpoints" / "ckpt-15.index"
    wait_until(third.exists, process, killed_log, "a third checkpoint")
    process.send_signal(signal.SIGKILL)  # kill -9: no cleanup, no final save
    process.wait(timeout=30)
    # 15 normally; 10 when the kill came mid-save, after the files but before the index moved to them:
    # then the previous checkpoint is still the latest, which is the point of writing the index last.
    killed_at = latest_step(model_dir)
    assert killed_at in (10, 15)
    config_before = (model_dir / "config.json").read_text()

    # The latest checkpoint truncated as well (a full disk, a partial copy): the rerun sets it aside and resumes
    # from the one before; SIGTERM stops it. The checkpoint period is far away: only the signal's save can leave a
    # new checkpoint.
    truncated = model_dir / "checkpoints" / f"ckpt-{killed_at}"
    data = pathlib.Path(f"{truncated}.data-00000-of-00001")
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    resumed_at = killed_at - 5
    log = tmp_path / "stderr.txt"
    with open(log, "w") as stderr:
        far = train_command(model_dir, small_corpus, "--train_steps=100000", "--checkpoint_every=100000")
        process = subprocess.Popen(far, stdout=subprocess.PIPE, stderr=stderr, text=True, env=ENV)
        started = f"Training from step {resumed_at}"
        wait_until(lambda: started in log.read_text(errors="replace"), process, log, f"{started!r} in {log}")
        time.sleep(2)
        process.send_signal(signal.SIGTERM)
        stdout, _ = process.communicate(timeout=120)
    output = log.read_text()
    assert process.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert f"checkpoint {truncated} cannot be read: a data file is shorter than its index says" in output
    assert (model_dir / "checkpoints" / "unreadable" / data.name).stat().st_size > 0
    assert f"Resumed from {model_dir / 'checkpoints' / f'ckpt-{resumed_at}'}" in output
    saved = latest_step(model_dir)
    assert resumed_at < saved < 100000
    assert "SIGTERM received: saving a checkpoint after the step in progress" in output
    assert f"interrupted: SIGTERM received: training stopped at step {saved} and saved " in output
    assert f"ckpt-{saved}" in output and "Run the same command again to resume" in output
    assert "Traceback" not in output and "Trained steps" not in stdout

    last = train_command(model_dir, small_corpus, f"--train_steps={saved + 3}", "--checkpoint_every=100000")
    resumed = run(last)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Trained steps {saved} -> {saved + 3}" in resumed.stdout
    assert f"Resumed from {model_dir / 'checkpoints' / f'ckpt-{saved}'}" in resumed.stderr
    assert latest_step(model_dir) == saved + 3
    assert (model_dir / "config.json").read_text() == config_before
    assert json.loads(config_before)["vocab_size"] <= 500
    # Without --vocab_size, the model config's vocab_size is the size of the vocabulary built.
    assert json.loads((model_dir / "data_config.json").read_text())["vocab_size"] == 500
    for name in ("data_config.json", "train_config.json", "data_report.json", "vocab/tokenizer.json"):
        assert (model_dir / name).is_file(), name
    tags = set()
    for events in (model_dir / "logs").rglob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            tags.update(value.tag for value in event.summary.value)
    assert {"learning_rate", "target_tokens_per_second", "epoch_loss"} <= tags, tags

    done = run(last)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"Already trained {saved + 3} steps" in done.stdout


def test_every_tool_names_a_damaged_checkpoint_in_one_line(tmp_path, small_corpus):
    model_dir = tmp_path / "run"
    trained = run(train_command(model_dir, small_corpus, "--train_steps=4", "--checkpoint_every=2"))
    assert trained.returncode == 0, trained.stderr[-3000:]
    latest, older = model_dir / "checkpoints" / "ckpt-4", model_dir / "checkpoints" / "ckpt-2"
    pathlib.Path(f"{latest}.data-00000-of-00001").unlink()
    source = write_lines(tmp_path / "source.en", ["A dog runs in the snow."])
    reference = write_lines(tmp_path / "reference.de", ["Ein Hund rennt im Schnee."])
    # -X importtime: Python lists the modules it imports on stderr.
    tool = lambda name, *flags: [sys.executable, "-X", "importtime", str(ROOT / "tools" / f"{name}.py"), *flags]  # noqa: E731
    commands = {
        "translate": tool("translate", f"--model_dir={model_dir}", f"--input={source}"),
        "evaluate": tool("evaluate", f"--model_dir={model_dir}", f"--sources={source}", f"--references={reference}"),
        "export": tool("export", f"--model_dir={model_dir}", f"--export_dir={tmp_path / 'export'}"),
        "score": tool("score", f"--model_dir={model_dir}", f"--sources={source}", f"--targets={reference}"),
        "plot_attention": tool(
            "plot_attention", f"--model_dir={model_dir}", "--sentence=A dog.", f"--output_dir={tmp_path / 'plots'}"
        ),
        "average_checkpoints": tool("average_checkpoints", f"--model_dir={model_dir}", "--num_checkpoints=2"),
    }
    processes = {
        name: subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        for name, command in commands.items()
    }
    for name, process in processes.items():
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 1, (name, stderr[-3000:])
        imported = imported_modules(stderr)
        stderr = "\n".join(line for line in stderr.splitlines() if not line.startswith("import time:"))
        errors = [line for line in stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in stderr, (name, stderr[-3000:])
        # A missing file of the latest checkpoint, the one used: refused before TensorFlow starts. (Averaging
        # reads the checkpoints with TensorFlow.)
        assert ("tensorflow" in imported) == (name == "average_checkpoints"), name
        assert f"error: checkpoint {latest} cannot be read: its data file" in errors[0], (name, errors[0])
        if name == "average_checkpoints":
            assert "run the training command again" in errors[0], errors[0]
        else:
            assert errors[0].endswith(f"Fix: pass an older checkpoint (--checkpoint={older})."), (name, errors[0])
    assert not (tmp_path / "export").exists() or not any((tmp_path / "export").iterdir())
