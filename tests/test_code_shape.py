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


def test_layers_and_models_name_tensorflow_in_one_fenced_module():
    # Issue 57: the layers and models run on every Keras backend; `layers/_tf_fast.py` holds the TensorFlow-only
    # fast paths (taken under that backend alone). The same pattern as the issue's grep, comments included.
    mentions = re.compile(r"tensorflow|\btf\.")
    users = sorted(
        relative(path)
        for folder in ("layers", "models")
        for path in (PACKAGE / folder).rglob("*.py")
        if mentions.search(path.read_text(encoding="utf-8"))
    )
    assert users == ["tf_transformer/layers/_tf_fast.py"], users


@pytest.mark.parametrize("pattern", [r"\bmock\b", r"patch\(", r"patch\.object", r"monkeypatch"])
def test_library_code_patches_nothing(pattern):
    users = [relative(path) for path in SOURCES if re.search(pattern, path.read_text(encoding="utf-8"))]
    assert not users, users


def test_library_code_names_the_commands_not_the_tool_scripts():
    script = re.compile(r"(?<![\w/])tools/\w+\.py")  # tests/tools/... is a test's path, not a script
    users = [relative(path) for path in SOURCES if script.search(path.read_text(encoding="utf-8"))]
    assert not users, f"name the tft-* command instead: {users}"


# Issue 56, "one concern, one value": decoders and the export take their settings whole (a DecodingSettings, an
# OutputRules, a ServedModel), never spread into positional parameters; beam search lives in a few modules.
MAX_PARAMETERS = 6
SETTINGS_TAKERS = ("decoding", "export")
BEAM_SEARCH = "tf_transformer.decoding.beam_search"
MAX_BEAM_SEARCH_MODULES = 5


