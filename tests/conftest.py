"""Shared pytest setup: quiet TensorFlow's C++ logging before any test imports it; the Multi30k data.

CPUs differ in numerics: TensorFlow turns its oneDNN kernels on by default where the CPU has AVX-512 VNNI,
BF16 or AMX, and leaves them off on AVX2-only CPUs. The suite must pass on both, so run it both ways before
submitting (the tests that assert a learned threshold set their bars below the spread measured under both):

    TF_ENABLE_ONEDNN_OPTS=1 pytest -q
    TF_ENABLE_ONEDNN_OPTS=0 pytest -q
"""

import gzip
import os
import pathlib

import numpy as np
import pytest

from tf_transformer.allocator import keep_freed_memory

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# One thread for TensorFlow's ops and one to run them, in the workers and the commands they start (the environment
# passes on): the suite's three workers (setup.cfg) share two cores, and TensorFlow's default pools (as many threads
# as cores, each) oversubscribe them with threads that spin while they wait; the models here are too small to gain
# from more. On 2 AVX2 cores (2026-11-27): two workers at the default threads 16:45, at one thread 15:16, three
# workers at one thread 13:49. The third worker runs while the others wait on a command, a signal or a time limit.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
# The same under Keras' other backends (tests/backends/ runs the layer and model tests under each): PyTorch's OpenMP
# pool and XLA's CPU pool (JAX) keep to one thread.
if os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

# As the commands do (tf_transformer/allocator.py): malloc keeps what TensorFlow frees instead of unmapping it, which
# spares the workers most of their page faults. Before anything imports TensorFlow and starts its threads.
keep_freed_memory()

ROOT = pathlib.Path(__file__).resolve().parents[1]


def multi30k_path() -> pathlib.Path:
    """The Multi30k folder: $MULTI30K_DIR, else ../shared/data/multi30k beside the repository."""
    return pathlib.Path(os.environ.get("MULTI30K_DIR", ROOT.parent / "shared" / "data" / "multi30k"))


@pytest.fixture(scope="session")
def multi30k_dir():
    path = multi30k_path()
    if not (path / "train.en.gz").is_file():
        message = f"Multi30k not found at {path}; set MULTI30K_DIR to the folder with train.en.gz"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI always has the data: a skip there would hide a failure
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def small_corpus(multi30k_dir, tmp_path_factory):
    """The first 2000 Multi30k en-de training pairs and 100 validation pairs as plain text files."""
    folder = tmp_path_factory.mktemp("corpus")
    files = {}
    for split, name, count in (("train", "train", 2000), ("valid", "val", 100)):
        for lang in ("en", "de"):
            with gzip.open(multi30k_dir / f"{name}.{lang}.gz", "rt", encoding="utf-8") as handle:
                lines = handle.read().splitlines()[:count]
            path = folder / f"{split}.{lang}"
            path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            files[f"{split}_{lang}"] = path
    return files


# The files that take longest on 2 cores (10 s or more each, longest first, from the suite's --durations=150 of
# 2026-11-29 with oneDNN off) are collected first. pytest-xdist's loadfile hands out whole files in collection order
# as workers free up, so a long file collected last leaves one worker running alone at the end; longest first
# balances the workers.
_LONGEST_FIRST = (
    # tests/layers and tests/models in a child pytest under JAX (about 2.5 minutes alone, 4 on 2 busy cores: JAX
    # compiles each operation of an eager call for each new shape) and PyTorch (40-90 s), with
    # examples/train_anywhere.py (30-60 s each).
    "tests/backends/test_jax.py",
    "tests/backends/test_torch.py",
    "tests/tools/test_translate_tools.py",
    "tests/tools/test_train_tool.py",
    "tests/training/test_budget.py",
    "tests/training/test_trainer.py",
    "tests/training/test_precision.py",
    "tests/export/test_client.py",  # tests/export/ is one unit of work (below): its files together, 57 s
    "tests/export/test_module.py",
    "tests/export/test_quantized_export.py",
    "tests/export/test_standalone.py",
    "tests/export/test_prefix.py",
    "tests/training/test_resume_state.py",
    "tests/training/test_synthetic.py",
    "tests/tools/test_multi_worker.py",
    "tests/models/test_transformer.py",
    "tests/benchmarks/test_trainer_steps.py",
    "tests/test_quantization.py",
    "tests/training/test_fine_tuning.py",
    "tests/tools/test_vocabulary_signal.py",
    "tests/data/test_vocab.py",
    "tests/decoding/test_copy_task.py",
    "tests/benchmarks/test_decoding_paths.py",
    "tests/decoding/test_graph_modes.py",
    "tests/decoding/test_constraints.py",
    "tests/tools/test_demo.py",
    "tests/tools/test_console_commands.py",
    "tests/training/test_validation_bleu.py",
    "tests/tools/test_plot_attention.py",
    "tests/examples/test_examples.py",
    "tests/data/test_pipeline.py",
    "tests/test_visualization.py",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {path: index for index, path in enumerate(_LONGEST_FIRST)}
    # A stable sort: each file's tests stay together and in their order.
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
    _deselect_tensorflow_only(config, items)


def _deselect_tensorflow_only(config, items):
    """Under a Keras backend other than TensorFlow (tests/backends/ runs the layer and model tests so), the tests
    marked `tensorflow_only` are deselected, not skipped: they test what is TensorFlow's by design, which the
    other backends do not have (each marker says why)."""
    import keras

    if keras.backend.backend() == "tensorflow":
        return
    tensorflow_only = [item for item in items if item.get_closest_marker("tensorflow_only")]
    if tensorflow_only:
        config.hook.pytest_deselected(items=tensorflow_only)
        items[:] = [item for item in items if not item.get_closest_marker("tensorflow_only")]


# Folders whose test files share session fixtures that cost a training run and an export (tests/export/conftest.py):
# one worker runs the whole folder and builds them once, instead of each worker building its own.
_ONE_WORKER_FOLDERS = ("tests/export/",)


def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's loadfile, with each folder of `_ONE_WORKER_FOLDERS` one unit of work."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileOrFolderScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid):
            path = super()._split_scope(nodeid)
            return next((folder for folder in _ONE_WORKER_FOLDERS if path.startswith(folder)), path)

    return FileOrFolderScheduling(config, log)


@pytest.fixture
def gradient():
    """`gradient(loss_fn, variable)`: d loss_fn() / d variable as a NumPy array, by the Keras backend's own autodiff
    (the layers are the same on every backend; taking a gradient is not a `keras.ops` operation)."""
    import keras

    return {"tensorflow": _tensorflow_gradient, "jax": _jax_gradient, "torch": _torch_gradient}[keras.backend.backend()]


def _tensorflow_gradient(loss_fn, variable):
    import tensorflow as tf

    with tf.GradientTape() as tape:
        loss = loss_fn()
    return tf.convert_to_tensor(tape.gradient(loss, variable)).numpy()  # a lookup's gradient is IndexedSlices


def _jax_gradient(loss_fn, variable):
    import jax
    import keras

    def loss_of(value):
        with keras.StatelessScope(state_mapping=[(variable, value)]):
            return loss_fn()

    return np.asarray(jax.grad(loss_of)(variable.value))


def _torch_gradient(loss_fn, variable):
    import torch

    (value,) = torch.autograd.grad(loss_fn(), variable.value)
    return value.detach().cpu().numpy()
