"""Stream-ordered flag writes: ``cuStreamWriteValue32`` through the CUDA driver (ctypes).

The producer raises ready flags with stream memory operations rather than kernels: they run on
the GPU's front end, need no SM, and so make progress even while the persistent consumer GEMM
occupies every SM spinning on a flag (a flag-writing *kernel* could deadlock behind it). With the
default flags the write is preceded by a memory fence that orders the stream's earlier work
(the copy-engine push of the shard) before the flag, like ``__threadfence_system()``.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

CU_STREAM_WRITE_VALUE_DEFAULT = 0
CUDA_SUCCESS = 0


@functools.lru_cache(maxsize=1)
def _write_value32() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    fn = getattr(lib, "cuStreamWriteValue32_v2", None) or lib.cuStreamWriteValue32
    fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def write_flag(stream: Any, address: int, value: int) -> None:
    """Enqueue ``*(int32*)address = value`` on torch stream ``stream`` after its earlier work.

    ``address`` is a device address in this process (local memory or a peer view). Raises
    RuntimeError with the driver's status when the write cannot be enqueued.
    """
    if not 0 <= value < 2**31:
        raise ValueError(f"flag value {value} does not fit the int32 ready flags")
    status = _write_value32()(ctypes.c_void_p(stream.cuda_stream), address, value, CU_STREAM_WRITE_VALUE_DEFAULT)
    if status != CUDA_SUCCESS:
        raise RuntimeError(f"cuStreamWriteValue32(addr=0x{address:x}, value={value}) failed with CUresult {status}")