def parameter_counts(path):
    """(name, first line, parameters) of every function of `path`, nested ones and methods included: every
    parameter (*args and **kwargs too) but a method's self or cls."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            names = [arg.arg for arg in arguments.posonlyargs + arguments.args + arguments.kwonlyargs]
            names += [arg.arg for arg in (arguments.vararg, arguments.kwarg) if arg is not None]
            if names[:1] in (["self"], ["cls"]):
                names = names[1:]
            found.append((node.name, node.lineno, len(names)))
    return found


def test_the_parameter_counter_counts_every_kind_of_parameter(tmp_path):
    path = tmp_path / "example.py"
    path.write_text(
        "def f(a, /, b, *args, c, d=1, **kwargs):\n    def inner(x):\n        return x\n\n\n"
        "class A:\n    def method(self, a):\n        pass\n\n    @classmethod\n    def make(cls):\n        pass\n",
        encoding="utf-8",
    )
    assert sorted(parameter_counts(path)) == [("f", 1, 6), ("inner", 2, 1), ("make", 11, 0), ("method", 7, 1)]


def test_no_decoding_or_export_function_takes_more_than_6_parameters():
    wide = [
        f"{relative(path)}:{line} {name} ({count} parameters)"
        for path in SOURCES
        if path.relative_to(PACKAGE).parts[0] in SETTINGS_TAKERS
        for name, line, count in parameter_counts(path)
        if count > MAX_PARAMETERS
    ]
    assert not wide, (
        f"at most {MAX_PARAMETERS} parameters: pass the value whole (DecodingSettings, OutputRules, LengthPlan, "
        f"ServedModel) instead of its fields: {wide}"
    )


def modules_reached(start, modules):
    """The modules of `modules` (dotted name -> path) that importing `start` runs, itself included: every import
    statement followed (function-level ones too), and a package's lazy `_LAZY` table (tf_transformer/_lazy.py)
    when a name is imported from the package. Importing a submodule does not run its package's lazy imports, so
    that implicit edge is left out, as in tests/test_imports.py."""
    reached, pending = set(), [start]
    while pending:
        name = pending.pop()
        if name in reached:
            continue
        reached.add(name)
        for node in ast.walk(ast.parse(modules[name].read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                pending += [alias.name for alias in node.names if alias.name in modules]
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    pending += [submodule] if submodule in modules else [node.module] if node.module in modules else []
            elif isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["_LAZY"]:
                pending += [value.value for value in node.value.values if getattr(value, "value", None) in modules]
    return reached


def test_modules_reached_follows_every_import_and_the_lazy_table(tmp_path):
    sources = {
        "__init__": '_LAZY = {"thing": "pkg.e"}\n',
        "a": "from pkg import b\nimport numpy\n",
        "b": "def f():\n    import pkg.c\n",
        "c": "from pkg.d import name\n",
        "d": "name = 1\n",
        "e": "",
        "f": "from pkg import thing\n",
    }
    modules = {}
    for stem, text in sources.items():
        (tmp_path / f"{stem}.py").write_text(text, encoding="utf-8")
        modules["pkg" if stem == "__init__" else f"pkg.{stem}"] = tmp_path / f"{stem}.py"
    assert modules_reached("pkg.a", modules) == {"pkg.a", "pkg.b", "pkg.c", "pkg.d"}
    assert modules_reached("pkg.f", modules) == {"pkg.f", "pkg", "pkg.e"}


def test_beam_search_spans_at_most_5_modules_of_the_decoding_package():
    decoding = PACKAGE / "decoding"
    modules = {f"tf_transformer.decoding.{path.stem}": path for path in decoding.glob("*.py")}
    modules["tf_transformer.decoding"] = modules.pop("tf_transformer.decoding.__init__")
    reached = sorted(modules_reached(BEAM_SEARCH, modules))
    assert BEAM_SEARCH in reached and "tf_transformer.decoding.settings" in reached
    assert len(reached) <= MAX_BEAM_SEARCH_MODULES, (
        f"beam search imports {len(reached)} modules of tf_transformer/decoding/ (at most "
        f"{MAX_BEAM_SEARCH_MODULES}): {reached}. Fix: keep what only the beam loop needs in its modules."
    )


MAX_MODULE_LINES = 500
# Modules that read top to bottom (issue 56): the entry first, each helper below its first caller.
TOP_DOWN = ("training/trainer.py", "training/fit_loop.py", "training/run_data.py", "training/run_files.py")


def test_no_module_is_longer_than_500_lines():
    long = [
        f"{relative(path)} ({count} lines)"
        for path in SOURCES
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, f"split by concern into modules of at most {MAX_MODULE_LINES} lines: {long}"


def test_the_trainer_starts_with_train():
    tree = ast.parse((PACKAGE / "training" / "trainer.py").read_text(encoding="utf-8"))
    definitions = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
    assert definitions[0] == "train", f"train() first, its phases below it in the order they run: {definitions}"


def defined_before_first_use(path):
    """The top-level functions and classes of `path` defined above the first line that names them (decorators,
    annotations and calls alike); one never named in the module is an entry point and may stand anywhere."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defined = {
        node.name: node.lineno
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    first_use = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in defined:
            first_use[node.id] = min(first_use.get(node.id, node.lineno), node.lineno)
    return sorted(name for name, line in defined.items() if name in first_use and line < first_use[name])


def test_the_defined_before_use_check_finds_a_helper_above_its_caller(tmp_path):
    path = tmp_path / "example.py"
    path.write_text("def _helper():\n    return 1\n\n\ndef entry():\n    return _helper()\n", encoding="utf-8")
    assert defined_before_first_use(path) == ["_helper"]
    path.write_text("def entry():\n    return _helper()\n\n\ndef _helper():\n    return 1\n", encoding="utf-8")
    assert defined_before_first_use(path) == []


@pytest.mark.parametrize("module", TOP_DOWN)
def test_the_training_run_reads_top_to_bottom(module):
    above = defined_before_first_use(PACKAGE / module)
    assert not above, f"{module}: move each below its first caller: {above}"


