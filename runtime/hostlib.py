"""The runtime's own host helper (``csrc/triton_raw_nvshmem_host.cu``): loading, signatures, versions.

Contract: :func:`host_library` builds (or finds prebuilt) and loads the helper once per process,
declares every entry point's ctypes signature, and refuses a library whose NVSHMEM host library
version differs from the NVSHMEM version whose device bitcode the compiler links
(``find_nvshmem().version``) — a mismatch would otherwise corrupt device state silently.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

from triton_raw_ext.errors import RawRuntimeError
from triton_raw_ext.nvshmem_install import find_nvshmem

from .build import load_host

HELPER_SOURCE = Path(__file__).resolve().parent / "csrc" / "triton_raw_nvshmem_host.cu"
HELPER_NAME = "triton_raw_nvshmem_host"
ABI_VERSION = 2
UNIQUE_ID_BYTES = 128

_c_int_p = ctypes.POINTER(ctypes.c_int)
_SIGNATURES: dict[str, tuple[type | None, list[type]]] = {
    "trx_abi_version": (ctypes.c_int, []),
    "trx_header_version": (None, [_c_int_p, _c_int_p, _c_int_p]),
    "trx_host_version": (None, [_c_int_p, _c_int_p, _c_int_p]),
    "trx_host_library_path": (ctypes.c_char_p, []),
    "trx_init_status": (ctypes.c_int, []),
    "trx_unique_id_size": (ctypes.c_int, []),
    "trx_get_unique_id": (ctypes.c_int, [ctypes.c_char_p]),
    "trx_set_device": (ctypes.c_int, [ctypes.c_int]),
    "trx_init_with_unique_id": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, ctypes.c_char_p]),
    "trx_finalize": (None, [ctypes.c_int]),
    "trx_my_pe": (ctypes.c_int, []),
    "trx_n_pes": (ctypes.c_int, []),
    "trx_malloc": (ctypes.c_int, [ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]),
    "trx_free": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "trx_ptr": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int]),
    "trx_barrier_all_on_stream": (None, [ctypes.c_void_p]),
    "trx_quiet_on_stream": (None, [ctypes.c_void_p]),
    "trx_cumodule_init": (ctypes.c_int, [ctypes.c_void_p]),
}

# nvshmemx_init_status_t: NVSHMEM_STATUS_IS_INITIALIZED and above mean "usable".
STATUS_IS_INITIALIZED = 2


def _version(lib: ctypes.CDLL, func: str) -> tuple[int, int, int]:
    parts = [ctypes.c_int() for _ in range(3)]
    getattr(lib, func)(*(ctypes.byref(p) for p in parts))
    return parts[0].value, parts[1].value, parts[2].value


def check_versions(
    host: tuple[int, int, int], device: tuple[int, int, int], host_path: str, root: Path
) -> None:
    """Raise unless the host library version equals the device bitcode version."""
    if host != device:
        raise RawRuntimeError(
            f"NVSHMEM version mismatch: the host library this process uses ({host_path or 'unknown file'}) "
            "is "
            f"{'.'.join(map(str, host))}, but kernels link the device bitcode of NVSHMEM "
            f"{'.'.join(map(str, device))} from {root}. Use one NVSHMEM installation for both: uninstall the "
            f"extra nvidia-nvshmem wheel, point NVSHMEM_HOME at the installation whose libnvshmem_host.so.3 "
            f"is loaded, or import triton_raw_ext.runtime before anything that loads another NVSHMEM"
        )


@functools.lru_cache(maxsize=1)
def host_library() -> ctypes.CDLL:
    """The loaded helper with signatures declared and versions checked (cached per process)."""
    lib = load_host(HELPER_SOURCE, HELPER_NAME)
    for func, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, func)
        fn.restype = restype
        fn.argtypes = argtypes
    if lib.trx_abi_version() != ABI_VERSION:
        raise RawRuntimeError(
            f"{lib._name} has helper ABI {lib.trx_abi_version()}, this package expects {ABI_VERSION}: a "
            "stale "
            f"prebuilt library; rebuild it with `cmake --build build` or delete it"
        )
    if lib.trx_unique_id_size() != UNIQUE_ID_BYTES:
        raise RawRuntimeError(
            f"NVSHMEM's unique id is {lib.trx_unique_id_size()} bytes, this package expects "
            f"{UNIQUE_ID_BYTES}; "
            f"use NVSHMEM 3.x"
        )
    install = find_nvshmem()
    host_path = (lib.trx_host_library_path() or b"").decode()
    check_versions(_version(lib, "trx_host_version"), install.version, host_path, install.root)
    return lib
