"""Symmetric-heap tensors: allocation with nvshmem_malloc, peer views with nvshmem_ptr, one free each.

Contracts:

* :func:`empty` / :func:`zeros` are **collective**: every PE must call them in the same order with
  the same sizes (nvshmem_malloc synchronises all PEs).
* Each allocation is freed exactly once: when the last tensor (or peer view) using it is collected,
  or at :func:`~triton_raw_ext.runtime.finalize`, whichever comes first. Freeing is collective too
  (nvshmem_free synchronises all PEs), so drop symmetric tensors at the same point of the program on
  every PE; a tensor kept alive by a reference cycle is freed whenever the cyclic GC runs, which
  differs between processes — break such cycles or keep the tensor until finalize(). Tensors still
  referenced at finalize() point at freed memory afterwards; do not use them.
* :func:`peer` views share the allocation's lifetime (a view keeps it alive).
"""

from __future__ import annotations

import ctypes
import weakref
from typing import TYPE_CHECKING, Any

from triton_raw_ext.errors import RawRuntimeError

from . import heap, lifecycle

if TYPE_CHECKING:
    import torch


class _DeviceBuffer:
    """Device bytes exposed through ``__cuda_array_interface__`` so torch can wrap them.

    ``torch.as_tensor`` keeps this object alive as long as the tensor's storage, so its finalizer is
    the "storage was collected" signal. An owning buffer frees its allocation then; a peer buffer
    holds the owning buffer to keep the allocation alive.
    """

    def __init__(self, ptr: int, nbytes: int, owner: heap.Allocation | None, keep: _DeviceBuffer | None) -> None:
        self._ptr = ptr
        self._nbytes = nbytes
        self._keep = keep
        if owner is not None:
            weakref.finalize(self, _release, owner).atexit = False

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": (self._nbytes,), "typestr": "|u1", "data": (self._ptr, False), "version": 2}


def _release(alloc: heap.Allocation) -> None:
    """Free ``alloc`` unless finalize() already did (collective)."""
    with lifecycle.LOCK:
        if not heap.release(alloc):
            return
        state = lifecycle.current()
        if state is None or state.serial != alloc.serial:
            return
        err = state.lib.trx_free(alloc.ptr, alloc.device)
    if err:
        raise RawRuntimeError(
            f"freeing a symmetric tensor: cudaDeviceSynchronize reported cudaError {err} (a kernel failed "
            "earlier; "
            f"run with CUDA_LAUNCH_BLOCKING=1 to find it); the memory was freed"
        )


def _as_tensor(buffer: _DeviceBuffer, nbytes: int, dtype: torch.dtype, device: int) -> torch.Tensor:
    import torch

    raw = torch.as_tensor(buffer, device=f"cuda:{device}")
    return raw[:nbytes].view(dtype)


def empty(
    shape: int | tuple[int, ...] | list[int] | torch.Size, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """An uninitialised tensor on the symmetric heap of this GPU (collective).

    Waits for all work queued on this GPU first (see trx_malloc in the host helper: a barrier still
    running on a stream must not overlap nvshmem_malloc's). ``dtype`` defaults to
    ``torch.get_default_dtype()``. Raises :class:`RawRuntimeError` when NVSHMEM is not initialised,
    the heap is exhausted, or that wait reports a CUDA error (then the other PEs, which wait in
    nvshmem_malloc for this one, are told to stop through the watchdog).
    """
    import torch

    state = lifecycle.require("empty()/zeros()")
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    dtype = dtype or torch.get_default_dtype()
    numel = 1
    for d in dims:
        if d < 0:
            raise RawRuntimeError(f"empty(): negative dimension {d} in shape {dims}")
        numel *= d
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    with lifecycle.LOCK:
        out = ctypes.c_void_p()
        err = state.lib.trx_malloc(max(nbytes, 1), state.device, ctypes.byref(out))
        if err:
            why = (
                f"empty(): waiting for GPU {state.device} before nvshmem_malloc reported cudaError {err} "
                "(a kernel failed earlier; run with CUDA_LAUNCH_BLOCKING=1 to find it); nothing was allocated"
            )
            if state.watchdog is not None:  # the peers wait in nvshmem_malloc for this PE: end them
                state.watchdog.post_abort(why)
                why += ", and the other PEs were told to stop"
            raise RawRuntimeError(why)
        ptr = out.value
        if not ptr:
            raise RawRuntimeError(
                f"nvshmem_malloc({nbytes}) returned NULL on PE {state.pe}: the symmetric heap is "
                "exhausted (or the "
                "PEs asked for different sizes); free symmetric tensors or set NVSHMEM_SYMMETRIC_SIZE "
                "(e.g. 8G) "
                f"before init()"
            )
        alloc = heap.Allocation(ptr=ptr, nbytes=nbytes, device=state.device, serial=state.serial)
        heap.record(alloc)
    buffer = _DeviceBuffer(ptr, max(nbytes, 1), alloc, None)
    alloc.buffer = weakref.ref(buffer)
    return _as_tensor(buffer, nbytes, dtype, state.device).view(dims)


def zeros(
    shape: int | tuple[int, ...] | list[int] | torch.Size, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """:func:`empty`, zero-filled on the current stream, followed by :func:`barrier_all` on it.

    Collective. Work queued on the current stream afterwards sees zeros on every PE.
    """
    tensor = empty(shape, dtype)
    tensor.zero_()
    lifecycle.barrier_all()
    return tensor


def _allocation_of(tensor: torch.Tensor) -> heap.Allocation:
    alloc = heap.lookup(tensor.untyped_storage().data_ptr())
    if alloc is None:
        raise RawRuntimeError(
            "peer() needs a symmetric tensor made by triton_raw_ext.runtime.empty()/zeros() (or a view of "
            "one); "
            f"this {tuple(tensor.shape)} {tensor.dtype} tensor on {tensor.device} is not on the symmetric "
            "heap "
            f"(or its allocation was freed by finalize())"
        )
    return alloc


def peer(tensor: torch.Tensor, pe: int) -> torch.Tensor:
    """A view of PE ``pe``'s copy of symmetric ``tensor`` (same shape, strides and dtype).

    Reads and writes through the view are direct loads/stores to the peer's GPU memory, unordered
    with the peer's own work: synchronise with :func:`barrier_all`. Raises :class:`RawRuntimeError`
    when ``tensor`` is not symmetric, ``pe`` is out of range, or ``pe`` is not reachable by
    load/store (``nvshmem_ptr`` returns NULL, e.g. a GPU on another node).
    """
    state = lifecycle.require("peer()")
    if not 0 <= pe < state.n_pes:
        raise RawRuntimeError(f"peer(): PE {pe} does not exist; PEs are 0..{state.n_pes - 1}")
    with lifecycle.LOCK:
        alloc = _allocation_of(tensor)
        owner = alloc.buffer() if alloc.buffer is not None else None
        remote = state.lib.trx_ptr(alloc.ptr, pe)
    if not remote:
        raise RawRuntimeError(
            f"PE {pe} is not reachable by load/store from PE {state.pe} (nvshmem_ptr returned NULL: no "
            "P2P/NVLink "
            f"path, or another node); move data with NVSHMEM put/get instead of a peer() view"
        )
    buffer = _DeviceBuffer(remote, max(alloc.nbytes, 1), None, owner)
    usable = alloc.nbytes - alloc.nbytes % tensor.element_size()
    base = _as_tensor(buffer, usable, tensor.dtype, state.device)
    return base.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())
