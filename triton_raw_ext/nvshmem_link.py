"""The deferred NVSHMEM link: once per kernel, after Triton's `llir` stage, only if needed.

After Triton has inlined the raw functions and optimized the kernel, the kernel's LLVM IR still
declares the NVSHMEM functions it calls. :func:`link_nvshmem` links exactly those from NVSHMEM's
device bitcode for the target SM and hands Triton text IR it can read. The expensive part (parsing
the 30-50 MB library and cutting out what a symbol set needs) is cached on disk per (library
digest, SM, symbols, plugin code) under ``nvshmem_subset/``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from triton_raw_ext.passes import extract_needed, link_library, triton_compat
from triton_raw_ext.passes.module_io import declared_functions, load, parse

from .cache import digest, get_or_build, write_atomic
from .errors import RawCompileError
from .nvshmem_install import NVSHMEM_PREFIXES, file_digest, find_nvshmem
from .version import code_digest

# Globals nvshmemx_cumodule_init looks up by name: they must stay externally visible.
STATE_GLOBALS = frozenset({
    "nvshmemi_device_state_d", "nvshmemi_device_lib_version_d",
    "nvshmemi_ibgda_device_state_d", "nvshmemi_gpunetio_device_state_d",
})  # fmt: skip
_DECLARED_NVSHMEM = re.compile(
    rf"^declare [^@\n]*@((?:{'|'.join(map(re.escape, NVSHMEM_PREFIXES))})\w*)\(", re.MULTILINE
)


def nvshmem_symbols_declared(llir: str) -> list[str]:
    """The NVSHMEM functions that kernel IR ``llir`` declares but does not define."""
    return sorted(set(_DECLARED_NVSHMEM.findall(llir)))


def _libdevice_path() -> Path:
    from triton import knobs

    if knobs.nvidia.libdevice_path:
        return Path(knobs.nvidia.libdevice_path)
    import triton.backends.nvidia as nv

    return Path(nv.__file__).parent / "lib" / "libdevice.10.bc"


def _build_subset(bitcode: Path, symbols: list[str], folder: Path) -> None:
    mod = load(bitcode)
    missing = extract_needed(mod, set(symbols), STATE_GLOBALS)
    if missing:
        raise RawCompileError(
            f"NVSHMEM's device library {bitcode} does not define {', '.join(missing)}; check the names "
            f"(the header triton_raw/nvshmem_device.h lists the device API) or install a newer NVSHMEM"
        )
    libdevice_needed = {f.name for f in declared_functions(mod) if f.name.startswith("__nv_")}
    if libdevice_needed:
        libdevice = load(_libdevice_path())
        extract_needed(libdevice, libdevice_needed)
        mod.link_in(libdevice)
    write_atomic(folder / "subset.ll", triton_compat(str(mod)))


def nvshmem_subset(arch: int, symbols: list[str]) -> Path:
    """Path of the cached text IR holding what ``symbols`` need from NVSHMEM for ``sm_<arch>``."""
    bitcode = find_nvshmem().bitcode_for(arch)
    key = digest(file_digest(bitcode), str(arch), ",".join(symbols), code_digest())
    folder = get_or_build("nvshmem_subset", key, ("subset.ll",), lambda f: _build_subset(bitcode, symbols, f))
    return folder / "subset.ll"


def link_nvshmem(llir: str, arch: int, cpu: str, metadata: dict) -> str:
    """Return ``llir`` with NVSHMEM linked in if it declares NVSHMEM functions, else ``llir`` as is.

    Records ``metadata["raw_nvshmem"]`` (the symbols linked) and ``metadata["raw_nvshmem_link_s"]``.
    """
    symbols = nvshmem_symbols_declared(llir)
    if not symbols:
        return llir
    start = time.perf_counter()
    subset = nvshmem_subset(arch, symbols)
    kernel = parse(llir, "kernel llir")
    link_library(kernel, parse(subset.read_text(), str(subset)), STATE_GLOBALS, cpu)
    left = [f.name for f in declared_functions(kernel) if f.name.startswith(("nvshmem", "__nv_"))]
    if left:
        raise RawCompileError(f"after linking NVSHMEM the kernel still calls undefined {', '.join(left)}")
    metadata["raw_nvshmem"] = symbols
    metadata["raw_nvshmem_link_s"] = round(time.perf_counter() - start, 4)
    return triton_compat(str(kernel), drop_flags=False)
