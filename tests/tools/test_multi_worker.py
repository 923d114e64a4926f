"""Two tools/train.py workers on loopback (MultiWorkerMirroredStrategy): lockstep, a lost worker, SIGTERM, resume."""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import tensorflow as tf

ROOT = pathlib.Path(__file__).resolve().parents[2]


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for handle in sockets:
        handle.bind(("127.0.0.1", 0))
    ports = [handle.getsockname()[1] for handle in sockets]
    for handle in sockets:
        handle.close()
    return ports


def worker_command(model_dir, corpus, *flags):
    """tools/train.py on the tiny model under multi_worker_mirrored, with `flags` (steps, periods) added."""
    return [
        sys.executable, str(ROOT / "tools" / "train.py"), "--config=tiny", "--override=d_model=32",
        "--override=d_ff=64", "--override=num_encoder_layers=1", "--override=num_decoder_layers=1", "--dataset=files",
        f"--train_source={corpus['train_en']}",
        f"--train_target={corpus['train_de']}", f"--model_dir={model_dir}", "--vocab_size=500",
        "--batch_tokens=1024", "--max_length=48", "--seed=1", "--strategy=multi_worker_mirrored", *flags,
    ]  # fmt: skip


def start_workers(command, tmp_path, tag):
    """Two workers of one cluster on loopback; returns (processes, logs): each worker's stderr goes to its log,
    its stdout (the run's summary lines) to the log's `.out` sibling."""
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes, logs = [], []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = {**os.environ, "TF_CONFIG": json.dumps(tf_config), "TF_CPP_MIN_LOG_LEVEL": "3"}
        log = tmp_path / f"{tag}-worker-{index}.txt"
        with open(log, "w") as errors, open(log.with_suffix(".out"), "w") as output:
            processes.append(subprocess.Popen(command, stdout=output, stderr=errors, env=env))
        logs.append(log)
    return processes, logs


def summaries(logs):
    """Each worker's stdout lines."""
    return [log.with_suffix(".out").read_text().strip().splitlines() for log in logs]


def wait_until(condition, processes, logs, seconds=300):
    deadline = time.time() + seconds
    while not condition():
        for process, log in zip(processes, logs, strict=True):
            assert process.poll() is None, log.read_text()[-3000:]
        assert time.time() < deadline, logs[0].read_text()[-3000:]
        time.sleep(0.2)


def latest_step(model_dir):
    return int(tf.train.latest_checkpoint(str(model_dir / "checkpoints")).rsplit("ckpt-", 1)[1])


def test_a_lost_worker_stops_the_other_a_sigterm_stops_both_after_a_save_and_a_restart_resumes(tmp_path, small_corpus):
    """One cluster directory through a lost worker, a SIGTERM and a restart to the end, where both workers have made
    the same steps and hold identical weights (one chain: each start costs two TensorFlow starts)."""
    model_dir = tmp_path / "run"
    periods = ("--checkpoint_every=10", "--log_every=5")
    command = worker_command(model_dir, small_corpus, "--train_steps=100000", *periods)

    # A worker dies without warning (kill -9, a lost machine): the other stops with a clear error in bounded
    # time (TensorFlow's coordination service misses its heartbeats), instead of waiting forever.
    processes, logs = start_workers(command, tmp_path, "lost")
    wait_until(lambda: (model_dir / "checkpoints" / "ckpt-10.index").exists(), processes, logs)
    processes[1].kill()
    processes[1].wait(timeout=30)
    processes[0].wait(timeout=120)
    survivor = logs[0].read_text()
    assert processes[0].returncode == 1, survivor[-3000:]
    assert "error: a peer worker stopped responding near step" in survivor, survivor[-3000:]
    assert "Fix: restart every worker with the same command" in survivor
    saved = latest_step(model_dir)
    assert saved >= 10 and saved % 10 == 0

    # Every worker restarted with the same command resumes there; a SIGTERM to one worker stops both at one
    # agreed step, each saving (TensorFlow's PreemptionCheckpointHandler), with the interrupted exit status.
    processes, logs = start_workers(command, tmp_path, "resumed")
    wait_until(lambda: f"Training from step {saved} " in logs[0].read_text(), processes, logs)
    time.sleep(2)
    processes[1].send_signal(signal.SIGTERM)
    for process in processes:
        process.wait(timeout=180)
    outputs = [log.read_text() for log in logs]
    assert f"Resumed from {model_dir / 'checkpoints' / f'ckpt-{saved}'}" in outputs[0]
    assert [process.returncode for process in processes] == [128 + signal.SIGTERM] * 2, outputs[0][-3000:]
    stopped = latest_step(model_dir)
    assert stopped > saved
    for output in outputs:
        assert f"interrupted: SIGTERM received: training stopped at step {stopped} and " in output, output[-3000:]
        assert "Traceback" not in output
    assert f"and saved {model_dir / 'checkpoints' / f'ckpt-{stopped}'}." in outputs[0]
    assert "and the chief saved a checkpoint." in outputs[1]

    # And again, to the end: both resume from the signal's checkpoint and finish in lockstep, with identical weights.
    command = worker_command(model_dir, small_corpus, f"--train_steps={stopped + 4}", *periods)
    processes, logs = start_workers(command, tmp_path, "finished")
    for process in processes:
        process.wait(timeout=300)
    outputs = summaries(logs)
    assert [process.returncode for process in processes] == [0, 0], logs[0].read_text()[-3000:]
    assert all(f"Trained steps {stopped} -> {stopped + 4}" in lines[-2] for lines in outputs), outputs
    digests = [lines[-1] for lines in outputs]
    assert digests[0] == digests[1] and "(2 replica(s))" in digests[0], digests
    assert (model_dir / "checkpoints" / f"ckpt-{stopped + 4}.index").is_file()
    assert not list((model_dir / "checkpoints").glob(".worker-*")), "the non-chief removes its temporary checkpoints"
