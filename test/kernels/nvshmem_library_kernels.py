"""Kernels calling triton_raw_ext.nvshmem: written out from its call table, and a few by hand.

:func:`every_call_source` writes the source of a kernel that makes the given calls, each with scalar
and pointer arguments (its per-program form) and, where it has one and is untyped or of the given
element types, with tensor arguments (its elementwise form); results are stored, so none is dropped.
Triton compiles kernels from source files, so the tests write it to a file and import it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import triton
import triton.language as tl

import triton_raw_ext.nvshmem as shm
from triton_raw_ext.nvshmem.calls import CALLS, SIZE, TEAM, UINT64, Call, CType

POINTERS = {"int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16",
            "uint32": "u32", "uint64": "u64", "float16": "fp16", "bfloat16": "bf16", "float32": "fp32",
            "float64": "fp64"}  # fmt: skip
SIGNATURE = {**{f"p_{dtype}": f"*{t}" for dtype, t in POINTERS.items()}, "team": "i32", "pe": "i32", "nelems": "i64",
             "BLOCK": "constexpr"}  # fmt: skip
PER_THREAD = 4 * 32  # BLOCK of one element per thread at Triton's default 4 warps: no call is made twice


def _argument(name: str, ctype: CType, tensor: bool) -> str:
    offs = " + offs" if tensor else ""
    if ctype.pointer:
        return f"p_{ctype.dtype or 'int8'}{offs}"
    if ctype == TEAM:
        return "team"
    if name == "cmp":
        return "shm.CMP_GE"
    if name == "sig_op":
        return "shm.SIGNAL_ADD"
    if ctype in (SIZE, UINT64):
        return "nelems"
    if name in ("value", "cond", "cmp_value"):
        return f"tl.load(p_{ctype.dtype}{offs})"
    return "pe"  # pe, src_pe, PE_root


def _statement(call: Call, tensor: bool) -> str:
    offs = " + offs" if tensor else ""
    invoke = f"shm.{call.name}({', '.join(_argument(name, t, tensor) for name, t in call.params)})"
    if call.ret.pointer:  # ptr: a pointer to the first argument's type
        return f"tl.store(p_int8{offs}, tl.load({invoke}))"
    if call.ret.dtype is not None:
        return f"tl.store(p_{call.ret.dtype}{offs}, {invoke})"
    return invoke


def selected(families: tuple[str, ...], types: tuple[str, ...] | None = None) -> list[Call]:
    """The calls of ``families``; with ``types``, only the untyped ones and those of these NVSHMEM types."""
    return [c for c in CALLS if c.family in families and (types is None or c.type_name in (None, *types))]


def every_call_source(calls: list[Call], elementwise_types: tuple[str, ...] | None = None) -> str:
    """See the module docstring; ``elementwise_types`` None: the elementwise form of every typed call."""
    lines = ["import triton", "import triton.language as tl", "", "import triton_raw_ext.nvshmem as shm", "", "",
             "@triton.jit", f"def every_call({', '.join(SIGNATURE)}: tl.constexpr):", "    offs = tl.arange(0, BLOCK)"]
    for call in calls:
        lines.append(f"    {_statement(call, tensor=False)}")
        typed_out = elementwise_types is not None and call.type_name not in (None, *elementwise_types)
        if call.elementwise_wrapper is not None and not typed_out:
            lines.append(f"    {_statement(call, tensor=True)}")
    return "\n".join(lines) + "\n"


def every_call_kernel(calls: list[Call], folder: Path, elementwise_types: tuple[str, ...] | None = None):
    """The ``every_call`` kernel of :func:`every_call_source`, from a module written into ``folder``."""
    path = folder / f"every_call_{len(list(folder.glob('every_call_*.py')))}.py"
    path.write_text(every_call_source(calls, elementwise_types))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.every_call


@triton.jit
def forms_kernel(dest, out, pe, BLOCK: tl.constexpr):
    """``int_p`` with scalars (once per program) and with tensors (once per element)."""
    offs = tl.arange(0, BLOCK)
    shm.int_p(dest, 7, pe)
    shm.int_p(dest + offs, offs, pe)
    tl.store(out, shm.int_g(dest, pe))


@triton.jit
def typed_results_kernel(sig, buf, out, pe):
    """Results take the C type's Triton dtype: unsigned stays unsigned, ``ptr`` keeps the pointer type."""
    fetched = shm.signal_fetch(sig)
    tl.static_assert(fetched.dtype == tl.uint64)
    old = shm.uint32_atomic_fetch_add(out, 1, pe)
    tl.static_assert(old.dtype == tl.uint32)
    peer = shm.ptr(buf, pe)
    tl.static_assert(peer.dtype == tl.pointer_type(tl.float16))
    tl.store(buf, tl.load(peer))
    tl.static_assert(shm.my_pe().dtype == tl.int32)


@triton.jit
def block_call_with_tensor_kernel(dest, pe, BLOCK: tl.constexpr):
    shm.putmem_block(dest + tl.arange(0, BLOCK), dest, 4, pe)


@triton.jit
def small_tensor_atomic_kernel(cells, pe, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    shm.int_atomic_add(cells + offs, 1, pe)


@triton.jit
def wrong_pointer_kernel(dest, pe):
    shm.int_p(dest, 1, pe)


@triton.jit
def wrong_count_kernel(dest, pe):
    shm.int_p(dest, pe)
