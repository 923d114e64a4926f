"""--mixed_precision=auto of the decoding commands chooses as tft-train does, by the CPU's flags (a fake
/proc/cpuinfo here), and int8 weights make it float32: the flag module resolved in a child process (importing it
defines the flag in absl's global FLAGS), with no GPU visible."""

import json
import os
import subprocess
import sys

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
# argv[1]: a JSON list of [cpuinfo path, --quantize value, flags]; prints [policy, Keras' global policy] for each.
CHILD = r"""
import json, logging, sys
from absl import flags
import keras
from tf_transformer.cli import _precision_flag
from tf_transformer.training import precision
logging.basicConfig(level=logging.INFO)  # the commands log through absl's handler; here through logging's
results = []
for cpuinfo, quantize, argv in json.loads(sys.argv[1]):
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["child", *argv])
    precision.CPUINFO = cpuinfo
    results.append([_precision_flag.apply(quantize), keras.config.dtype_policy().name])
print(json.dumps(results))
"""


def test_auto_is_bf16_exactly_where_the_cpu_computes_it_and_the_flag_forces_either(tmp_path):
    cpus = {}
    for name, flags in [("avx512_bf16", "fpu avx2 avx512f avx512_bf16"), ("amx", "fpu avx2 amx_tile amx_bf16"),
                        ("avx2", "fpu avx avx2 fma")]:  # fmt: skip
        cpus[name] = tmp_path / name
        cpus[name].write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    missing = str(tmp_path / "missing")
    cases = [
        (cpus["avx512_bf16"], "none", [], "mixed_bfloat16", "auto: the CPU computes bf16 natively (avx512_bf16)"),
        (cpus["amx"], "none", ["--mixed_precision=auto"], "mixed_bfloat16", "(amx_bf16)"),
        (cpus["avx2"], "none", [], "float32", "auto: the CPU has neither avx512_bf16 nor amx_bf16"),
        (missing, "none", [], "float32", "auto: the CPU's features are unknown"),
        (cpus["avx512_bf16"], "int8", [], "float32", "auto: --quantize=int8 weights compute in float32"),
        (cpus["avx512_bf16"], "none", ["--mixed_precision=float32"], "float32", "float32 (as requested)"),
        (cpus["avx2"], "none", ["--mixed_precision=mixed_bfloat16"], "mixed_bfloat16", "mixed_bfloat16 (as requested)"),
    ]
    arguments = json.dumps([[str(cpuinfo), quantize, argv] for cpuinfo, quantize, argv, *_ in cases])
    result = subprocess.run([sys.executable, "-c", CHILD, arguments], capture_output=True, text=True, timeout=300,
                            env=ENV)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    resolved = json.loads(result.stdout.strip().splitlines()[-1])
    assert resolved == [[policy, policy] for *_, policy, _ in cases]  # returned, and Keras' global policy
    logged = [line.split("Precision: ", 1)[1] for line in result.stderr.splitlines() if "Precision: " in line]
    assert len(logged) == len(cases)  # one line each
    for line, (*_, policy, reason) in zip(logged, cases, strict=True):
        assert line.startswith(f"{policy} (") and reason in line, line
    # And the path, graph mode, with its reason (benchmarks/NOTES.md entry 32), one line each.
    paths = [line.split("Path: ", 1)[1] for line in result.stderr.splitlines() if "Path: " in line]
    # (Read from the log, not imported: importing the flag module here would define --mixed_precision in this
    # worker's absl FLAGS, which tft-train's module defines too.)
    assert len(paths) == len(cases) and len(set(paths)) == 1, paths
    assert paths[0].startswith("graph mode, not XLA (") and "benchmarks/NOTES.md entry 32" in paths[0], paths[0]
