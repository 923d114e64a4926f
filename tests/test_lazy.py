"""The package's lazy attributes (tf_transformer/_lazy.py) behave as the eager imports did."""

import importlib
import subprocess
import sys

import pytest

PACKAGES = [
    "tf_transformer", "tf_transformer.data", "tf_transformer.decoding", "tf_transformer.evaluation",
    "tf_transformer.export", "tf_transformer.layers", "tf_transformer.models", "tf_transformer.training",
]  # fmt: skip


@pytest.mark.parametrize("name", PACKAGES)
def test_every_public_name_resolves_and_is_listed(name):
    package = importlib.import_module(name)
    for public in package.__all__:
        assert getattr(package, public) is not None, public
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        package.not_a_name  # noqa: B018


def test_a_function_named_as_its_module_stays_the_function():
    # Importing translation.py imports the module decoding/beam_search.py, which Python then binds in the
    # package: decoding.beam_search must stay the function, as with the eager imports. A fresh interpreter, so
    # that the module is first imported that way round.
    code = (
        "import tf_transformer.decoding.translation\n"
        "from tf_transformer.decoding import beam_search\n"
        "import tf_transformer as tft\n"
        "print(callable(beam_search), type(tft.decoding.beam_search).__name__, tft.layers.masking.__name__)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["True", "function", "tf_transformer.layers.masking"]
