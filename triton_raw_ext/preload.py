"""Load kernels onto the GPU before any cross-rank work is in flight.

Why: a kernel's first launch loads its module, and for a module that holds NVSHMEM state the backend
hook then runs ``nvshmemx_cumodule_init``, which copies NVSHMEM's device state into the module with
synchronous CUDA copies (``cudaMemcpy`` on the legacy default stream; some NVSHMEM versions add a
``cudaDeviceSynchronize``). Those wait for the work already queued on the device: when that work is
a kernel waiting for another rank's next launch, the host never gets to make that launch. CUDA's lazy
loading (``cuModuleLoadData``, library kernels) carries the same documented hazard. Loading every
kernel of a communicating op at construction, then lining the ranks up with
:func:`triton_raw_ext.runtime.host_barrier`, keeps loads (and JIT compiles) out of the
communication. On 2 H200s a rank was found inside a kernel load while its peer's GPU waited for it
(bench/results/multi_gpu-2026-11-29/). Those checks kept hanging after preloading for another reason,
overlapping NVSHMEM barriers during allocation, which the runtime fixed in session 4
(bench/results/session4-2026-11-29/).

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
