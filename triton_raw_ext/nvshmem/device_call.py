"""One NVSHMEM device call as a Triton builtin: chooses its wrapper, checks pointer types, types the result.

A :class:`DeviceCall` is called inside ``@triton.jit`` / ``@gluon.jit`` code. With a tensor argument
it emits the call's elementwise wrapper (``shm_<name>``: once per element); with scalar and pointer
arguments only, its per-program wrapper (see :attr:`~.calls.Call.program_wrapper`). Warp, block and
collective calls refuse tensor arguments, and so do calls that must not be repeated (atomic updates,
signal updates) given a tensor smaller than the Triton program's thread count: Triton's layout
would give its elements to several threads, and each would make the call. A Triton pointer
argument must point to the C parameter's type (same width and kind; signedness may differ); other
argument conversions are the plugin's (:mod:`triton_raw_ext.language`). An unsigned C result
becomes the unsigned Triton dtype, and ``ptr`` returns a pointer of its first argument's type. The
wrappers are :class:`~triton_raw_ext.dialect.RawFunction` objects made with ``@dialect`` on first use.
"""

from __future__ import annotations

import functools

import triton.language as tl
from triton.experimental.gluon.language._semantic import GluonSemantic
from triton.language import core

from ..dialect import RawFunction, dialect
from ..errors import RawCompileError
from ..language import emit_call
from .calls import Call, CType

PACKAGE = "triton_raw_ext.nvshmem"


def _raw_function(family: str, wrapper: str) -> RawFunction:
    """The wrapper ``wrapper`` of ``<family>.cu`` (beside this file) as a raw function."""

    def stub(*args): ...

    stub.__name__ = stub.__qualname__ = wrapper
    return dialect(name="cuda", file=f"{family}.cu", library="nvshmem", extern_func_name=wrapper)(stub)


def _is_block(value) -> bool:
    return isinstance(value, core.tensor) and value.type.is_block()


def _same_kind(got: tl.dtype, want: tl.dtype) -> bool:
    """Whether a Triton pointer to ``got`` may stand for a C pointer to ``want`` (signedness aside)."""
    if got.is_floating() or want.is_floating():
        return got == want
    return got.is_int() and got.primitive_bitwidth == want.primitive_bitwidth


class DeviceCall:
    """An NVSHMEM device function callable from Triton code (module docstring)."""

    __triton_builtin__ = True
    __triton_aggregate__ = True
    # Triton >= 3.8 hashes an aggregate's annotations; the key itself comes from hash_attrs.
    call: Call

    def __init__(self, call: Call) -> None:
        self.call = call
        self.__name__ = self.__qualname__ = call.name  # torch.compile re-imports it by name from this package
        self.__module__ = PACKAGE
        self.__doc__ = f"{call.symbol} ({call.scope}): see the NVSHMEM device API and docs/nvshmem.md."

    def __repr__(self) -> str:
        return f"<{PACKAGE}.{self.call.name}: {self.call.symbol}, {self.call.scope}>"

    @functools.cached_property
    def per_program(self) -> RawFunction:
        return _raw_function(self.call.family, self.call.program_wrapper)

    @functools.cached_property
    def elementwise(self) -> RawFunction | None:
        wrapper = self.call.elementwise_wrapper
        if wrapper is None:
            return None
        return self.per_program if wrapper == self.call.program_wrapper else _raw_function(self.call.family, wrapper)

    @property
    def hash_attrs(self) -> list:
        """What Triton hashes for a global referring to this call: the `.cu` file's key, which both
        wrappers share."""
        return self.per_program.hash_attrs

    @property
    def cache_key(self) -> str:
        """What Triton hashes for this call passed as a constexpr argument: its name and `.cu` key."""
        return f"{self.call.name}:{self.per_program.cache_key}"

    def _check_pointers(self, args: list) -> None:
        for (param, ctype), value in zip(self.call.params, args, strict=True):
            if not ctype.pointer or ctype.dtype is None or not isinstance(value, core.tensor):
                continue
            if value.dtype.is_ptr() and not _same_kind(value.dtype.element_ty, getattr(tl, ctype.dtype)):
                raise RawCompileError(
                    f"{PACKAGE}.{self.call.name}: parameter {param!r} ({ctype.c}) points to {ctype.dtype}, got a "
                    f"pointer to {value.dtype.element_ty}; pass a *{ctype.dtype} pointer (or the call of another type)"
                )

    def _check_not_replicated(self, args: list, _semantic) -> None:
        options = getattr(_semantic.builder, "options", None)
        num_warps = getattr(options, "num_warps", None)
        if self.call.repeatable or isinstance(_semantic, GluonSemantic) or num_warps is None:
            return  # Gluon kernels choose their layouts
        threads = num_warps * 32
        small = [v for v in args if _is_block(v) and v.numel.value < threads]
        if small:
            raise RawCompileError(
                f"{PACKAGE}.{self.call.name} with a tensor of {small[0].numel.value} elements in a program of "
                f"{threads} threads: Triton gives each element to several threads, and each would make the call; use "
                f"tensors of at least {threads} elements (or fewer warps)"
            )

    def _typed_result(self, result, args: list, _semantic):
        ret: CType = self.call.ret
        if result is None or ret.dtype is None and not ret.pointer:
            return result
        if ret.pointer:  # ptr: the peer's address of the first argument, as that argument's pointer type
            first = args[0]
            return _semantic.cast(result, first.dtype) if isinstance(first, core.tensor) and first.dtype.is_ptr() \
                else result
        want = getattr(tl, ret.dtype)
        return _semantic.bitcast(result, want) if result.dtype != want else result

    def __call__(self, *args, _semantic=None):
        call = self.call
        if _semantic is None:
            raise RawCompileError(f"{PACKAGE}.{call.name} can only be called inside a @triton.jit or @gluon.jit "
                                  f"function")
        values = list(args)
        if len(values) != len(call.params):
            expected = ", ".join(name for name, _ in call.params)
            raise RawCompileError(f"{PACKAGE}.{call.name}({expected}) takes {len(call.params)} arguments, "
                                  f"got {len(values)}")
        self._check_pointers(values)
        if any(_is_block(v) for v in values):
            if self.elementwise is None:
                kind = "a collective" if call.collective else f"a {call.scope} call"
                raise RawCompileError(
                    f"{PACKAGE}.{call.name} is {kind}, made once per program: pass scalars and pointers, not tensors"
                )
            self._check_not_replicated(values, _semantic)
            fn = self.elementwise
        else:
            fn = self.per_program
        try:
            result = emit_call(fn, values, _semantic)
        except RawCompileError as e:
            raise RawCompileError(f"{PACKAGE}.{call.name}: {e}") from e
        return self._typed_result(result, values, _semantic)
