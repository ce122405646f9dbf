"""After a kernel's module is loaded: initialise NVSHMEM's device state in it, if it has one, and point
its bounded waits' report at this process's record, if it has waits.

Registered on Triton's ``kernel_load_end_hook`` chain, which runs on every module load (each
device, disk-cache hits included). A module holds NVSHMEM state when it defines the global
``nvshmemi_device_state_d``; only then is ``nvshmemx_cumodule_init`` called (on other modules it
fails with CUDA error 7). A module with bounded waits defines ``triton_raw_wait_record_ptr``
(:mod:`triton_raw_ext.wait_reports`). Both copy to the device, which a CUDA graph capture in progress
forbids: a module with NVSHMEM state first loaded during a capture raises :class:`RawRuntimeError`
naming the kernel and the fix (load it before capturing); one with waits only still runs, its waits
trapping without a report, as a warning says.
"""

from __future__ import annotations

import ctypes
import functools
import sys

from .errors import RawRuntimeError
from .wait_reports import point_module_at_record

STATE_SYMBOL = b"nvshmemi_device_state_d"
CUDA_SUCCESS = 0


@functools.lru_cache(maxsize=1)
def _libcuda() -> ctypes.CDLL:
    lib = ctypes.CDLL("libcuda.so.1")
    u64, size, ptr = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p
    signatures = {
        "cuModuleGetGlobal_v2": [u64, size, ptr, ctypes.c_char_p],
        "cuMemHostAlloc": [ctypes.POINTER(ptr), ctypes.c_size_t, ctypes.c_uint],
        "cuMemHostGetDevicePointer_v2": [u64, ptr, ctypes.c_uint],
        "cuStreamCreate": [ctypes.POINTER(ptr), ctypes.c_uint],
        "cuMemcpyHtoDAsync_v2": [ctypes.c_uint64, ptr, ctypes.c_size_t, ptr],
        "cuStreamSynchronize": [ptr],
        "cuStreamDestroy_v2": [ptr],
    }
    for name, argtypes in signatures.items():
        getattr(lib, name).argtypes = argtypes
        getattr(lib, name).restype = ctypes.c_int
    return lib


def holds_nvshmem_state(module: int) -> bool:
    """Whether the loaded CUmodule ``module`` defines NVSHMEM's device state."""
    ptr, size = ctypes.c_uint64(), ctypes.c_size_t()
    status = _libcuda().cuModuleGetGlobal_v2(ctypes.byref(ptr), ctypes.byref(size), ctypes.c_void_p(module),
                                             STATE_SYMBOL)
    return status == CUDA_SUCCESS


def _capturing() -> bool:
    """Whether torch's current stream is capturing a CUDA graph (False where torch is not in use)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


def init_loaded_module(module, function, name, metadata_group, hash) -> None:  # noqa: A002 (Triton's names)
    nvshmem = holds_nvshmem_state(int(module))
    if nvshmem and _capturing():
        raise RawRuntimeError(
            f"kernel {name} was first loaded while a CUDA graph was being captured, and its NVSHMEM device state "
            "is set up by copies to the device, which a capture forbids: launch the kernel once before "
            "capturing, or load it first with triton_raw_ext.preload(kernel, *args, grid=...)"
        )
    point_module_at_record(_libcuda(), int(module))
    if not nvshmem:
        return
    from triton_raw_ext import runtime

    runtime.cumodule_init(int(module))
