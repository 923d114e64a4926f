"""Two tools/train.py workers on loopback under MultiWorkerMirroredStrategy stay in lockstep."""

import json
import os
import pathlib
import socket
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for handle in sockets:
        handle.bind(("127.0.0.1", 0))
    ports = [handle.getsockname()[1] for handle in sockets]
    for handle in sockets:
        handle.close()
    return ports


def test_two_workers_make_the_same_steps_and_end_with_identical_weights(tmp_path, small_corpus):
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    command = [
        sys.executable, str(ROOT / "tools" / "train.py"), "--config=tiny", "--override=d_model=32",
        "--override=d_ff=64", "--dataset=files", f"--train_source={small_corpus['train_en']}",
        f"--train_target={small_corpus['train_de']}", f"--model_dir={tmp_path / 'run'}", "--vocab_size=500",
        "--batch_tokens=1024", "--max_length=48", "--seed=1", "--strategy=multi_worker_mirrored",
        "--train_steps=8", "--checkpoint_every=4", "--log_every=2",
    ]  # fmt: skip
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = {**os.environ, "TF_CONFIG": json.dumps(tf_config), "TF_CPP_MIN_LOG_LEVEL": "3"}
        processes.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outputs = [process.communicate(timeout=400) for process in processes]
    for process, (_, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, stderr[-3000:]
    summaries = [stdout.strip().splitlines() for stdout, _ in outputs]
    assert all("Trained steps 0 -> 8" in lines[-2] for lines in summaries), summaries
    digests = [lines[-1] for lines in summaries]
    assert digests[0] == digests[1] and "(2 replica(s))" in digests[0], digests
    checkpoints = tmp_path / "run" / "checkpoints"
    assert (checkpoints / "ckpt-8.index").is_file()
    assert not list(checkpoints.glob(".worker-*")), "the non-chief worker removes its temporary checkpoints"
