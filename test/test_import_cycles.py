"""The plugin's modules (``triton_raw_ext``, its ``passes`` and ``runtime``) and the repository's own
packages (``tutorials``, ``scripts``, ``examples``, ``bench``) import each other without cycles: read
with ``ast``, imports inside functions included, so a cycle hidden by a late import is found too.
Importing a submodule also runs its parents' ``__init__``; that is not counted as an edge, only the
module an import statement names.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import repository_modules


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that the import statements of module ``name`` name."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            for alias in node.names:
                child = f"{base}.{alias.name}"
                targets.add(child if child in modules else base)
    return {t for t in targets if t in modules and t != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_reader_sees_relative_absolute_and_late_imports():
    modules = repository_modules()
    assert {"triton_raw_ext.dialect", "triton_raw_ext.passes.abi_wrappers", "triton_raw_ext.runtime.memory"} <= set(
        modules
    )
    hook = _imports("triton_raw_ext.backend_hook", modules["triton_raw_ext.backend_hook"], modules)
    assert {"triton_raw_ext.cu_compiler", "triton_raw_ext.module_init"} <= hook  # top-level and in a function
    compiler = _imports("triton_raw_ext.cu_compiler", modules["triton_raw_ext.cu_compiler"], modules)
    assert "triton_raw_ext.passes.abi_wrappers" in compiler  # absolute, into a mapped package
    runtime = _imports("triton_raw_ext.runtime", modules["triton_raw_ext.runtime"], modules)
    assert "triton_raw_ext.runtime.memory" in runtime  # relative, from a package's __init__
    launch = _imports("tutorials.megamoe.launch", modules["tutorials.megamoe.launch"], modules)
    assert {"tutorials.megamoe.kernels", "tutorials.megamoe.config"} <= launch  # `from . import kernels as K`
    suite = _imports("scripts.gpu.suite", modules["scripts.gpu.suite"], modules)
    assert "tutorials.common.run_metadata" in suite  # across the repository's packages
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    modules = repository_modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _cycles(graph) == []
