"""NVSHMEM's device code for a set of symbols: cut once from NVSHMEM's device bitcode, cached on disk.

Contract: :func:`nvshmem_subset` returns the path of text IR (``subset.ll``) that defines the named
NVSHMEM functions and everything they reach (the libdevice functions included); NVSHMEM's state
globals (:data:`STATE_GLOBALS`) are defined and external, every other symbol is internal, and the
``nvvm-reflect-ftz`` module flag is gone (the kernel brings Triton's). Unless kernels are compiled for
all NVSHMEM device transports (:func:`~.knobs.nvshmem_transports`), the cut is pinned to the proxy
transport (``pin-device-transport``) and simplified: per-SM releases otherwise bring IBGDA and
GPUNetIO code into every kernel that puts or gets. Built once per (bitcode file digest, SM, symbols,
transports, plugin code) under ``nvshmem_subset/``; an unknown symbol is an error naming it.

The cut is made by llvm-link when :func:`~.toolchain.find_llvm_link` finds one: with
``--only-needed`` it loads bitcode lazily and reads only what the symbols reach (well under a second
on the 30-50 MB per-SM files). Otherwise by llvmlite, which parses the whole file (6-8 s); it then
caches, once per file, the cut of the device API that ``triton_raw/nvshmem_device.h`` declares
(``nvshmem_api/``, 1-2 MB), and cuts symbol sets within that API from it. Both routes keep the same
functions and globals: what the symbols reach.
"""

from __future__ import annotations

import functools
import re
import tempfile
from pathlib import Path

import llvmlite.binding as llvm

from triton_raw_ext.passes import extract_needed, pin_device_transport, triton_compat
from triton_raw_ext.passes.module_io import declared_functions, global_dce, load, parse, simplify_functions

from .cache import digest, get_or_build, write_atomic
from .errors import RawCompileError
from .knobs import nvshmem_transports, run_tool
from .nvshmem_install import file_digest, find_nvshmem
from .toolchain import LlvmLink, find_llvm_link, llvm_link_install_hint
from .version import code_digest

# Globals nvshmemx_cumodule_init looks up by name: they must stay externally visible.
STATE_GLOBALS = frozenset({
    "nvshmemi_device_state_d", "nvshmemi_device_lib_version_d",
    "nvshmemi_ibgda_device_state_d", "nvshmemi_gpunetio_device_state_d",
})  # fmt: skip
API_HEADER = Path(__file__).parent / "include" / "triton_raw" / "nvshmem_device.h"
_ROOTS = "triton_raw_needs"  # the global through which the cut's roots reach llvm-link


@functools.lru_cache(maxsize=1)
def device_api() -> frozenset[str]:
    """The NVSHMEM functions that ``triton_raw/nvshmem_device.h`` declares."""
    return frozenset(re.findall(r"__device__[^;(]*?\b(nvshmemx?_\w+)\s*\(", API_HEADER.read_text()))


def nvshmem_subset(arch: int, symbols: list[str]) -> Path:
    """Path of the cached text IR holding what ``symbols`` need from NVSHMEM for ``sm_<arch>``."""
    bitcode = find_nvshmem().bitcode_for(arch)
    transports = nvshmem_transports()
    key = digest(file_digest(bitcode), str(arch), ",".join(symbols), transports, code_digest())
    folder = get_or_build("nvshmem_subset", key, ("subset.ll",),
                          lambda f: _build_subset(bitcode, symbols, transports, f))
    return folder / "subset.ll"


def _build_subset(bitcode: Path, symbols: list[str], transports: str, folder: Path) -> None:
    tool = find_llvm_link()
    mod = _cut_with_llvm_link(tool, bitcode, symbols) if tool else _cut_with_llvmlite(bitcode, symbols)
    missing = extract_needed(mod, set(symbols), STATE_GLOBALS)
    if missing:
        raise RawCompileError(
            f"NVSHMEM's device library {bitcode} does not define {', '.join(missing)}; check the names "
            f"(the header triton_raw/nvshmem_device.h lists the device API) or install a newer NVSHMEM"
        )
    if transports == "proxy":
        mod = _pinned_to_proxy(mod)
    _link_libdevice(mod)
    write_atomic(folder / "subset.ll", triton_compat(str(mod)))


