"""Runs the backend-free tests under Keras' other backends, each in a child pytest: Keras fixes its backend when it
is first imported, so one process cannot test two."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The tests that hold on every Keras backend: each layer against its NumPy reference, the padding and look-ahead
# invariances, the model's encode / init_cache / decode against its full pass, the serialization round trips and the
# README's model.fit copy task. Their modules import no TensorFlow (test_backend_free_set.py checks it); their few
# tests of what is TensorFlow's by design are marked tensorflow_only, which the other backends deselect.
BACKEND_FREE = ("tests/layers", "tests/models")
# What CI runs of them under each backend (pytest arguments). JAX compiles each operation of an eager call anew for
# each input shape (about 40 ms an operation on these cores), so the whole set takes it about 4 minutes on 2 cores,
# over what the suite's 10 minutes leave. CI runs under JAX what issue 57 lists: every layer against its NumPy
# reference and its padding and look-ahead invariances, the model's invariances and encode / init_cache / decode
# against its full pass, the serialization round trips and the README's copy task (about 2.5 minutes alone). It
# leaves to PyTorch's run, which runs the whole set: the paper's parameter counts (arithmetic of shapes), the
# model's mixed-precision fits and its compiled round trip (Keras' optimizer state), the quantized-sublayer
# plumbing (int8 is TensorFlow's fast path), the classifier and the attention-weights view. The whole set under JAX
# is one command, `KERAS_BACKEND=jax pytest -n 0 tests/layers tests/models` (docs/python.md).
JAX_IN_CI = (
    *(str(path.relative_to(ROOT)) for path in sorted((ROOT / "tests/layers").glob("test_*.py"))
      if path.name != "test_sublayer_plumbing.py"),
    "tests/models/test_transformer.py",
    "tests/models/test_readme_copy_task.py",
    "-k",
    "not (parameter_counts or base_and_big_counts or head_variations_keep or mixed_precision_keeps"
    " or compiled_model_round_trip)",
)  # fmt: skip
IN_CI = {"torch": BACKEND_FREE, "jax": JAX_IN_CI}
# A child's whole run: 1.5-4.5 minutes on 2 cores beside the other workers; the limit only stops a hung run.
TIME_LIMIT_S = 900


def backend_free_modules():
    return sorted(path for folder in BACKEND_FREE for path in (ROOT / folder).glob("*.py"))


def pytest_generate_tests(metafunc):
    if "backend_free_module" in metafunc.fixturenames:
        metafunc.parametrize("backend_free_module", backend_free_modules(), ids=lambda path: path.name)


@pytest.fixture
def run_backend_free_tests():
    return run_under_backend


@pytest.fixture
def train_anywhere(tmp_path):
    """`train_anywhere(backend)`: examples/train_anywhere.py's summary, trained under `backend`, served from
    TensorFlow (the example checks the logits and the SavedModel's translations itself and fails if they differ)."""

    def run(backend):
        command = [sys.executable, "examples/train_anywhere.py", f"--output_dir={tmp_path}"]
        result = subprocess.run(
            command, cwd=ROOT, env=child_env(backend), capture_output=True, text=True, timeout=TIME_LIMIT_S
        )
        if result.returncode != 0:
            pytest.fail(f"KERAS_BACKEND={backend} python {' '.join(command[1:])} failed:\n{result.stdout}\n"
                        f"{result.stderr[-4000:]}", pytrace=False)  # fmt: skip
        printed = "\n" + result.stdout
        return json.loads(printed[printed.rindex("\n{\n") + 1 :])

    return run


def run_under_backend(backend):
    """Runs `IN_CI[backend]` under `backend`; fails naming the backend and each failed test, or any test it skipped."""
    env = child_env(backend)
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-rfEs", "--durations=5", *IN_CI[backend]]
    try:
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIME_LIMIT_S)
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"KERAS_BACKEND={backend}: the backend-free tests ran over {TIME_LIMIT_S} s:\n{error.stdout}")
    output = result.stdout + result.stderr
    failed = [line for line in result.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    if result.returncode != 0:
        pytest.fail(
            f"KERAS_BACKEND={backend}: {len(failed)} of the backend-free tests failed (rerun one with "
            f"`KERAS_BACKEND={backend} pytest -n 0 <test id>`):\n" + "\n".join(failed) + "\n\n" + output[-6000:],
            pytrace=False,
        )
    skipped = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    assert not skipped, f"KERAS_BACKEND={backend}: tests skipped (a skip can hide a failure):\n" + "\n".join(skipped)
    return output


def child_env(backend):
    """The environment of a child under `backend`: one thread for PyTorch's and XLA's pools, as tests/conftest.py
    gives TensorFlow (at two threads on 2 busy cores PyTorch's steps took several times longer); without the
    parent worker's own PYTEST_* variables (xdist's worker id, the current test)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
    env.update(KERAS_BACKEND=backend, OMP_NUM_THREADS="1")
    env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    return env
