"""Pass `unique-symbols`: give every symbol a module defines a prefix unique to its source.

Contract: each defined function and global variable ``@name`` becomes ``@<prefix><name>``;
declarations (NVSHMEM, libdevice, ``vprintf``, intrinsics) keep their names so that they resolve
against the libraries linked later, and so do LLVM's reserved globals (``@llvm.compiler.used``,
``@llvm.used``, ...), which lose their meaning under another name. Returns the old -> new name map.
Two `.cu` files that both define ``helper`` therefore link into one kernel without clashing.
"""

from __future__ import annotations

import llvmlite.binding as llvm

from .module_io import defined_functions, is_intrinsic
from .tool_pass import Option, OptionValues, ToolContext, ToolPass


def unique_symbols(mod: llvm.ModuleRef, prefix: str) -> dict[str, str]:
    if not prefix or not all(c.isalnum() or c in "_." for c in prefix):
        raise ValueError(f"unique-symbols: prefix {prefix!r} must be non-empty [A-Za-z0-9_.]")
    renamed: dict[str, str] = {}
    symbols = defined_functions(mod) + [g for g in mod.global_variables
                                        if not g.is_declaration and not is_intrinsic(g.name)]
    for sym in symbols:
        if sym.name.startswith(prefix):
            continue
        new = prefix + sym.name
        renamed[sym.name] = new
        sym.name = new
    return renamed


def _run(mod: llvm.ModuleRef, options: OptionValues, context: ToolContext) -> list[str]:
    return [f"renamed {old} to {new}" for old, new in unique_symbols(mod, options["prefix"]).items()]


UNIQUE_SYMBOLS_PASS = ToolPass(
    "unique-symbols", (Option("prefix", "prefix for every defined symbol", required=True),), run=_run
)
