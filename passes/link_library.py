"""Pass `link-library`: link a device library into a kernel module and inline it.

Contract: ``library`` is linked into ``kernel``; every function it brought in becomes internal; the
library's globals named in ``keep_globals`` keep external linkage, its others become internal. Then
the library functions not marked ``noinline`` are inlined (Triton's PTX step would inline them
anyway: it makes every function without ``noinline`` always-inline), constants are propagated into
the ``noinline`` ones (IPSCCP), the -O3 function simplification pipeline runs on the kernel's own
functions (those defined before the link; they are left otherwise untouched), and global DCE deletes
what the kernel does not reach. Not the whole -O3 pipeline: that re-optimizes the library's large
out-of-line functions, several times the cost for about 1 % fewer instructions. Returns the names of
library functions that were linked in. Used after Triton's `llir` stage to link NVSHMEM once per kernel.
"""

from __future__ import annotations

from pathlib import Path

import llvmlite.binding as llvm

from .module_io import defined_functions, function_attributes, global_dce, nvptx_target_machine, simplify_functions
from .tool_pass import Option, OptionValues, ToolContext, ToolPass, names


def link_library(kernel: llvm.ModuleRef, library: llvm.ModuleRef, keep_globals: set[str] = frozenset(),
                 cpu: str = "sm_90") -> list[str]:
    own = {f.name for f in defined_functions(kernel)}
    own_globals = {g.name for g in kernel.global_variables if not g.is_declaration}
    kernel.link_in(library)
    linked = [f for f in defined_functions(kernel) if f.name not in own]
    for fn in linked:
        fn.linkage = llvm.Linkage.internal
        if "noinline" not in function_attributes(fn).split():
            fn.add_function_attribute("alwaysinline")
    for gv in kernel.global_variables:
        if not gv.is_declaration and gv.name not in own_globals and gv.name not in keep_globals:
            gv.linkage = llvm.Linkage.internal
    names = sorted(f.name for f in linked)  # read before inlining and global DCE delete them
    pb = llvm.create_pass_builder(nvptx_target_machine(cpu), llvm.create_pipeline_tuning_options(speed_level=3))
    mpm = llvm.create_new_module_pass_manager()
    mpm.add_always_inliner_pass()
    mpm.add_ipsccp_pass()
    mpm.run(kernel, pb)
    simplify_functions(kernel, own, cpu)
    global_dce(kernel)
    return names


def _run(mod: llvm.ModuleRef, options: OptionValues, context: ToolContext) -> list[str]:
    library = context.read_module(options["library"])
    linked = link_library(mod, library, set(options["keep-globals"] or ()), context.cpu)
    return [f"linked {fn}" for fn in linked]


LINK_LIBRARY_PASS = ToolPass(
    "link-library",
    (Option("library", "library to link (.ll, .bc or .cu)", Path, required=True),
     Option("keep-globals", "globals kept external", names)),
    run=_run,
)  # fmt: skip
