"""The console commands `pip install .` puts beside the Python interpreter (tft-train, ...): each is its binary,
with the binary's own usage and flags in --help both as a command and as tools/*.py; tft-train trains. And only
the binaries (tf_transformer/cli/) import tf_transformer.cli and absl.flags.

Nothing is installed here: the commands are the ones of the environment the tests run in.
"""

import ast
import concurrent.futures
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tf_transformer"
BIN = pathlib.Path(sys.executable).parent  # not resolved: a venv's python is a link into the base install
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
# As a user's shell: TF_CPP_MIN_LOG_LEVEL unset (tests/conftest.py sets it for the test process).
QUIET_ENV = {name: value for name, value in os.environ.items() if name != "TF_CPP_MIN_LOG_LEVEL"}
# TensorFlow's C++ log: absl's `I0000 00:00:...  file.cc:31] ...` lines and its known start-up notices.
TF_LOG_LINE = re.compile(
    r"^\S+\.cc:\d+\]|^[IWEF]\d{4} .*\.cc:\d+\]|oneDNN custom operations|cuInit|absl::InitializeLog|cpu_feature_guard",
    re.M,
)

# Command -> (its module in tf_transformer/cli/, a few of its own flags).
COMMANDS = {
    "tft-train": ("train", ["config", "override", "dataset", "model_dir", "train_steps", "checkpoint_every"]),
    "tft-translate": ("translate", ["model_dir", "saved_model", "beam_size", "n_best", "input", "output"]),
    "tft-evaluate": ("evaluate", ["references", "hypotheses", "sources", "average_last"]),
    "tft-export": ("export", ["model_dir", "export_dir", "version", "n_best", "average_last", "tf_log"]),
    "tft-average-checkpoints": ("average_checkpoints", ["model_dir", "num_checkpoints", "output_dir"]),
    "tft-build-vocab": ("build_vocab", ["data_config", "output_dir", "vocab_type", "spm_model_type"]),
    "tft-plot-attention": ("plot_attention", ["model_dir", "sentence", "target", "layers", "heads", "dpi"]),
    "tft-serving-client": ("serving_client", ["model_name", "protocol", "rest_port", "grpc_port", "signature"]),
    "tft-demo": ("demo", ["task", "steps", "batch_size"]),
    "tft-score": ("score", ["model_dir", "sources", "targets", "output", "average_last", "batch_tokens"]),
}
# absl's --help and --helpfull end the program with status 1 (before main), as tools/*.py always did.
HELP_STATUS = 1


def command(name):
    path = BIN / name
    if not path.is_file():
        pytest.fail(
            f"{path} is missing: the package is not pip-installed into the environment of {sys.executable} (or "
            "setup.cfg lost its console_scripts). Fix: pip install . in that environment (`pip install -e .` "
            "works too)."
        )
    return str(path)


def usage_line(module):
    """The binary's first usage example, as its module docstring (the --help text) gives it."""
    docstring = ast.get_docstring(ast.parse((PACKAGE / "cli" / f"{module}.py").read_text(encoding="utf-8")))
    return next(line.strip() for line in docstring.splitlines() if line.strip().startswith("tft-"))


def run_all(commands, parallel=2, env=ENV):
    """Runs the commands `parallel` at a time (--help imports no TensorFlow: a tenth of a second each), in the
    checkout: {key: CompletedProcess}."""

    def run(arguments):
        return subprocess.run(arguments, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)

    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        return dict(zip(commands, pool.map(run, commands.values()), strict=True))


def flags_section(help_text, script):
    """The flags absl lists under `script:` (the main module's), up to the next module or the end."""
    lines = help_text.splitlines()
    header = f"{script}:"
    assert header in lines, f"no {header!r} section in:\n{help_text[-3000:]}"
    section = []
    for line in lines[lines.index(header) + 1 :]:
        if line and not line.startswith(" "):
            break
        section.append(line)
    return "\n".join(section)