def test_training_hands_no_private_dataclasses_along():
    private = [
        f"{relative(path)}:{node.lineno} {node.name}"
        for path in sorted((PACKAGE / "training").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
        and node.name.startswith("_")
        and any("dataclass" in ast.unparse(decorator) for decorator in node.decorator_list)
    ]
    assert not private, f"hand on meaningful public values (training/state.py), not private bundles: {private}"


# Issue 56: docstrings state contracts and reasons, not a retelling of the code. A public entry point may carry a
# longer docstring when it holds a runnable example (">>>" or an "Example:" block).
EXAMPLE = re.compile(r">>>|^\s*Example:", re.MULTILINE)


def docstring_and_code_lines(path):
    """(name, first line, docstring lines, code lines, has an example) of every function of `path` with a
    docstring, nested ones and methods included. Code lines run from the first statement after the docstring to
    the end of the last one (comments and blank lines between them count: they are read with the code)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(node) is not None:
            docstring, body = node.body[0], node.body[1:]
            code = body[-1].end_lineno - body[0].lineno + 1 if body else 0
            has_example = bool(EXAMPLE.search(ast.get_docstring(node)))
            found.append((node.name, node.lineno, docstring.end_lineno - docstring.lineno + 1, code, has_example))
    return found


def test_the_docstring_counter_counts_docstring_and_code_lines(tmp_path):
    path = tmp_path / "example.py"
    path.write_text(
        'def f(x):\n    """Doc.\n\n    More doc."""\n    y = x\n    # why\n    return y\n\n\n'
        'def g():\n    """Doc.\n\n    Example:\n        g()\n    """\n    return 1\n\n\n'
        'class A:\n    def method(self):\n        """Doc.\n\n        >>> A().method()\n        1\n        """\n'
        "        return 1\n\n    def bare(self):\n        return 2\n",
        encoding="utf-8",
    )
    assert docstring_and_code_lines(path) == [
        ("f", 1, 3, 3, False),
        ("g", 10, 5, 1, True),
        ("method", 20, 5, 1, True),
    ]


def test_no_function_has_more_docstring_than_code_unless_it_carries_an_example():
    wordy = [
        f"{relative(path)}:{line} {name} ({doc} docstring lines, {code} of code)"
        for path in SOURCES
        for name, line, doc, code, has_example in docstring_and_code_lines(path)
        if doc > code and not has_example
    ]
    assert not wordy, (
        "cut each docstring to its contract (arguments, shapes, returns, errors) and the reasons the code cannot "
        f"say, or give a public entry point a short example ('>>>' or 'Example:'): {wordy}"
    )


# Issue 56: one writer of each file of the model directory. A writer is a function that names the file's constant
# (tf_transformer/model_dir.py) and calls a writing function; export/ writes its own SavedModel folder, not a model
# directory.
MODEL_DIR_FILES = ("CONFIG_FILE", "DATA_CONFIG_FILE", "TRAIN_CONFIG_FILE", "DATA_REPORT_FILE", "DECODING_FILE")
WRITING_CALLS = {"write_atomically", "to_json", "write_text", "write_bytes", "open", "dump"}


def model_dir_writers(sources):
    """{constant: [file:function, ...]} of the functions of `sources` that name a model-directory file's constant and
    call a writing function."""
    writers = {name: [] for name in MODEL_DIR_FILES}
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            names = {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name)}
            calls = {
                getattr(sub.func, "id", getattr(sub.func, "attr", None))
                for sub in ast.walk(node)
                if isinstance(sub, ast.Call)
            }
            if calls & WRITING_CALLS:
                for name in MODEL_DIR_FILES:
                    if name in names:
                        writers[name].append(f"{path.name}:{node.name}")
    return writers


def test_the_writer_counter_finds_each_writer(tmp_path):
    source = tmp_path / "example.py"
    source.write_text(
        "def save(d):\n    write_atomically(d / CONFIG_FILE, 'x')\n"
        "def also(d):\n    (d / CONFIG_FILE).write_text('y')\n"
        "def read(d):\n    return (d / DECODING_FILE).read_text()\n"
    )
    writers = model_dir_writers([source])
    assert writers["CONFIG_FILE"] == ["example.py:save", "example.py:also"] and writers["DECODING_FILE"] == []


def test_each_file_of_the_model_directory_has_one_writer():
    sources = [path for path in SOURCES if "export" not in path.relative_to(PACKAGE).parts]
    writers = model_dir_writers(sources)
    assert {name: len(found) for name, found in writers.items()} == dict.fromkeys(MODEL_DIR_FILES, 1), writers
