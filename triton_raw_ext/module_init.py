"""After a kernel's module is loaded: initialise NVSHMEM's device state in it, if it has one.

Registered on Triton's ``kernel_load_end_hook`` chain, which runs on every module load (each
device, disk-cache hits included). A module holds NVSHMEM state when it defines the global
``nvshmemi_device_state_d``; only then is ``nvshmemx_cumodule_init`` called (on other modules it
fails with CUDA error 7).
"""

from __future__ import annotations

import ctypes
import functools

STATE_SYMBOL = b"nvshmemi_device_state_d"
CUDA_SUCCESS = 0


@functools.lru_cache(maxsize=1)
def _libcuda() -> ctypes.CDLL:
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuModuleGetGlobal_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                                         ctypes.c_void_p, ctypes.c_char_p]
    lib.cuModuleGetGlobal_v2.restype = ctypes.c_int
    return lib


def holds_nvshmem_state(module: int) -> bool:
    """Whether the loaded CUmodule ``module`` defines NVSHMEM's device state."""
    ptr, size = ctypes.c_uint64(), ctypes.c_size_t()
    status = _libcuda().cuModuleGetGlobal_v2(ctypes.byref(ptr), ctypes.byref(size), ctypes.c_void_p(module),
                                             STATE_SYMBOL)
    return status == CUDA_SUCCESS


def init_nvshmem_module(module, function, name, metadata_group, hash) -> None:  # noqa: A002 (Triton's names)
    if not holds_nvshmem_state(int(module)):
        return
    from triton_raw_ext import runtime

    runtime.cumodule_init(int(module))
