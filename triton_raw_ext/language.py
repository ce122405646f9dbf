"""In-kernel API: ``raw.call(fn, [args])`` (``import triton_raw_ext.language as raw``).

A call becomes Triton's ``extern_elementwise`` on the function's ABI wrapper: with tensor
arguments it is applied elementwise and returns a tensor; with scalar and pointer arguments every
thread of the program runs it once. ``void`` functions return None. Pointers are passed as their
``int64`` address; a Triton pointer or an ``int64`` value is accepted for a pointer parameter.
Arguments must have the parameter's type, except conversions C makes without loss (a narrower
integer to a wider signed one, fp16/bf16 to fp32, fp32 to fp64) and signed/unsigned integers of
the same width; anything else is a compile error naming the function, parameter and both types.

A call that may touch memory also declares, for each Triton pointer argument, a load and (unless
the pointer is ``const``) a store whose mask is all false; Triton's canonicalizer erases them before
any code is generated. They are for analyses of the unoptimized TTIR that cannot see into the call:
torch.compile finds the tensors a user kernel reads and writes from its loads and stores, and
without them it would take a kernel whose raw function writes through a pointer for one that writes
nothing, and could drop or reorder its launch.
"""

from __future__ import annotations

import triton.language as tl
from triton.language import core

from .errors import RawCompileError

ABI_DTYPES = {
    "i1": tl.int1, "i8": tl.int8, "i16": tl.int16, "i32": tl.int32, "i64": tl.int64,
    "float": tl.float32, "double": tl.float64, "half": tl.float16, "bfloat": tl.bfloat16,
}  # fmt: skip
C_NAMES = {
    "i1": "bool", "i8": "char", "i16": "short", "i32": "int", "i64": "long long", "float": "float",
    "double": "double", "half": "__half", "bfloat": "__nv_bfloat16", "ptr": "pointer",
}  # fmt: skip
LIBRARY_NAME = "triton_raw"


def _arch(_semantic) -> int:
    arch = getattr(_semantic.builder.options, "arch", None)
    if not isinstance(arch, str) or not arch.startswith("sm"):
        raise RawCompileError(f"raw CUDA functions need the NVIDIA backend (target arch is {arch!r})")
    return int(arch[2:].rstrip("a"))


def _widens_losslessly(got: tl.dtype, want: tl.dtype) -> bool:
    """int32 -> int64, fp16/bf16 -> fp32, fp32 -> fp64: what C converts implicitly without loss."""
    if got.is_int() and want.is_int() and not got.is_int1():
        wider = want.primitive_bitwidth > got.primitive_bitwidth
        return wider and (want.is_int_signed() or got.is_int_unsigned())
    if got.is_floating() and want.is_floating():
        exact = {(tl.float16, tl.float32), (tl.bfloat16, tl.float32), (tl.float16, tl.float64),
                 (tl.bfloat16, tl.float64), (tl.float32, tl.float64)}
        return (got, want) in exact
    return False


def _convert(fn_name: str, param: str, abi: str, value, _semantic) -> core.tensor:
    """Turn one call argument into the tensor the ABI wrapper expects, or raise naming both types."""
    where = f"raw function {fn_name}: parameter {param!r} ({C_NAMES[abi]})"
    if isinstance(value, core.constexpr) or not isinstance(value, core.tensor):
        raw = value.value if isinstance(value, core.constexpr) else value
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise RawCompileError(f"{where} got the Python value {raw!r}; pass a tensor or a number")
        if abi == "ptr" or (abi in ABI_DTYPES and ABI_DTYPES[abi].is_int()):
            if not isinstance(raw, int):
                raise RawCompileError(f"{where} got the float {raw!r}")
            dtype = tl.int64 if abi == "ptr" else ABI_DTYPES[abi]
        else:
            dtype = ABI_DTYPES[abi]
        return _semantic.to_tensor(core.constexpr(raw)).to(dtype, _semantic=_semantic)
    got = value.dtype
    if abi == "ptr":
        if got.is_ptr():
            return _semantic.cast(value, tl.int64)
        if got in (tl.int64, tl.uint64):
            return _semantic.bitcast(value, tl.int64) if got == tl.uint64 else value
        raise RawCompileError(f"{where} got {got}; pass a Triton pointer or an int64 address")
    want = ABI_DTYPES[abi]
    if got == want:
        return value
    if got.is_int() and want.is_int() and got.primitive_bitwidth == want.primitive_bitwidth:
        return _semantic.bitcast(value, want)  # unsigned <-> signed of the same width
    if _widens_losslessly(got, want):
        return _semantic.cast(value, want)
    raise RawCompileError(f"{where} expects {want}, got {got}; convert it with .to({want})")


def _declare_accesses(pointers: list, _semantic) -> None:
    """The masked-off load and store on each pointer argument (see the module docstring)."""
    for ptr in pointers:
        if not isinstance(ptr, core.tensor) or not ptr.dtype.is_ptr():
            continue
        element = ptr.dtype.element_ty
        if element.is_ptr() or element.is_block():  # pointers to pointers, block pointers
            continue
        if not ptr.type.is_block():
            ptr = core.broadcast_to(ptr, [1], _semantic=_semantic)  # a scalar false mask is not erased
        nowhere = core.full(ptr.shape, 0, tl.int1, _semantic=_semantic)
        zero = core.full(ptr.shape, 0, element, _semantic=_semantic)
        core.load(ptr, mask=nowhere, other=zero, _semantic=_semantic)
        if not ptr.dtype.const:
            core.store(ptr, zero, mask=nowhere, _semantic=_semantic)


def emit_call(fn, args: list, _semantic):
    """Emit the call of RawFunction ``fn`` with ``args``; see the module docstring."""
    lib = fn.library(_arch(_semantic))
    name = fn.extern_func_name
    info = lib.functions.get(name)
    if info is None:
        if name in lib.unsupported:
            raise RawCompileError(f"raw function {name} in {fn.spec.source} cannot be called from Triton: "
                                  f"{lib.unsupported[name]}")
        known = ", ".join(sorted(lib.functions)) or "none"
        raise RawCompileError(
            f"function {name!r} not found in {fn.spec.source}; it defines: {known}. Exported functions "
            f'must be extern "C" __device__ (or set extern_func_name=)'
        )
    if len(args) != len(info.params):
        expected = ", ".join(f"{C_NAMES[t]} {p}" for p, t in info.params)
        raise RawCompileError(f"raw function {name}({expected}) takes {len(info.params)} arguments, got {len(args)}")
    converted = [_convert(name, p, abi, a, _semantic) for (p, abi), a in zip(info.params, args, strict=True)]
    if not info.pure:
        _declare_accesses([a for (_, abi), a in zip(info.params, args, strict=True) if abi == "ptr"], _semantic)
    ret_dtype = tl.int32 if info.ret == "void" else ABI_DTYPES[info.ret]
    key = tuple(t.dtype for t in converted)
    result = core.extern_elementwise(LIBRARY_NAME, str(lib.path), converted, {key: (info.symbol, ret_dtype)},
                                     is_pure=info.pure, _semantic=_semantic)
    return None if info.ret == "void" else result


@core.builtin
def call(fn, args, _semantic=None):
    """Call raw function ``fn`` (from ``@dialect``) with the list ``args`` inside a kernel."""
    from .dialect import RawFunction

    if not isinstance(fn, RawFunction):
        raise RawCompileError(f"raw.call expects a function registered with @dialect, got {fn!r}")
    if isinstance(args, (core.tuple, tuple, list)):
        values = list(args.values if isinstance(args, core.tuple) else args)
    else:
        values = [args]
    return emit_call(fn, values, _semantic)
