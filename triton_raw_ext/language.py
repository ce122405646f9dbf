"""In-kernel API: ``raw.call(fn, [args])`` (``import triton_raw_ext.language as raw``).

A call becomes Triton's ``extern_elementwise`` on the function's ABI wrapper: with tensor
arguments it is applied elementwise and returns a tensor; with scalar and pointer arguments every
thread of the program runs it once. ``fn.extern_func_name`` is found among the library's exported
functions by :func:`triton_raw_ext.cxx_names.candidates`; a name that matches several (overloads,
template instances) is an error listing them.

Pointers are passed as their ``int64`` generic address; a Triton pointer or an ``int64`` value is
accepted for a pointer parameter, and in a Gluon kernel (Triton >= 3.9) a shared-memory descriptor
too, as the generic address of its first element (``gl.inline_asm`` reads its shared address,
``cvta.shared`` makes it generic): the raw function sees a row-major array, so the descriptor must
not be swizzled. Arguments must have the parameter's type, except conversions C makes
without loss (a narrower integer to a wider signed one, fp16/bf16 to fp32, fp32 to fp64) and
signed/unsigned integers of the same width; anything else is a compile error naming the function,
parameter and both types.

Results: ``void`` gives None; a scalar a tensor of its type (unsigned integers as Triton's unsigned
types, from the declaration: the IR has no signedness); a pointer a Triton pointer to its
element type where the declaration names one Triton has (``float *`` -> ``*fp32``), else its
``int64`` address; a struct a tuple with one tensor per scalar field, unpacked from the 64-bit
words its wrappers return (see :mod:`triton_raw_ext.passes.abi_wrappers`).

A call that may touch memory also declares, for each Triton pointer argument, a load and (unless
the pointer is ``const``) a store whose mask is all false; Triton's canonicalizer erases them before
any code is generated. They are for analyses of the unoptimized TTIR that cannot see into the call:
torch.compile finds the tensors a user kernel reads and writes from its loads and stores, and
without them it would take a kernel whose raw function writes through a pointer for one that writes
nothing, and could drop or reorder its launch. Gluon kernels get none: torch does not analyse them
(it builds them as Triton kernels, fails, and takes every tensor argument as written).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import triton
import triton.language as tl
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._semantic import GluonSemantic
from triton.language import core

from triton_raw_ext.passes.abi_wrappers import SCALAR_BITS, WrappedFunction

from .cu_compiler import RawLibrary
from .cxx_names import can_demangle, candidates, demangle, describe
from .errors import RawCompileError
from .triton_version import GLUON_SHARED_ADDRESS

ABI_DTYPES = {
    "i1": tl.int1, "i8": tl.int8, "i16": tl.int16, "i32": tl.int32, "i64": tl.int64,
    "float": tl.float32, "double": tl.float64, "half": tl.float16, "bfloat": tl.bfloat16,
}  # fmt: skip
C_NAMES = {
    "i1": "bool", "i8": "char", "i16": "short", "i32": "int", "i64": "long long", "float": "float",
    "double": "double", "half": "__half", "bfloat": "__nv_bfloat16", "ptr": "pointer",
}  # fmt: skip
LIBRARY_NAME = "triton_raw"
FIELD_INTS = {8: tl.int8, 16: tl.int16, 32: tl.int32, 64: tl.int64}
SHARED_TO_GENERIC = "{ .reg .b64 w; cvt.u64.u32 w, $1; cvta.shared.u64 $0, w; }"  # $1: a shared-window address


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


def _shared_address(desc: gl.shared_memory_descriptor, where: str, _semantic) -> core.tensor:
    """The generic address (int64) of the first element of Gluon shared memory ``desc``."""
    if not GLUON_SHARED_ADDRESS:
        raise RawCompileError(
            f"{where} got Gluon shared memory, whose address Triton {triton.__version__} cannot take (Gluon reads "
            f"a descriptor's address with gl.inline_asm, from Triton 3.9); use Triton 3.9, or declare the __shared__ "
            f"array in the raw function"
        )
    layout = desc.layout
    swizzled = isinstance(layout, gl.SwizzledSharedLayout)
    row_major = list(range((len(layout.order) if swizzled else desc.rank) - 1, -1, -1))
    if not swizzled or layout.max_phase != 1 or list(layout.order) != row_major:
        raise RawCompileError(
            f"{where} got shared memory in the layout {layout}, which is not a plain row-major array; allocate it "
            f"with gl.SwizzledSharedLayout(1, 1, 1, order={row_major})"
        )
    return _semantic.inline_asm(SHARED_TO_GENERIC, "=l,r", [desc], tl.int64, False)


def _convert(fn_name: str, param: str, abi: str, value, _semantic) -> core.tensor:
    """Turn one call argument into the tensor the ABI wrapper expects, or raise naming both types."""
    where = f"raw function {fn_name}: parameter {param!r} ({C_NAMES[abi]})"
    if isinstance(value, gl.shared_memory_descriptor):
        if abi != "ptr":
            raise RawCompileError(f"{where} got Gluon shared memory; pass it for a pointer parameter")
        return _shared_address(value, where, _semantic)
    if isinstance(value, core.constexpr) or not isinstance(value, core.tensor):
        raw = value.value if isinstance(value, core.constexpr) else value
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise RawCompileError(f"{where} got the Python value {raw!r}; pass a tensor or a number")
        if abi == "ptr" or (abi in ABI_DTYPES and ABI_DTYPES[abi].is_int()):
            if not isinstance(raw, int):
                raise RawCompileError(f"{where} got the float {raw!r}")
            dtype = tl.int64 if abi == "ptr" else ABI_DTYPES[abi]
            bits = dtype.primitive_bitwidth  # the IR type has no sign: either reading must hold the value
            low, high = (0, 1) if bits == 1 else (-(2 ** (bits - 1)), 2**bits - 1)
            if not low <= raw <= high:
                raise RawCompileError(f"{where} got {raw}, which does not fit in {bits} bits ({low}..{high}); "
                                      f"pass a value in range or widen the parameter in the .cu")
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


def _lookup(fn, lib: RawLibrary) -> tuple[str, WrappedFunction]:
    """(symbol, wrapper info) of the one exported function ``fn.extern_func_name`` names."""
    name, source = fn.extern_func_name, fn.spec.source
    found = candidates(name, [*lib.functions, *lib.unsupported])
    if len(found) == 1:
        symbol = found[0]
        if symbol in lib.unsupported:
            raise RawCompileError(f"raw function {describe(symbol)} in {source} cannot be called from Triton: "
                                  f"{lib.unsupported[symbol]}")
        return symbol, lib.functions[symbol]
    if found:
        listing = "\n".join(f"  {describe(s)}" for s in found)
        example = demangle(found[0]) or found[0]
        raise RawCompileError(
            f"{name!r} names {len(found)} functions in {source}:\n{listing}\nPick one with extern_func_name= "
            f"set to its mangled name (in brackets) or its signature, e.g. extern_func_name={example!r}"
        )
    known = ", ".join(describe(s) for s in sorted(lib.functions)) or "none"
    no_demangler = any(s.startswith("_Z") for s in lib.functions) and not can_demangle()
    raise RawCompileError(
        f"function {name!r} not found in {source}; it defines: {known}. Exported functions are __device__ "
        f"functions with external linkage (not static, not inline, not in an anonymous namespace) and explicit "
        f"template instantiations; set extern_func_name= to one of them"
        + (" by its mangled name (no C++ runtime with __cxa_demangle could be loaded to read C++ names)"
           if no_demangler else "")
    )


def _result_dtype(abi: str, unsigned: bool) -> tl.dtype:
    """The Triton type of a result (or field) of ABI type ``abi``; ``unsigned`` for a declared unsigned integer."""
    return getattr(tl, f"uint{SCALAR_BITS[abi]}") if unsigned else ABI_DTYPES.get(abi, tl.int64)


def _field(word: core.tensor, abi: str, offset: int, unsigned: bool, _semantic) -> core.tensor:
    """The field of ABI type ``abi`` at bit ``offset`` of a struct word (int64); a pointer is its int64 address."""
    value = _semantic.lshr(word, _semantic.to_tensor(offset)) if offset else word
    value = _semantic.cast(value, FIELD_INTS[SCALAR_BITS[abi]])
    dtype = _result_dtype(abi, unsigned)
    return value if dtype == value.dtype else _semantic.bitcast(value, dtype)


def emit_call(fn, args: list, _semantic):
    """Emit the call of RawFunction ``fn`` with ``args``; see the module docstring."""
    lib = fn.library(_arch(_semantic))
    symbol, info = _lookup(fn, lib)
    name = fn.extern_func_name
    if len(args) != len(info.params):
        expected = ", ".join(f"{C_NAMES[t]} {p}" for p, t in info.params)
        count = f"{len(info.params)} argument{'s' * (len(info.params) != 1)}"
        raise RawCompileError(f"raw function {name}({expected}) takes {count}, got {len(args)}")
    converted = [_convert(name, p, abi, a, _semantic) for (p, abi), a in zip(info.params, args, strict=True)]
    if not info.pure and not isinstance(_semantic, GluonSemantic):
        _declare_accesses([a for (_, abi), a in zip(info.params, args, strict=True) if abi == "ptr"], _semantic)
    key = tuple(t.dtype for t in converted)

    def extern(wrapper: str, dtype: tl.dtype) -> core.tensor:
        return core.extern_elementwise(LIBRARY_NAME, str(lib.path), converted, {key: (wrapper, dtype)},
                                       is_pure=info.pure, _semantic=_semantic)

    unsigned = set(lib.unsigned.get(symbol, ()))
    if info.ret == "struct":
        words = [extern(wrapper, tl.int64) for wrapper in info.words]
        return tuple(_field(words[w], abi, offset, k in unsigned, _semantic)
                     for k, (abi, w, offset) in enumerate(info.fields))
    if info.ret == "void":
        extern(info.symbol, tl.int32)
        return None
    if info.ret == "ptr":
        address = extern(info.symbol, tl.int64)
        pointee = lib.pointees.get(symbol)
        return address if pointee is None else _semantic.cast(address, tl.pointer_type(getattr(tl, pointee)))
    return extern(info.symbol, _result_dtype(info.ret, 0 in unsigned))


@runtime_checkable
class RawCallee(Protocol):
    """What a call needs of a raw function (``@dialect`` makes them): its name and compiled library."""

    extern_func_name: str

    def library(self, arch: int) -> RawLibrary: ...


@core.builtin
def call(fn, args, _semantic=None):
    """Call raw function ``fn`` (from ``@dialect``) with the list ``args`` inside a kernel."""
    if not isinstance(fn, RawCallee):
        raise RawCompileError(f"raw.call expects a function registered with @dialect, got {fn!r}")
    if isinstance(args, (core.tuple, tuple, list)):
        values = list(args.values if isinstance(args, core.tuple) else args)
    else:
        values = [args]
    return emit_call(fn, values, _semantic)
