"""tf_transformer.training.threads: one thread an op only where it was measured to pay, and the user's own setting
left alone."""

import os
import subprocess
import sys

import pytest

from tf_transformer.training.threads import choose_intra_op_threads

BF16_CPU = {"avx2", "avx512f", "avx512_bf16"}
AVX2_CPU = {"avx2", "fma"}


@pytest.mark.parametrize("precision", ["auto", "mixed_bfloat16"])
def test_two_cores_computing_bf16_train_on_one_thread_an_op(precision):
    threads, reason = choose_intra_op_threads(precision, cpu_count=2, cpu_flags=BF16_CPU, gpus=[])
    assert threads == 1
    assert "2 cores training in bf16" in reason


@pytest.mark.parametrize(
    "precision, num_cpu_devices, strategy, cores, flags, gpus",
    [
        ("auto", 0, "auto", 4, BF16_CPU, []),  # more cores: not measured
        ("auto", 0, "auto", 2, AVX2_CPU, []),  # float32 on an AVX2-only CPU
        ("mixed_bfloat16", 0, "auto", 2, AVX2_CPU, []),  # emulated bf16
        ("float32", 0, "auto", 2, BF16_CPU, []),  # asked for float32
        ("auto", 2, "auto", 2, BF16_CPU, []),  # logical CPU devices
        ("auto", 0, "multi_worker_mirrored", 2, BF16_CPU, []),
        ("auto", 0, "auto", 2, BF16_CPU, ["GPU:0"]),
    ],
)  # fmt: skip
def test_everywhere_else_tensorflow_keeps_its_default(precision, num_cpu_devices, strategy, cores, flags, gpus):
    threads, reason = choose_intra_op_threads(precision, num_cpu_devices, strategy, cpu_count=cores, cpu_flags=flags,
                                              gpus=gpus)  # fmt: skip
    assert threads is None
    assert reason.startswith("TensorFlow's default")


def configure_in_a_fresh_process(environment):
    code = (
        "import tensorflow as tf\n"
        "from tf_transformer.training.threads import configure_intra_op_threads\n"
        "print(configure_intra_op_threads('auto', cpu_count=2, cpu_flags={'avx512_bf16'}, gpus=[]))\n"
        "print(tf.config.threading.get_intra_op_parallelism_threads())\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env=environment)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip().splitlines()


def test_the_choice_is_set_before_tensorflow_starts_its_devices():
    environment = {k: v for k, v in os.environ.items() if k != "TF_NUM_INTRAOP_THREADS"}
    line, threads = configure_in_a_fresh_process(environment)
    assert line.startswith("1 an op (auto: 2 cores training in bf16")
    assert threads == "1"


def test_the_environments_setting_is_left_alone():
    line, threads = configure_in_a_fresh_process(dict(os.environ, TF_NUM_INTRAOP_THREADS="2"))
    assert line == "2 an op, as the environment sets it (TF_NUM_INTRAOP_THREADS)"
    assert threads == "0"  # TensorFlow reads the variable itself when it starts
