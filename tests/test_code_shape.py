"""The package's shape rules (issue 39, "one change, one place"), read from the source with `ast`: no function
longer than a reader can hold, one home for each default and for Keras/TensorFlow internals, no monkeypatching in
library code, and the commands named as users run them."""

import ast
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "tf_transformer"
SOURCES = sorted(PACKAGE.rglob("*.py"))
MAX_FUNCTION_LINES = 80
# Private Keras / TensorFlow names: each use is fenced in one module (its test names what an upgrade broke).
INTERNALS = re.compile(r"tensorflow\.python|keras\.src|_flatten_layers|\._tracker\b|\._kernel\b|_is_quantized")
# tf-text's private use has its own fence (data/_tf_text_private.py and tests/data/test_tf_text_private.py).
TF_TEXT_FENCE = PACKAGE / "data" / "_tf_text_private.py"


def relative(path):
    return str(path.relative_to(PACKAGE.parent))


def code_lines(tree, text):
    """Line numbers that hold code: docstrings (of the module, classes and functions), comments and blank lines
    left out."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    return {
        number
        for number, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.strip().startswith("#") and number not in docstrings
    }


def function_lengths(path):
    """(name, first line, lines of code) of each function of `path` that is not nested in another function
    (a nested function counts in its parent)."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    code = code_lines(tree, text)
    found = []

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = sum(1 for number in range(child.lineno, child.end_lineno + 1) if number in code)
                found.append((child.name, child.lineno, lines))
            elif isinstance(child, ast.ClassDef):
                visit(child)

    visit(tree)
    return found


def test_the_line_counter_counts_code_only(tmp_path):
    path = tmp_path / "example.py"
    path.write_text(
        'def outer(x):\n    """Doc.\n\n    More doc."""\n    # a comment\n\n    def inner(y):\n'
        '        """Inner doc."""\n        return y\n\n    return inner(x)\n\n\nclass A:\n    def method(self):\n'
        "        return 1\n",
        encoding="utf-8",
    )
    assert function_lengths(path) == [("outer", 1, 4), ("method", 15, 2)]


def test_no_function_is_longer_than_80_lines_of_code():
    long = [
        f"{relative(path)}:{line} {name} ({lines} lines)"
        for path in SOURCES
        for name, line, lines in function_lengths(path)
        if lines > MAX_FUNCTION_LINES
    ]
    assert not long, f"split into named steps (at most {MAX_FUNCTION_LINES} lines of code each): {long}"


def test_the_length_penalty_default_is_written_once():
    defaults = [
        f"{relative(path)}:{number}"
        for path in SOURCES
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"length_penalty\b[^=\n]*(=|:)\s*0\.6\b", line.split("#")[0])
    ]
    assert len(defaults) == 1, defaults


def test_keras_and_tensorflow_internals_live_in_one_module():
    users = sorted(
        {relative(path) for path in SOURCES if path != TF_TEXT_FENCE and INTERNALS.search(path.read_text("utf-8"))}
    )
    assert len(users) <= 1, f"private Keras/TensorFlow names outside one fence module: {users}"


@pytest.mark.parametrize("pattern", [r"\bmock\b", r"patch\(", r"patch\.object", r"monkeypatch"])
def test_library_code_patches_nothing(pattern):
    users = [relative(path) for path in SOURCES if re.search(pattern, path.read_text(encoding="utf-8"))]
    assert not users, users


def test_library_code_names_the_commands_not_the_tool_scripts():
    script = re.compile(r"(?<![\w/])tools/\w+\.py")  # tests/tools/... is a test's path, not a script
    users = [relative(path) for path in SOURCES if script.search(path.read_text(encoding="utf-8"))]
    assert not users, f"name the tft-* command instead: {users}"
