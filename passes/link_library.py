"""Pass `link-library`: link a device library into a kernel module and inline it.

Contract: ``library`` is linked into ``kernel``; every function it brought in becomes internal; the
library's globals named in ``keep_globals`` keep
external linkage; the NVPTX -O3 pipeline then inlines and cleans up. Kernels (functions that were
defined in ``kernel`` before the link) are untouched. Returns the names of library functions that
were linked in. Used after Triton's `llir` stage to link NVSHMEM once per kernel.
"""

from __future__ import annotations

import llvmlite.binding as llvm

from .module_io import defined_functions, optimize


def link_library(kernel: llvm.ModuleRef, library: llvm.ModuleRef, keep_globals: set[str] = frozenset(),
                 cpu: str = "sm_90") -> list[str]:
    own = {f.name for f in defined_functions(kernel)}
    own_globals = {g.name for g in kernel.global_variables if not g.is_declaration}
    kernel.link_in(library)
    linked = [f for f in defined_functions(kernel) if f.name not in own]
    for fn in linked:
        fn.linkage = llvm.Linkage.internal
    for gv in kernel.global_variables:
        if not gv.is_declaration and gv.name not in own_globals and gv.name not in keep_globals:
            gv.linkage = llvm.Linkage.internal
    names = sorted(f.name for f in linked)  # read before -O3 deletes the inlined functions
    optimize(kernel, 3, cpu)
    return names
