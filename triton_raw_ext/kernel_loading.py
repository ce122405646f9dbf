"""Loading compiled kernels onto the GPU before any cross-rank work is in flight.

A kernel's module is otherwise loaded at its first launch, and a load (with NVSHMEM's module init,
run by the backend hook) waits for the work queued on the device: a rank that loads one while a
peer's kernel waits for this rank's next launch deadlocks. So a communicating op loads all its
kernels at construction, then lines the ranks up with :func:`triton_raw_ext.runtime.host_barrier`.

Contracts:

* :func:`load` loads a compiled kernel's module on the current device now (Triton otherwise does it
  at the first launch); for modules that hold NVSHMEM state the backend hook's module init runs too.
  Idempotent.
* :func:`preload` (also ``triton_raw_ext.preload``) compiles ``fn`` for the given arguments exactly as
  a launch with those arguments would (same specialisation, so the launch finds this kernel in
  Triton's cache) and loads it. Tensor arguments may be given as ``torch`` dtypes: they stand for
  16-byte aligned tensors.
"""

from __future__ import annotations

from typing import Any


def load(kernel: Any) -> Any:
    """Load ``kernel`` (a ``triton.compiler.CompiledKernel``) on the current device; returns it."""
    init_handles = getattr(kernel, "_init_handles", None)
    if init_handles is None:
        raise TypeError(
            f"triton_raw_ext.kernel_loading.load: expected a triton CompiledKernel (triton 3.6), "
            f"got {type(kernel).__name__}"
        )
    init_handles()
    return kernel


def preload(fn: Any, *args: Any, grid: tuple[int, ...], **kwargs: Any) -> Any:
    """Compile the ``@triton.jit`` function ``fn`` for ``args`` / ``kwargs`` (constexprs,
    ``num_warps``, ``num_stages``) without launching it, load it, and return the CompiledKernel."""
    return load(fn.warmup(*args, grid=grid, **kwargs))