@pytest.fixture(scope="module")
def helps():
    """--help of every command, --help/--helpfull of two binaries both as a command and as tools/*.py (run in the
    checkout: sys.argv[0] is then tools/X.py, as users type it), and a bad flag value."""
    commands = {(name, "--help"): [command(name), "--help"] for name in COMMANDS}
    commands[("tft-train", "--helpfull")] = [command("tft-train"), "--helpfull"]
    for tool, option in (("train", "--help"), ("train", "--helpfull"), ("translate", "--help")):
        commands[(f"tools/{tool}.py", option)] = [sys.executable, f"tools/{tool}.py", option]
    commands[("tft-average-checkpoints", "bad flag")] = [
        command("tft-average-checkpoints"), "--model_dir=unused", "--num_checkpoints=two"
    ]  # fmt: skip
    return run_all(commands)


def help_of(helps, key):
    """The stdout of a --help run, once its status is absl's for --help."""
    result = helps[key]
    assert result.returncode == HELP_STATUS, f"{key}: status {result.returncode}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_shows_its_usage_and_its_own_flags(helps, name):
    module, own_flags = COMMANDS[name]
    stdout = help_of(helps, (name, "--help"))
    assert usage_line(module) in stdout, stdout[-3000:]  # the module docstring is the usage text
    listed = flags_section(stdout, command(name))
    for flag in own_flags:
        assert f"--{flag}:" in listed or f"--[no]{flag}:" in listed, f"--{flag} not in {name} --help:\n{listed}"
    assert "Try --helpfull" in stdout and "absl.app:" not in stdout  # --help: the binary's own flags only


@pytest.mark.parametrize("tool, name", [("train", "tft-train"), ("translate", "tft-translate")])
def test_the_tool_script_shows_the_same_help_as_the_command(helps, tool, name):
    # The same text, but for the script's name over the flags.
    expected = help_of(helps, (name, "--help")).replace(f"\n{command(name)}:\n", f"\ntools/{tool}.py:\n")
    assert help_of(helps, (f"tools/{tool}.py", "--help")) == expected


@pytest.mark.parametrize("script", ["tools/train.py", "tft-train"])
def test_helpfull_lists_the_binarys_flags_first(helps, script):
    stdout = help_of(helps, (script, "--helpfull"))
    name = script if script.startswith("tools/") else command(script)
    listed = flags_section(stdout, name)
    for flag in COMMANDS["tft-train"][1]:
        assert f"--{flag}:" in listed, f"--{flag} not under {name}:\n{listed}"
    lines = stdout.splitlines()
    modules = [line for line in lines[lines.index("flags:") + 1 :] if line.endswith(":") and line[:1] not in " "]
    assert modules[0] == f"{name}:" and "absl.app:" in modules, modules  # the binary's flags first
    assert "tf_transformer.cli.train:" not in modules


def test_help_and_the_binaries_modules_import_no_tensorflow(helps):
    # --help prints before main(), so a TensorFlow import there could only come from the modules: importing a
    # binary's module (one per interpreter: each defines its flags) must leave TensorFlow unimported, and
    # importing it (or the library) must not touch the user's logging settings.
    code = (
        "import importlib, os, sys\n"
        "importlib.import_module(sys.argv[1])\n"
        "print(sorted(name for name in ('tensorflow', 'keras', 'tensorflow_text') if name in sys.modules))\n"
        "print(os.environ.get('TF_CPP_MIN_LOG_LEVEL'))\n"
    )
    modules = [f"tf_transformer.cli.{module}" for module, _ in COMMANDS.values()] + ["tf_transformer"]
    commands = {module: [sys.executable, "-c", code, module] for module in modules}
    for module, result in run_all(commands, env=QUIET_ENV).items():
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.split("\n")[:2] == ["[]", "None"], f"{module}: {result.stdout}"
    assert all(helps[(name, "--help")].returncode == HELP_STATUS for name in COMMANDS)


def test_a_bad_flag_value_fails_as_the_tool_did(helps):
    result = helps[("tft-average-checkpoints", "bad flag")]
    assert result.returncode == 1
    assert "--num_checkpoints" in result.stderr and "two" in result.stderr


