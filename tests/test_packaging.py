"""The package's file list and its installed presets stay in step with the source tree."""

import configparser
import importlib.metadata
import os
import pathlib
import subprocess
import sys

from packaging.requirements import Requirement

import tf_transformer as tft

ROOT = pathlib.Path(__file__).resolve().parent.parent


def setup_cfg() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return parser


def test_every_subpackage_is_listed_in_setup_cfg():
    parser = setup_cfg()
    listed = set(parser["options"]["packages"].split())
    on_disk = {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "tf_transformer").rglob("__init__.py")}
    assert on_disk | {"tf_transformer.configs"} == listed


def test_the_installed_packages_are_the_versions_setup_cfg_pins():
    # A pin is there for a reason (ml-dtypes<0.7: over a second of every TensorFlow start): an environment
    # that holds other versions than setup.cfg's is not the one the suite and the measurements ran on.
    parser = setup_cfg()
    lines = parser["options"]["install_requires"] + parser["options.extras_require"]["test"]
    requirements = [Requirement(line) for line in lines.splitlines() if line.strip() and not line.startswith("#")]
    wrong = [
        f"{requirement} (installed: {importlib.metadata.version(requirement.name)})"
        for requirement in requirements
        if not requirement.specifier.contains(importlib.metadata.version(requirement.name), prereleases=True)
    ]
    assert not wrong, f"installed versions outside setup.cfg's pins: {wrong}. Fix: pip install -e '.[test]'"


def test_every_preset_file_is_reachable_and_valid():
    on_disk = sorted(path.stem for path in (ROOT / "configs").glob("*.json"))
    assert tft.list_presets() == on_disk
    for name in on_disk:
        tft.TransformerConfig.from_preset(name)


def test_ci_runs_exactly_the_readmes_test_command():
    readme = (ROOT / "README.md").read_text()
    commands = [line for line in readme.splitlines() if line.startswith("python3 -m venv")]
    assert len(commands) == 2, "README opens with two commands: the main job and the tests"
    test_command = commands[1]
    assert "pytest" in test_command
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci_lines


def test_every_binary_is_a_console_command_and_a_tools_script():
    parser = setup_cfg()
    lines = parser["options.entry_points"]["console_scripts"].strip().splitlines()
    commands = dict(line.replace(" ", "").split("=") for line in lines)
    # Modules starting with "_" (__init__, shared flag definitions) are helpers, not binaries.
    cli_modules = (ROOT / "tf_transformer" / "cli").glob("*.py")
    binaries = sorted(path.stem for path in cli_modules if not path.stem.startswith("_"))
    assert commands == {f"tft-{name.replace('_', '-')}": f"tf_transformer.cli.{name}:run" for name in binaries}
    for name in binaries:
        source = (ROOT / "tf_transformer" / "cli" / f"{name}.py").read_text()
        assert "\ndef main(argv" in source and "\ndef run():" in source, name  # main(argv) or main(argv, checked)
        # tools/X.py runs the same binary in a checkout.
        assert f"from tf_transformer.cli.{name} import run\n" in (ROOT / "tools" / f"{name}.py").read_text(), name
    assert sorted(path.stem for path in (ROOT / "tools").glob("*.py")) == binaries


def test_a_tools_script_runs_the_checkouts_package_from_anywhere(tmp_path):
    # Another tf_transformer ahead of the checkout on sys.path, as an installed copy of another version is: the
    # scripts must still run the checkout's, whatever the working directory.
    other = tmp_path / "site" / "tf_transformer"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("raise SystemExit('imported the other tf_transformer, not the checkout')\n")
    env = {**os.environ, "PYTHONPATH": str(other.parent)}
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "demo.py"), "--help"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert "Trains a small Transformer" in result.stdout, result.stderr[-3000:]  # tft-demo's usage: absl's --help
    # The others are the same script but for the binary's name.
    demo = (ROOT / "tools" / "demo.py").read_text()
    for path in sorted((ROOT / "tools").glob("*.py")):
        name = path.stem
        expected = demo.replace("cli/demo.py", f"cli/{name}.py").replace("cli.demo ", f"cli.{name} ")
        expected = expected.replace("`tft-demo`", f"`tft-{name.replace('_', '-')}`")
        assert path.read_text() == expected, f"{path.relative_to(ROOT)} is not tools/demo.py for its binary"
