"""Pass `extract-needed`: cut a device library down to what a set of symbols needs.

Contract: every defined function except ``keep`` becomes internal, then global DCE deletes all
that ``keep`` does not reach. Global variables named in ``keep_globals`` stay externally visible
(NVSHMEM's device state must keep its name for ``nvshmemx_cumodule_init`` to find it); other
globals become internal and disappear unless used. Used on NVSHMEM's 30-50 MB device bitcode,
whose result is cached per (library, arch, needed symbols).
"""

from __future__ import annotations

import llvmlite.binding as llvm

from .module_io import defined_functions, global_dce
from .tool_pass import Option, OptionValues, ToolContext, ToolPass, names


def extract_needed(mod: llvm.ModuleRef, keep: set[str], keep_globals: set[str] = frozenset()) -> list[str]:
    """Reduce ``mod`` in place; return the ``keep`` names the module does not define."""
    defined = {f.name for f in defined_functions(mod)}
    for fn in defined_functions(mod):
        if fn.name not in keep:
            fn.linkage = llvm.Linkage.internal
    for gv in mod.global_variables:
        if not gv.is_declaration and gv.name not in keep_globals:
            gv.linkage = llvm.Linkage.internal
    global_dce(mod)
    return sorted(keep - defined)


def _run(mod: llvm.ModuleRef, options: OptionValues, context: ToolContext) -> list[str]:
    missing = extract_needed(mod, set(options["keep"]), set(options["keep-globals"] or ()))
    if missing:
        raise ValueError(f"extract-needed: the module does not define {', '.join(missing)}; check --keep")
    return []


EXTRACT_NEEDED_PASS = ToolPass(
    "extract-needed",
    (Option("keep", "functions to keep (with what they call)", names, required=True),
     Option("keep-globals", "globals kept external", names)),
    run=_run,
)  # fmt: skip
