"""The backend-free tests stay so: their modules import no TensorFlow, and each test that they keep to TensorFlow
says why on its marker's line."""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_imports_no_tensorflow_at_module_level(backend_free_module):
    path = backend_free_module
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        assert not any(name.split(".")[0] == "tensorflow" for name in names), (
            f"{path.relative_to(ROOT)}:{node.lineno} imports TensorFlow, but it runs under every Keras backend. "
            "Fix: keras.ops and NumPy; a test of what is TensorFlow's by design imports it inside, marked "
            "@pytest.mark.tensorflow_only  # why"
        )


def test_each_tensorflow_only_marker_says_why(backend_free_module):
    path = backend_free_module
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if "pytest.mark.tensorflow_only" in line:
            assert re.search(r"tensorflow_only\s+#\s*\S", line), (
                f"{path.relative_to(ROOT)}:{number}: a tensorflow_only marker without a reason. Fix: say on its line "
                "what TensorFlow-only feature the test tests (`@pytest.mark.tensorflow_only  # tf.while_loop ...`)."
            )
