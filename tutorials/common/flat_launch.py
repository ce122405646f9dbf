"""A loaded kernel's launcher with its bound argument list flattened once.

Triton's CUDA launcher (``CompiledKernel.run``) expands each host tensor-descriptor argument into
the CUtensorMap, sizes and strides the kernel takes, on every launch: in a Python loop over all the
arguments on Triton 3.6 and 3.7 (the persistent MegaMoE kernel has 84), and on every Triton by a
call of the backend's ``make_tensordesc_arg``, which encodes a new CUtensorMap each time. Its C
side then asks each tensor argument for ``data_ptr()`` and the driver for its device pointer.

:class:`FlatLaunch` replaces that ``launch`` for a kernel launched again and again with the same
arguments but a few: it keeps the flattened list of the bound arguments and writes only the varying
ones into a copy. A varying descriptor's expansion is kept per tensor address (its shape, strides,
dtype and block are the bound descriptor's, which :mod:`bound_launch` checks), so a call on the same
buffers encodes nothing. A varying descriptor may be given as its tensor: the bound descriptor with
that tensor as its base. A CUDA tensor is passed as its address, which the launcher takes as it is
(the device pointer of device memory is its address): once for a bound one, per call for a varying
one, without the driver query.

The launcher it calls, the descriptor positions and metadata are read from the closure of Triton's
own wrapper (``wrap_handle_tensordesc``), which the module's tests compare it with on each supported
Triton; a kernel without descriptors has Triton's C launcher itself. :func:`flat_launch` returns None
for anything else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from triton.backends.nvidia import driver as nvidia_driver

# Varying descriptors' expansions kept per parameter: an op alternates between few buffers; past this
# many the cache starts again, so a caller cycling through many buffers only loses the reuse.
EXPANSIONS_KEPT = 64


def _address(value: Any) -> Any:
    """A CUDA tensor as its address, anything else as it is (the launcher reports a CPU tensor)."""
    return value.data_ptr() if isinstance(value, torch.Tensor) and value.is_cuda else value


def _wrapper_cells(launch: Any) -> dict[str, Any] | None:
    code, closure = getattr(launch, "__code__", None), getattr(launch, "__closure__", None)
    if code is None or closure is None:
        return None
    return dict(zip(code.co_freevars, (cell.cell_contents for cell in closure), strict=True))


class FlatLaunch:
    """Drop-in for the ``launch`` attribute of one kernel's CUDA launcher (``CompiledKernel.run``):
    called with the same arguments as Triton's wrapper, it calls the wrapped launcher (``launcher``)
    with the same flattened list, computed from ``values`` (the bound argument list) except at
    ``varying`` (positions into it). :meth:`flat_values` gives that list for the varying values alone,
    for a launch that hands it to ``launcher`` itself."""

    def __init__(self, launcher: Callable[..., Any], descriptors: Sequence[int], metas: Sequence[Any],
                 expand: Callable[[Any, Any], list[Any]] | None, flat_base: int | None, values: Sequence[Any],
                 varying: Sequence[int]) -> None:  # fmt: skip
        """``descriptors``: the positions of the descriptor parameters, ``metas`` their metadata and
        ``expand(descriptor, meta)`` the backend's expansion; ``flat_base``: the number of leading launcher
        arguments when the kernel arguments follow them one by one (Triton 3.6), None when they come as
        one sequence, the last argument (3.7 and later)."""
        self.launcher = launcher
        self._expand = expand
        self._flat_base = flat_base
        meta_at = {position: metas[i] for i, position in enumerate(descriptors)}
        self.template: list[Any] = []
        offsets = []
        for position, value in enumerate(values):
            offsets.append(len(self.template))
            if position in meta_at:
                self.template.extend(expand(value, meta_at[position]))  # type: ignore[misc]
            else:
                self.template.append(_address(value))
        offsets.append(len(self.template))  # where the last argument's span ends
        # (position, its span in the flat list, descriptor bound there or None, its metadata, its expansions kept
        # by tensor address: None where not kept, without metadata the expansion holds the tensor itself)
        self._slots = [
            (p, offsets[p], offsets[p + 1], values[p] if p in meta_at else None, meta_at.get(p),
             {} if meta_at.get(p) is not None else None)
            for p in varying
        ]  # fmt: skip
        self._count = len(values)

    def flat_values(self, values: Sequence[Any]) -> list[Any]:
        """The launcher's kernel arguments with ``values`` at the varying positions (in their order)."""
        flat = self.template.copy()
        for (_, start, end, bound_desc, meta, kept), value in zip(self._slots, values, strict=True):
            if bound_desc is None:
                flat[start] = _address(value)
                continue
            expansion = kept.get(value.data_ptr()) if kept is not None and isinstance(value, torch.Tensor) else None
            if expansion is None:
                expansion = self._expansion(value, bound_desc, meta, kept)
            flat[start:end] = expansion
        return flat

    def flat_arguments(self, kernel_args: Sequence[Any]) -> list[Any]:
        """The launcher's kernel arguments for the argument list ``kernel_args``."""
        flat = self.flat_values([kernel_args[slot[0]] for slot in self._slots])
        flat.extend(kernel_args[self._count :])  # arguments the launcher appends (Triton 3.9's sanitizer)
        return flat

    def _expansion(self, value: Any, bound_desc: Any, meta: Any, kept: dict[int, list[Any]] | None) -> list[Any]:
        if not isinstance(value, torch.Tensor):  # a descriptor: its shape may not be the bound one's
            return self._expand(value, meta)
        expansion = self._expand(dataclasses.replace(bound_desc, base=value), meta)
        if kept is not None:
            if len(kept) >= EXPANSIONS_KEPT:
                kept.clear()
            kept[value.data_ptr()] = expansion
        return expansion

    def __call__(self, *args: Any) -> Any:
        if self._flat_base is None:
            return self.launcher(*args[:-1], self.flat_arguments(args[-1]))
        return self.launcher(*args[: self._flat_base], *self.flat_arguments(args[self._flat_base :]))


