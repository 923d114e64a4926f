"""The package's modules import each other without a cycle (module-level and function-level imports alike).

A cycle works only while the imports stay in the order that happens to break it (a lazy import, an import at
the end of a module), and breaks at the first innocent reordering; a function-level import hides it until
that function runs. The graph is read from the source with `ast`, so nothing is imported here.
"""

from __future__ import annotations

import ast
import pathlib
from typing import Dict, List, Optional, Set

PACKAGE = "tf_transformer"
ROOT = pathlib.Path(__file__).resolve().parents[1] / PACKAGE


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> Dict[str, pathlib.Path]:
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def imported_modules(name: str, path: pathlib.Path, modules: Dict[str, pathlib.Path]) -> Set[str]:
    """The package modules `name` imports anywhere in its code (functions included).

    `from a.b import c` is an edge to `a.b.c` when that is a module, else to `a.b`. Importing `a.b.c` also
    runs `a/__init__` and `a/b/__init__`; those implicit edges are left out, else every package whose
    `__init__` imports its own submodules would be a cycle. A package's lazy attributes (its module-level
    `_LAZY = {"name": "module", ...}`, see tf_transformer/_lazy.py) are edges to their modules: imported on
    first use, they are imports all the same.
    """
    is_package = path.name == "__init__.py"
    edges = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        elif (
            isinstance(node, ast.Assign)
            and [getattr(target, "id", None) for target in node.targets] == ["_LAZY"]
            and isinstance(node.value, ast.Dict)
        ):
            targets = [value.value for value in node.value.values if isinstance(value, ast.Constant)]
        else:
            continue
        edges.update(target for target in targets if target in modules and target != name)
    return edges


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One cycle of `graph` as [a, b, ..., a], or None (iterative depth-first search)."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: finished
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            successor = next(stack[-1], None)
            if successor is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(successor) == 1:
                return path[path.index(successor) :] + [successor]
            elif successor not in state:
                state[successor] = 1
                path.append(successor)
                stack.append(iter(sorted(graph[successor])))
    return None


def import_graph() -> Dict[str, Set[str]]:
    modules = package_modules()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def test_the_graph_sees_the_package():
    graph = import_graph()
    assert len(graph) > 20 and f"{PACKAGE}.data.corpus" in graph
    assert f"{PACKAGE}.decoding.loop" in graph[f"{PACKAGE}.decoding.greedy"]
    # The lazy attributes of the package __init__ files are edges too.
    assert f"{PACKAGE}.models" in graph[PACKAGE] and f"{PACKAGE}.decoding.text" in graph[f"{PACKAGE}.decoding"]


def test_every_kind_of_import_is_an_edge(tmp_path):
    path = tmp_path / "c.py"
    path.write_text(
        "import pkg.a\n"
        "from pkg import b as alias, not_a_module\n"
        "from .d import name\n"
        "import numpy\n"
        "def f():\n"
        "    from pkg.e import name\n"
        '_LAZY = {"Thing": "pkg.f", "other": "not.in.pkg"}\n'
    )
    modules = {name: path for name in ("pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d", "pkg.e", "pkg.f")}
    # `not_a_module` is a name defined in pkg/__init__: an edge to pkg itself.
    assert imported_modules("pkg.c", path, modules) == {"pkg", "pkg.a", "pkg.b", "pkg.d", "pkg.e", "pkg.f"}


def test_find_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"b", "c"}, "c": set()}) == ["b", "b"]


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, (
        f"import cycle: {' -> '.join(cycle)}. Fix: move what both sides need into a module that imports neither "
        "(a lazy import inside a function does not break the cycle, it hides it)."
    )
