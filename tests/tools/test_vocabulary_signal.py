"""tools/train.py stopped by SIGTERM while SentencePiece trains its vocabulary: a clean stop, then a restart."""

import os
import pathlib
import random
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHILD_SCRIPT = "_sentencepiece_child.py"


def write_corpus(path, seed, pairs=10000):
    """Random words: SentencePiece takes seconds on 2 cores for 2 x 10,000 such lines (7 s for 2 x 20,000), long
    enough to find its child process and signal the trainer meanwhile."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyzäöü"
    words = ["".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(20000)]
    path.write_text("".join(" ".join(rng.choices(words, k=rng.randint(5, 20))) + "\n" for _ in range(pairs)))
    return path


def sentencepiece_child(parent_pid):
    """The pid of `parent_pid`'s SentencePiece child process, or None."""
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent_pid and CHILD_SCRIPT.encode() in cmdline:
            return int(entry.name)
    return None


def test_sigterm_while_building_the_vocabulary_stops_cleanly_and_a_restart_builds_it(tmp_path):
    source, target = write_corpus(tmp_path / "train.en", 1), write_corpus(tmp_path / "train.de", 2)
    model_dir = tmp_path / "run"
    command = [
        sys.executable, str(ROOT / "tools" / "train.py"), "--config=tiny", "--override=d_model=32",
        "--override=d_ff=64", "--override=num_encoder_layers=1", "--override=num_decoder_layers=1",
        "--override=vocab_size=2000", "--dataset=files", f"--train_source={source}", f"--train_target={target}",
        f"--model_dir={model_dir}", "--batch_tokens=1024", "--max_length=48", "--train_steps=1", "--seed=1",
    ]  # fmt: skip
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60  # a guard against a hang, not a measurement
        child = None
        while child is None and process.poll() is None and time.monotonic() < deadline:
            child = sentencepiece_child(process.pid)
            time.sleep(0.05)
        assert child is not None, "SentencePiece's child process never started"
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert stderr.rstrip().splitlines()[-1] == (
        f"interrupted: SIGTERM received while building the vocabulary in {model_dir / 'vocab'}: stopped before it "
        "was complete, so nothing of it is used. Run the same command again to build it."
    )
    # Stopped while SentencePiece trained: the child was killed and nothing was written, no temporary file either.
    assert sentencepiece_child(process.pid) is None and not pathlib.Path(f"/proc/{child}").exists()
    assert not (model_dir / "vocab").exists() or not any((model_dir / "vocab").iterdir())
    assert not (model_dir / "config.json").exists() and not (model_dir / "checkpoints").exists()

    # A half-written vocabulary (a model file without tokenizer.json) is not trusted: the restart builds anew.
    (model_dir / "vocab").mkdir(parents=True, exist_ok=True)
    (model_dir / "vocab" / "spm.model").write_bytes(b"half a model")
    restart = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert restart.returncode == 0, restart.stderr[-3000:]
    assert "Trained steps 0 -> 1" in restart.stdout
    assert (model_dir / "vocab" / "tokenizer.json").is_file()
    assert (model_dir / "vocab" / "spm.model").read_bytes() != b"half a model"


# Runs a process that builds a vocabulary, kills it with SIGKILL once its SentencePiece child has loaded
# sentencepiece (after it asked Linux for its parent's death signal: a parent killed before that is seen by the
# child's own check, which exits 1), and prints how the orphaned child ended: as a subreaper this harness inherits
# the orphan and can wait for it. Killed by SIGKILL (9) means it died with its parent; otherwise it would have
# trained on into a pipe nobody reads.
HARNESS = """
import ctypes, os, pathlib, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
build = "import sys; from tf_transformer.data.vocab import train_sentencepiece; " + (
    "train_sentencepiece(open(sys.argv[1]).read().splitlines(), sys.argv[2], 2000)"
)
builder = subprocess.Popen([sys.executable, "-c", build, sys.argv[1], sys.argv[2]])
child, deadline = None, time.monotonic() + 60
while child is None and builder.poll() is None and time.monotonic() < deadline:
    for entry in pathlib.Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) if entry.name.isdigit() else 0
            if parent == builder.pid and b"_sentencepiece_child.py" in (entry / "cmdline").read_bytes():
                child = int(entry.name) if b"/_sentencepiece." in (entry / "maps").read_bytes() else None
        except OSError:
            pass
    time.sleep(0.05)
builder.kill()
builder.wait()
_, status = os.waitpid(child, 0)
print("signal", os.WTERMSIG(status) if os.WIFSIGNALED(status) else None)
"""


def test_the_sentencepiece_child_dies_with_its_parent(tmp_path):
    """kill -9 of the process building a vocabulary (no handler can run) kills its SentencePiece child too."""
    source = write_corpus(tmp_path / "train.en", 3)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, "-c", HARNESS, str(source), str(tmp_path / "vocab")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["signal", str(int(signal.SIGKILL))], result.stdout + result.stderr[-3000:]
    assert not (tmp_path / "vocab").exists()
