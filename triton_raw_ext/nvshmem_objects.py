"""NVSHMEM's collectives as precompiled device objects, linked into kernels by nvlink.

A collective (barrier, sync, broadcast, alltoall, fcollect, reductions: :func:`links_separately`)
carries every algorithm NVSHMEM may pick at run time: an int32 min-reduce is 0.9 MB of LLVM IR,
0.8 MB of PTX and 6-10 s of ptxas. Inlined, every kernel that calls one, and every specialisation
of that kernel, pays for it again. Instead, when an nvlink at least as new as Triton's ptxas is
found (:func:`~.toolchain.usable_nvlink`), the collective stays an external call in the kernel, the kernel's PTX
is assembled as relocatable code (``ptxas -c``), and nvlink links it with the collective's object,
which is built once and cached.

Contract: :func:`collective_object` returns a relocatable object (``ptxas -c``) defining ``symbol``
and, internally, everything it reaches in NVSHMEM's device bitcode for the SM, with NVSHMEM's state
globals (:data:`~triton_raw_ext.nvshmem_cut.STATE_GLOBALS`) only declared: the kernel defines them
(:mod:`triton_raw_ext.nvshmem_link` links them in), so ``nvshmemx_cumodule_init`` finds the one
copy. NVSHMEM's device library keeps no other mutable global (3.4.5 to 3.8; function-local
``__shared__`` variables aside), so each object's private copies of NVSHMEM's internal functions
are safe; an object that would hold one is refused. The object is built with a register limit
(:func:`register_limit`) under which a block of the kernel's size can launch, and cached under
``nvshmem_object/<key>/`` by bitcode digest, SM, symbol, register limit, ptxas and plugin code.
:func:`link_kernel` links the kernel's relocatable code with the objects into the executable cubin.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import llvmlite.binding as llvm

from triton_raw_ext.passes.module_io import nvptx_target_machine, parse

from .cache import digest, get_or_build, write_atomic
from .errors import RawCompileError
from .knobs import run_tool
from .nvshmem_cut import STATE_GLOBALS, nvshmem_subset
from .nvshmem_install import file_digest, find_nvshmem
from .toolchain import NVLINK_INSTALL_HINT, usable_nvlink
from .version import code_digest

# Name words of NVSHMEM's collectives (`nvshmemx_int32_min_reduce_block`, `nvshmem_team_sync`,
# `nvshmemx_broadcastmem_warp`): large, and called rarely enough that a call costs nothing.
COLLECTIVE_WORDS = frozenset({"barrier", "sync", "broadcast", "alltoall", "fcollect", "reduce", "reducescatter"})
OBJECT_FILE = "collective.o"
MAX_REGISTERS = 255  # per thread, sm_70 and newer
REGISTER_FILE = 65536  # 32-bit registers per thread block
REGISTER_UNIT = 8  # per-thread register counts are allocated in multiples of 8


def links_separately(symbol: str) -> bool:
    """Whether NVSHMEM function ``symbol`` is a collective, linked as a precompiled object when it can be."""
    words = symbol.split("_")[1:]
    return any(word in COLLECTIVE_WORDS or word.removesuffix("mem") in COLLECTIVE_WORDS for word in words)


def _ptxas(capability: int):
    from triton.backends.nvidia.compiler import get_ptxas

    return get_ptxas(capability)


def register_limit(num_warps: int, maxnreg: int | None = None) -> int:
    """Registers per thread a collective may use so that a block of ``num_warps`` warps can launch."""
    fits = REGISTER_FILE // (num_warps * 32) // REGISTER_UNIT * REGISTER_UNIT
    return min(MAX_REGISTERS, fits, maxnreg or MAX_REGISTERS)


def _declare_state(mod: llvm.ModuleRef) -> str:
    """``mod`` as text IR with NVSHMEM's state globals turned from definitions into declarations."""
    text = str(mod)
    for gv in mod.global_variables:
        if gv.name not in STATE_GLOBALS or gv.is_declaration:
            continue
        definition = str(gv)  # LLVM prints a global on one line, as in the module's text
        value_type = str(gv.global_value_type).split(" = type ")[0]  # a named struct prints its body too
        space = re.search(r"\baddrspace\((\d+)\)", definition)
        align = re.search(r", align (\d+)", definition)
        declaration = (f"@{gv.name} = external {f'addrspace({space.group(1)}) ' if space else ''}global {value_type}"
                       f"{f', align {align.group(1)}' if align else ''}")
        text = text.replace(definition, declaration, 1)
    return text


