"""Load kernels onto the GPU before any cross-rank work is in flight.

Why: on a multi-GPU job (one PE per GPU), loading a CUDA module (``cuModuleLoadData``, which Triton
calls at a kernel's first launch, and CUDA's lazy loading of library kernels) waited while a peer
GPU ran a kernel that in turn waited for this rank's next launch: the job hung (H200 x2,
bench/results/multi_gpu-2026-11-29/: one rank in ``cuModuleLoadData``, its peer in
``cudaDeviceSynchronize``). The cure is to load every kernel a communicating op will launch while
no GPU waits on another, i.e. at construction, followed by :func:`triton_raw_ext.runtime.host_barrier`.

Contracts:

* :func:`load` loads a compiled kernel's module on the current device now (Triton otherwise does it
  at the first launch); for modules that hold NVSHMEM state the backend hook's module init runs too.
  Idempotent.
* :func:`preload` compiles ``fn`` for the given arguments exactly as a launch with those arguments
  would (same specialisation, so the launch finds this kernel in Triton's cache) and loads it.
  Tensor arguments may be given as ``torch`` dtypes: they stand for 16-byte aligned tensors.
"""

from __future__ import annotations

from typing import Any


def load(kernel: Any) -> Any:
    """Load ``kernel`` (a ``triton.compiler.CompiledKernel``) on the current device; returns it."""
    init_handles = getattr(kernel, "_init_handles", None)
    if init_handles is None:
        raise TypeError(
            f"triton_raw_ext.preload.load: expected a triton CompiledKernel (triton 3.6), got {type(kernel).__name__}"
        )
    init_handles()
    return kernel


def preload(fn: Any, *args: Any, grid: tuple[int, ...], **kwargs: Any) -> Any:
    """Compile the ``@triton.jit`` function ``fn`` for ``args`` / ``kwargs`` (constexprs,
    ``num_warps``, ``num_stages``) without launching it, load it, and return the CompiledKernel."""
    return load(fn.warmup(*args, grid=grid, **kwargs))