def flat_launch(run: Any, values: Sequence[Any], varying: Sequence[int]) -> FlatLaunch | None:
    """A :class:`FlatLaunch` for the launcher ``run`` (a ``CompiledKernel.run``) with the bound argument
    list ``values`` and the ``varying`` positions, or None when ``run.launch`` is neither Triton's C
    launcher nor a descriptor wrapper of a known shape."""
    launch = getattr(run, "launch", None)
    # Triton 3.6's launchers take the kernel arguments one by one after the base ones, later ones as a list
    flat_base = getattr(nvidia_driver, "_BASE_ARGS_FORMAT_LEN", None)
    cells = _wrapper_cells(launch)
    if cells is None:  # no descriptor parameter: Triton's C launcher itself, or something else
        if launch is None or hasattr(launch, "__code__"):
            return None
        return FlatLaunch(launch, [], [], None, flat_base, values, varying)
    if "launcher" not in cells:
        return None
    if "tensordesc_indices" in cells:  # Triton 3.6, 3.7: a Python loop over the arguments
        descriptors = sorted(cells["tensordesc_indices"])
        backend_expand = expand = launch.__globals__.get("make_tensordesc_arg")
    elif "signature" in cells and "make_tensordesc_arg" in cells:  # 3.8, 3.9: the loop is native
        signature = cells["signature"]
        if any(isinstance(s, tuple) for s in signature):  # descriptors inside tuples: not flattened here
            return None
        descriptors = [i for i, s in enumerate(signature) if isinstance(s, str) and s.startswith("tensordesc")]
        backend_expand = cells["make_tensordesc_arg"]

        def expand(desc: Any, meta: Any) -> list[Any]:
            return backend_expand(desc, meta, None)  # its third argument (the launch's) is unused
    else:
        return None
    if backend_expand is None:
        return None
    metas = cells.get("tensordesc_meta") or [None] * len(descriptors)
    return FlatLaunch(cells["launcher"], descriptors, metas, expand, flat_base, values, varying)