def _mutable_device_global(definition: str) -> bool:
    """Whether a global's definition line is a variable in global or constant memory (not shared, not ``constant``)."""
    space = re.search(r"\baddrspace\((\d+)\)", definition)
    return " global " in definition and (space is None or space.group(1) != "3")


def collective_object(capability: int, symbol: str, max_registers: int) -> Path:
    """The cached relocatable object of NVSHMEM collective ``symbol`` for ``sm_<capability>`` (module docstring)."""
    ptxas = _ptxas(capability)
    bitcode = find_nvshmem().bitcode_for(capability)
    key = digest(file_digest(bitcode), str(capability), symbol, str(max_registers), ptxas.path, ptxas.version,
                 code_digest())
    build = lambda folder: _build_object(capability, symbol, max_registers, folder)  # noqa: E731
    return get_or_build("nvshmem_object", key, (OBJECT_FILE,), build) / OBJECT_FILE


def _build_object(capability: int, symbol: str, max_registers: int, folder: Path) -> None:
    from triton.backends.nvidia.compiler import sm_arch_from_capability

    arch = sm_arch_from_capability(capability)
    bitcode = find_nvshmem().bitcode_for(capability)
    subset = nvshmem_subset(capability, [symbol])
    mod = parse(_declare_state(parse(subset.read_text(), str(subset))), f"{symbol} for {arch}")
    shared = [gv.name for gv in mod.global_variables if not gv.is_declaration and _mutable_device_global(str(gv))]
    if shared:
        raise RawCompileError(f"NVSHMEM's {symbol} ({bitcode}) uses the mutable globals {', '.join(shared)}, which a "
                              f"precompiled object cannot share with the kernel; use NVSHMEM 3.4.5 to 3.8 "
                              f"(`pip install 'nvidia-nvshmem-cu13>=3.4.5,<3.9'`)")
    ptx = nvptx_target_machine(arch).emit_assembly(mod)
    limit = [f"-maxrregcount={max_registers}"] if max_registers < MAX_REGISTERS else []
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        source, output = Path(tmp) / "collective.ptx", Path(tmp) / OBJECT_FILE
        source.write_text(ptx)
        command = [_ptxas(capability).path, "-c", f"--gpu-name={arch}", *limit, str(source), "-o", str(output)]
        proc = run_tool("ptxas", command, f"on NVSHMEM's {symbol}", RawCompileError)
        if proc.returncode != 0:
            raise RawCompileError(f"ptxas could not compile NVSHMEM's {symbol} ({bitcode}) for "
                                  f"{arch}:\n{proc.stderr.strip()}\ncommand: {' '.join(command)}")
        write_atomic(folder / OBJECT_FILE, output.read_bytes())


def link_kernel(relocatable: bytes, symbols: list[str], capability: int, max_registers: int) -> bytes:
    """The executable cubin of a kernel assembled with ``ptxas -c`` (``relocatable``) linked with the
    objects of the NVSHMEM collectives ``symbols`` it calls."""
    from triton.backends.nvidia.compiler import sm_arch_from_capability

    tool = usable_nvlink(capability)
    if tool is None:
        raise RawCompileError(f"no nvlink at least as new as Triton's ptxas {_ptxas(capability).version} was found "
                              f"to link NVSHMEM's {', '.join(symbols)}; {NVLINK_INSTALL_HINT}")
    objects = [collective_object(capability, symbol, max_registers) for symbol in symbols]
    arch = sm_arch_from_capability(capability)
    with tempfile.TemporaryDirectory(prefix="nvshmem-link-") as tmp:
        kernel, output = Path(tmp) / "kernel.o", Path(tmp) / "kernel.cubin"
        kernel.write_bytes(relocatable)
        command = [tool.path, f"-arch={arch}", str(kernel), *map(str, objects), "-o", str(output)]
        proc = run_tool("nvlink", command, f"linking NVSHMEM's {', '.join(symbols)}", RawCompileError)
        if proc.returncode != 0:
            raise RawCompileError(f"nvlink ({tool.path}, CUDA {'.'.join(map(str, tool.version))}) could not link "
                                  f"NVSHMEM's {', '.join(symbols)} into the kernel:\n{proc.stderr.strip()}\n"
                                  f"command: {' '.join(command)}; set TRITON_RAW_NVLINK to another nvlink")
        return output.read_bytes()
