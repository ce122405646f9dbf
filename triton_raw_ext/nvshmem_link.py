"""The deferred NVSHMEM link: once per kernel, after Triton's `llir` stage, only if needed.

After Triton has inlined the raw functions and optimized the kernel, the kernel's LLVM IR still
declares the NVSHMEM functions it calls. :func:`link_nvshmem` links those, cut from NVSHMEM's device
bitcode for the target SM and cached (:mod:`triton_raw_ext.nvshmem_cut`), and hands Triton text IR
it can read. ``link-library`` inlines NVSHMEM into the kernel and simplifies the kernel with it,
without the whole -O3 that would re-optimize NVSHMEM's large out-of-line functions. The collectives
are left declared when nvlink can link them as precompiled objects at the `cubin` stage
(:mod:`triton_raw_ext.nvshmem_objects`); NVSHMEM's state globals are linked in either way.
"""

from __future__ import annotations

import re
import time

from triton_raw_ext.passes import link_library, triton_compat
from triton_raw_ext.passes.module_io import declared_functions, parse

from .errors import RawCompileError
from .nvshmem_cut import STATE_GLOBALS, nvshmem_subset
from .nvshmem_install import NVSHMEM_PREFIXES
from .nvshmem_objects import links_separately
from .toolchain import usable_nvlink

_DECLARED_NVSHMEM = re.compile(
    rf"^declare [^@\n]*@((?:{'|'.join(map(re.escape, NVSHMEM_PREFIXES))})\w*)\(", re.MULTILINE
)
_DECLARED_INTRINSIC = re.compile(r"^declare [^@\n]*@(llvm\.[\w.]+)\(", re.MULTILINE)


def nvshmem_symbols_declared(llir: str) -> list[str]:
    """The NVSHMEM functions that kernel IR ``llir`` declares but does not define."""
    return sorted(set(_DECLARED_NVSHMEM.findall(llir)))


def link_nvshmem(llir: str, arch: int, cpu: str, metadata: dict) -> str:
    """Return ``llir`` with NVSHMEM linked in if it declares NVSHMEM functions, else ``llir`` as is.

    Records ``metadata["raw_nvshmem"]`` (the NVSHMEM functions the kernel calls),
    ``metadata["raw_nvshmem_objects"]`` (those of them left for the `cubin` stage to link as
    precompiled objects) and ``metadata["raw_nvshmem_link_s"]``.
    """
    symbols = nvshmem_symbols_declared(llir)
    if not symbols:
        return llir
    start = time.perf_counter()
    separate = [s for s in symbols if links_separately(s)] if usable_nvlink(arch) else []
    subset = nvshmem_subset(arch, [s for s in symbols if s not in separate])
    kernel = parse(llir, "kernel llir")
    link_library(kernel, parse(subset.read_text(), str(subset)), STATE_GLOBALS, cpu)
    left = [f.name for f in declared_functions(kernel)
            if f.name.startswith(("nvshmem", "__nv_")) and f.name not in separate]
    if left:
        raise RawCompileError(f"after linking NVSHMEM the kernel still calls undefined {', '.join(left)}")
    metadata["raw_nvshmem"] = symbols
    metadata["raw_nvshmem_objects"] = separate
    metadata["raw_nvshmem_link_s"] = round(time.perf_counter() - start, 4)
    return restore_intrinsic_names(llir, triton_compat(str(kernel), drop_flags=False))


def restore_intrinsic_names(before: str, after: str) -> str:
    """``after`` with the intrinsics that parsing ``before`` with llvmlite renamed given their names in
    ``before`` again.

    llvmlite's LLVM (22.1) upgrades intrinsic names it knows under a newer spelling: Triton 3.6's
    ``llvm.nvvm.ex2.approx.f`` (``tl.exp``, ``tl.sigmoid``) comes back as ``llvm.nvvm.ex2.approx.f32``,
    which Triton's own LLVM does not know, and ptxas then meets a call of an undefined function. An
    intrinsic ``before`` declared that ``after`` lacks is given back its name where ``after`` declares a
    new intrinsic whose name extends it; the names are the ones Triton's LLVM wrote, so it reads them.
    """
    old = set(_DECLARED_INTRINSIC.findall(before))
    new = set(_DECLARED_INTRINSIC.findall(after))
    for lost in sorted(old - new):
        renamed = [name for name in new - old if name.startswith(lost)]
        if len(renamed) == 1:
            after = re.sub(rf"@{re.escape(renamed[0])}\(", f"@{lost}(", after)
    return after