def test_tft_train_trains_a_tiny_model(tmp_path, small_corpus):
    model_dir = tmp_path / "run"
    result = subprocess.run(
        [
            command("tft-train"), "--config=tiny", "--override=d_model=32", "--override=d_ff=64",
            "--override=num_encoder_layers=1", "--override=num_decoder_layers=1", "--dataset=files",
            f"--train_source={small_corpus['train_en']}", f"--train_target={small_corpus['train_de']}",
            f"--model_dir={model_dir}", "--vocab_size=500", "--batch_tokens=1024", "--max_length=48",
            "--train_steps=2", "--checkpoint_every=2", "--seed=1",
            "--override=decode_length_penalty=1.5", "--override=decode_average_last=2",
        ],
        capture_output=True, text=True, timeout=300, env=QUIET_ENV, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Trained steps 0 -> 2" in result.stdout
    # TF_CPP_MIN_LOG_LEVEL unset, as in a user's shell: not one line of TensorFlow's C++ log.
    assert not TF_LOG_LINE.search(result.stdout + result.stderr), result.stderr[-3000:]
    # The model config's decoding settings (here from --override) become the model directory's decoding.json.
    decoding = json.loads((model_dir / "decoding.json").read_text())
    assert decoding == {"beam_size": 4, "length_penalty": 1.5, "method": "beam", "average_last": 2,
                        "no_repeat_ngram_size": 4, "max_decode_length": "1.5x+10"}  # fmt: skip
    assert (model_dir / "checkpoints" / "ckpt-2.index").is_file()
    assert (model_dir / "config.json").is_file() and (model_dir / "vocab" / "tokenizer.json").is_file()
    # --mixed_precision=auto, the default: the run logs and records the policy it chose and why.
    saved = json.loads((model_dir / "train_config.json").read_text())
    assert saved["mixed_precision_requested"] == "auto" and saved["mixed_precision"] in ("float32", "mixed_bfloat16")
    assert f"Precision: {saved['mixed_precision']} ({saved['mixed_precision_reason']})" in result.stderr


def imports_of(source, module):
    """The modules the code of `module` imports anywhere (functions included), as dotted names: `from a import b`
    gives a and a.b (b may be a module); relative imports are resolved."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative to the module's package (a package's __init__ is its own package)
                parts = module.split(".")
                base = ".".join(parts[: len(parts) - node.level] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def module_name(path):
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)  # a package's is its_name.__init__


def test_imports_of_sees_every_kind_of_import():
    source = """
import absl.flags
from tf_transformer import cli
def lazy():
    from ..cli.train import run
    from . import data
"""
    names = imports_of(source, "tf_transformer.training.trainer")
    assert {"absl.flags", "tf_transformer.cli", "tf_transformer.cli.train", "tf_transformer.training.data"} <= names
    # In a package's __init__, `from . import x` is the package's own x.
    assert "tf_transformer.data.vocab" in imports_of("from . import vocab", "tf_transformer.data.__init__")


def test_only_the_binaries_import_tf_transformer_cli_and_absl_flags():
    library = [path for path in sorted(PACKAGE.rglob("*.py")) if path.relative_to(PACKAGE).parts[0] != "cli"]
    assert len(library) > 20
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in library
        for name in sorted(imports_of(path.read_text(encoding="utf-8"), module_name(path)))
        if name.split(".")[:2] in (["tf_transformer", "cli"], ["absl", "flags"])
    ]
    assert not offenders, (
        "\n".join(offenders) + "\nFix: the library takes arguments; absl flags and their parsing belong in "
        "tf_transformer/cli/ (importing a module there defines its flags in absl's global FLAGS)."
    )


def test_the_quiet_start_drops_tensorflows_start_up_notices_but_keeps_errors():
    from tf_transformer.cli import _STARTUP_NOISE

    dropped = [
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        "I0000 00:00:1795614082.636414    2998 cudart_stub.cc:31] Could not find cuda drivers on your machine.",
        "I0000 00:00:1795614082.707659    2998 cpu_feature_guard.cc:227] This TensorFlow binary is optimized ...",
        "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow ...",
        "E0000 00:00:1795614086.364636    2998 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error",
        "2026-11-25 13:40:00.123456: I tensorflow/core/util/port.cc:153] oneDNN custom operations are on.",
    ]
    kept = [
        "E0000 00:00:1795614086.364636    2998 op_kernel.cc:1857] OP_REQUIRES failed at save_restore_v2_ops.cc",
        "/usr/lib/python3/dist-packages/x.py:3: DeprecationWarning: a Python warning",
        "error: model_dir: runs/x is not a folder. Fix: pass the --model_dir that tft-train wrote.",
    ]
    assert [line for line in dropped + kept if not _STARTUP_NOISE.match(line)] == kept
