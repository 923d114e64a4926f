"""Lazy package attributes (PEP 562), so that `import tf_transformer` and the console commands' --help start
without TensorFlow: a package's `__init__` names its public attributes in a `_LAZY` dict, and the module
defining each is imported on first use. Imports nothing of the package.

`_LAZY` maps a public name to the module that defines it; a name that is a submodule and defines nothing of
that name (`tf_transformer.data`, `tf_transformer.layers.masking`) is that module. tests/test_imports.py
reads these dicts as import edges, so a lazy attribute cannot hide an import cycle.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Callable, Dict, List, Tuple


class _LazyPackage(types.ModuleType):
    def __setattr__(self, name, value):
        # Python's import binds a submodule, once loaded, to its name in the package: that must not replace a
        # public attribute of the same name (decoding.beam_search is the function of decoding/beam_search.py).
        lazy = self.__dict__.get("_LAZY", {})
        if (
            name in lazy
            and isinstance(value, types.ModuleType)
            and value.__name__ == lazy[name] == f"{self.__name__}.{name}"
            and hasattr(value, name)
        ):
            value = getattr(value, name)
        super().__setattr__(name, value)


def lazy_attributes(namespace: dict, attributes: Dict[str, str]) -> Tuple[Callable, Callable]:
    """`(__getattr__, __dir__)` for the package whose globals are `namespace` (call it as
    `__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)`): a name of `attributes` imports its module on
    first use and is then kept in the package; any other name that is a submodule of the package
    (`tf_transformer.data.vocab`) is imported as `import` would."""
    package = namespace["__name__"]
    sys.modules[package].__class__ = _LazyPackage

    def __getattr__(name: str):
        module_name = attributes.get(name, f"{package}.{name}")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if name in attributes or error.name != module_name:
                raise  # a broken import inside the package, not a missing attribute
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(module, name, module) if module_name == f"{package}.{name}" else getattr(module, name)
        namespace[name] = value
        return value

    def __dir__() -> List[str]:
        return sorted(set(namespace) | set(attributes))

    return __getattr__, __dir__
