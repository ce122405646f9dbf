"""Launching a loaded kernel again and again without Triton's per-launch argument binding.

``kernel[grid](*args, **kwargs)`` binds every argument, specialises each, builds a cache key and
looks the kernel up, on every launch: about 45 µs of host time for a kernel with 84 parameters (the
persistent MegaMoE call) on a 2-core CPU box, more than the launch itself. An op launches the same
kernel on the same buffers call after call, and only a few arguments change (its inputs, the token
count).

Contract of :class:`BoundLaunch`: construction compiles and loads the kernel for ``args`` / ``kwargs``
(``triton_raw_ext.preload``) and keeps the argument list Triton's binder makes from them. A launch
takes new values for the ``varying`` parameters only, in that order; every other argument is the
object given at construction. Each new value is specialised by Triton's own function and must give
what the bound value gave (same dtype and 16-byte alignment for a tensor, same block shape and dtype
for a tensor descriptor, same integer type for an integer the kernel does not specialise): then the
kernel Triton would pick is the bound one, and the launch goes through the same ``CompiledKernel.run``
call as Triton's, on the current stream, with Triton's launch hooks. Otherwise it raises ValueError
naming the parameter. A varying integer the kernel specialises (not in ``do_not_specialize``) is
refused at construction: its value would pick the kernel. A varying tensor-descriptor parameter also
takes a tensor: the bound descriptor over that tensor, which must have the bound base's dtype and the
descriptor's shape and strides, at a 16-byte aligned address, not in host memory.
``launch_checked`` skips these checks, for a caller that makes them itself at its own entry.

The launcher's ``launch`` is :class:`flat_launch.FlatLaunch` where Triton's launcher is one it knows:
the bound arguments are flattened once, a bound CUDA tensor as its address (so it must keep its
storage: no ``resize_`` or ``set_``), and a descriptor given as a tensor is encoded once per address.
While no launch hook calls anything, no launch metadata is made and the flat list goes to Triton's
launcher as it is.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
from triton import knobs
from triton._C.libtriton import native_specialize_impl
from triton.compiler import make_backend
from triton.runtime.driver import driver
from triton.runtime.jit import create_function_from_signature
from triton.tools.tensor_descriptor import TensorDescriptor

from triton_raw_ext import preload

from .flat_launch import flat_launch


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


class BoundArguments:
    """The argument list Triton's binder makes for ``fn(*args, **kwargs)`` (``backend``: the target's),
    with new values for the ``varying`` parameters checked as the module docstring says."""

    def __init__(self, fn: Any, args: Sequence[Any], kwargs: dict[str, Any], varying: Sequence[str],
                 backend: Any) -> None:  # fmt: skip
        bind = create_function_from_signature(fn.signature, fn.params, backend)
        bound, specialization, _ = bind(*args, **kwargs)
        names = list(bound)
        self.name = fn.__name__
        self.values = list(bound.values())
        self._backend = backend
        self._slots = []
        for name in varying:
            if name not in names:
                raise ValueError(f"BoundLaunch: {self.name} has no parameter {name!r}")
            i = names.index(name)
            param = fn.params[i]
            if param.is_constexpr or param.annotation_type:
                raise ValueError(f"BoundLaunch: {self.name}'s parameter {name} is constexpr or annotated (fixed)")
            value = self.values[i]
            if isinstance(value, int) and not isinstance(value, bool) and not param.do_not_specialize:
                raise ValueError(
                    f"BoundLaunch: {self.name}'s integer parameter {name} varies, but the kernel specialises on "
                    f"it; add it to the @triton.jit's do_not_specialize"
                )
            flags = (param.is_const, not param.do_not_specialize, not param.do_not_specialize_on_alignment)
            base = None  # for a descriptor: the dtype, shape and strides a tensor given in its place must have
            if isinstance(value, TensorDescriptor):
                shape, strides = tuple(value.shape), tuple(value.strides)
                # contiguous strides are checked by is_contiguous(), which builds no tuple
                base = (value.base.dtype, shape, strides, strides == _contiguous_strides(shape))
            self._slots.append((i, name, flags, specialization[i], base))
        self.positions = tuple(slot[0] for slot in self._slots)  # of the varying parameters, in fn's order
        # the varying descriptor parameters' bound descriptors, by position
        self.descriptors = {slot[0]: self.values[slot[0]] for slot in self._slots if slot[4] is not None}

    def check(self, values: Sequence[Any]) -> None:
        """Raise ValueError naming the parameter unless ``values`` (for the varying parameters, in
        construction's order) give what the bound values gave, as the module docstring says."""
        if len(values) != len(self._slots):
            raise ValueError(f"BoundLaunch({self.name}): {len(self._slots)} values expected, got {len(values)}")
        for (_, name, flags, bound_spec, base), value in zip(self._slots, values, strict=True):
            if base is not None and isinstance(value, torch.Tensor):
                dtype, shape, strides, contiguous = base
                if (value.dtype != dtype or value.shape != shape
                        or not (value.is_contiguous() if contiguous else value.stride() == strides)
                        or value.data_ptr() % 16 or value.is_cpu):  # fmt: skip
                    raise ValueError(
                        f"BoundLaunch({self.name}): the tensor given for descriptor {name} is {value.dtype} "
                        f"{tuple(value.shape)} with strides {value.stride()} at {value.data_ptr():#x} on "
                        f"{value.device}; the bound descriptor needs {dtype} {shape} with strides {strides} at a "
                        "16-byte aligned address in device memory"
                    )
                continue
            spec = native_specialize_impl(self._backend, value, *flags)
            if spec != bound_spec:
                raise ValueError(
                    f"BoundLaunch({self.name}): {name} specialises as {spec}, not as when bound ({bound_spec}): "
                    "launch it through the kernel itself, or bind another BoundLaunch for it"
                )

    def arguments(self, *values: Any) -> list[Any]:
        """Every argument of a launch with ``values`` for the varying parameters (construction's order)."""
        self.check(values)
        return self.with_values(values)

    def with_values(self, values: Sequence[Any]) -> list[Any]:
        """:meth:`arguments` for ``values`` already checked."""
        args = self.values.copy()
        for i, value in zip(self.positions, values, strict=True):
            args[i] = value
        return args


class BoundLaunch:
    """``fn[grid](*args, **kwargs)`` compiled, loaded and bound once; ``launch(*values)`` runs it with new
    values for the ``varying`` parameters."""

    def __init__(self, fn: Any, grid: Sequence[int], args: Sequence[Any], kwargs: dict[str, Any],
                 varying: Sequence[str]) -> None:  # fmt: skip
        self.kernel = preload(fn, *args, grid=tuple(grid), **kwargs)
        self.grid = (*grid, 1, 1)[:3]
        self.bound = BoundArguments(fn, args, kwargs, varying, make_backend(driver.active.get_current_target()))
        self._flat = flat_launch(self.kernel.run, self.bound.values, self.bound.positions)
        self._run = self.kernel.run
        self._direct = None  # the kernel's launcher taking the flat list itself (launch's fast path)
        if self._flat is not None:
            self._run = copy.copy(self.kernel.run)
            self._run.launch = self._flat
            self._direct = copy.copy(self.kernel.run)
            self._direct.launch = self._flat.launcher
        self._current_stream = driver.active.get_current_stream

    @property
    def flat(self) -> bool:
        """Whether launches go through :class:`flat_launch.FlatLaunch` (else a descriptor given as a tensor
        is wrapped on every launch)."""
        return self._flat is not None

    def launch(self, *values: Any) -> None:
        """Launch with ``values`` for the varying parameters on the current stream."""
        self.bound.check(values)
        self.launch_checked(*values)

    def launch_checked(self, *values: Any) -> None:
        """:meth:`launch` for ``values`` the caller has checked as :meth:`BoundArguments.check` does (an op
        that checks its inputs at its entry): they are not checked again."""
        if self._direct is not None and not launch_hooks_set():
            # No hook to see the launch metadata: none is made, and the flat list goes to the launcher as it is.
            stream = self._current_stream(torch._C._cuda_getDevice())
            self._direct(*self.grid, stream, self.kernel.function, self.kernel.packed_metadata, None, None, None,
                         *self._flat.flat_values(values))  # fmt: skip
            return
        args = self.bound.with_values(values)
        if self._flat is None:
            for i, desc in self.bound.descriptors.items():
                if isinstance(args[i], torch.Tensor):
                    args[i] = dataclasses.replace(desc, base=args[i])
        run_loaded(self.kernel, self.grid, args, self._run)


def _calls_something(hook: Any) -> bool:
    return hook is not None and bool(getattr(hook, "calls", True))  # an empty HookChain calls nothing


def launch_hooks_set() -> bool:
    """Whether Triton's launch enter or exit hook calls anything. From Triton 3.6 on each is a HookChain,
    never None, and Triton makes the launch metadata and calls both chains on every launch, empty or not."""
    return _calls_something(knobs.runtime.launch_enter_hook) or _calls_something(knobs.runtime.launch_exit_hook)


def run_loaded(kernel: Any, grid: tuple[int, int, int], args: Sequence[Any], run: Any = None) -> None:
    """``kernel[grid](*args)`` for a compiled and loaded ``kernel`` (a ``CompiledKernel``), on the current
    stream, with Triton's launch hooks when one is set, through ``run`` (default: the kernel's own launcher)."""
    # torch's current device without torch.cuda.current_device's lazy-init check: the kernel is loaded
    stream = driver.active.get_current_stream(torch._C._cuda_getDevice())
    if launch_hooks_set():
        enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        metadata = kernel.launch_metadata(grid, stream, *args)
    else:
        enter = leave = metadata = None
    (run or kernel.run)(*grid, stream, kernel.function, kernel.packed_metadata, metadata, enter, leave, *args)