def _pinned_to_proxy(mod: llvm.ModuleRef) -> llvm.ModuleRef:
    """``mod`` with the device transport pinned to the proxy and the code that leaves unreachable gone."""
    text, pinned = pin_device_transport(str(mod))
    if not pinned:
        return mod  # a release without device-initiated transports (the unified 3.4 bitcode)
    mod = parse(text, "NVSHMEM cut pinned to the proxy transport")
    simplify_functions(mod)
    global_dce(mod)
    return mod


def _roots_module(symbols: list[str]) -> str:
    """Text IR whose one global points at ``symbols`` (functions) and the state globals.

    ``llvm-link --only-needed`` links from later files only what the first one references; a bare
    declaration is not a reference. The declared types are placeholders: the linker replaces them.
    """
    functions = [f"declare void @{name}()" for name in symbols]
    variables = [f"@{name} = external global i8" for name in sorted(STATE_GLOBALS)]
    refs = ", ".join(f"ptr @{name}" for name in [*symbols, *sorted(STATE_GLOBALS)])
    roots = f"@{_ROOTS} = global [{len(symbols) + len(STATE_GLOBALS)} x ptr] [{refs}]"
    return "\n".join(['target triple = "nvptx64-nvidia-cuda"', *functions, *variables, roots]) + "\n"


def _cut_with_llvm_link(tool: LlvmLink, bitcode: Path, symbols: list[str]) -> llvm.ModuleRef:
    """What ``symbols`` reach in ``bitcode``, with the roots global and unused declarations still in."""
    with tempfile.TemporaryDirectory(prefix="nvshmem-cut-") as tmp:
        roots, cut = Path(tmp) / "roots.ll", Path(tmp) / "cut.bc"
        roots.write_text(_roots_module(symbols))
        command = [tool.path, "--only-needed", str(roots), str(bitcode), "-o", str(cut)]
        proc = run_tool("llvm-link", command, f"on {bitcode}", RawCompileError)
        if proc.returncode != 0:
            raise RawCompileError(
                f"{tool.path} (LLVM {'.'.join(map(str, tool.version))}) could not cut {bitcode}: "
                f"{proc.stderr.strip()}; {llvm_link_install_hint()}"
            )
        return load(cut)


def _cut_with_llvmlite(bitcode: Path, symbols: list[str]) -> llvm.ModuleRef:
    """``bitcode`` parsed whole, or its cached device-API cut when ``symbols`` lie within that API."""
    if set(symbols) <= device_api():
        key = digest(file_digest(bitcode), code_digest())
        folder = get_or_build("nvshmem_api", key, ("api.bc",), lambda f: _build_api_cut(bitcode, f))
        return load(folder / "api.bc")
    return load(bitcode, verify=False)


def _build_api_cut(bitcode: Path, folder: Path) -> None:
    mod = load(bitcode, verify=False)
    extract_needed(mod, set(device_api()), STATE_GLOBALS)  # API functions a release lacks are just absent
    write_atomic(folder / "api.bc", mod.as_bitcode())


def _libdevice_path() -> Path:
    from triton import knobs

    if knobs.nvidia.libdevice_path:
        return Path(knobs.nvidia.libdevice_path)
    import triton.backends.nvidia as nv

    return Path(nv.__file__).parent / "lib" / "libdevice.10.bc"


def _link_libdevice(mod: llvm.ModuleRef) -> None:
    """Link the libdevice functions ``mod`` calls (Triton links libdevice only into kernels that use it)."""
    needed = {f.name for f in declared_functions(mod) if f.name.startswith("__nv_")}
    if needed:
        libdevice = load(_libdevice_path())
        extract_needed(libdevice, needed)
        mod.link_in(libdevice)
        for fn in mod.functions:
            if fn.name in needed:
                fn.linkage = llvm.Linkage.internal
