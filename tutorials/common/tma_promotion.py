"""Tensor descriptors encoded with another L2 promotion than Triton's.

Triton's NVIDIA driver encodes every host tensor descriptor's CUtensorMap with 128-byte L2 promotion
(``fill_tma_descriptor``). :func:`l2_promotion` re-encodes the maps filled while it is active with 256 bytes
(an L2 miss of a TMA box row fetches the aligned 256 bytes around it: for a K-major weight box of 128-byte
rows, the next K block's rows too), by the driver's ``cuTensorMapEncodeTiled`` with the same arguments, after
checking that those arguments re-encode Triton's map byte for byte.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

PROMOTIONS = {0: 0, 64: 1, 128: 2, 256: 3}  # bytes -> CUtensorMapL2promotion
MAP_BYTES = 128
MAP_OFFSET = 128  # Triton's PyCUtensorMapObject: the object header, then the map aligned to 128 bytes


def _encode(target: int, args: tuple, promotion: int) -> None:
    ptr, swizzle, elem_size, elem_type, block, shape, strides, padding = args
    libcuda = ctypes.CDLL("libcuda.so.1")
    rank = len(block)
    u64, u32 = ctypes.c_uint64 * rank, ctypes.c_uint32 * rank
    dims = u64(*reversed([int(s) for s in shape]))
    byte_strides = (ctypes.c_uint64 * max(rank - 1, 1))(*[elem_size * int(s) for s in reversed(list(strides)[:-1])])
    result = libcuda.cuTensorMapEncodeTiled(
        ctypes.c_void_p(target), ctypes.c_int(elem_type), ctypes.c_uint32(rank), ctypes.c_void_p(ptr), dims,
        byte_strides, u32(*reversed([int(b) for b in block])), u32(*[1] * rank), ctypes.c_int(0),
        ctypes.c_int(swizzle), ctypes.c_int(PROMOTIONS[promotion]), ctypes.c_int(1 if padding == 1 else 0),
    )  # fmt: skip
    if result != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {result}) for a box {list(block)} of {shape}")


@contextmanager
def l2_promotion(promotion: int) -> Iterator[None]:
    """While active, tensor descriptors that Triton's driver encodes get ``promotion`` bytes of L2 promotion
    (0, 64, 128 or 256); RuntimeError where re-encoding Triton's own arguments does not give Triton's map."""
    import triton

    if promotion not in PROMOTIONS:
        raise ValueError(f"l2_promotion takes one of {sorted(PROMOTIONS)} bytes, got {promotion}")
    utils = triton.runtime.driver.active.utils
    original = utils.fill_tma_descriptor

    def fill(*args: Any) -> Any:
        desc = original(*args)
        target = id(desc) + MAP_OFFSET
        scratch = ctypes.create_string_buffer(2 * MAP_BYTES)
        aligned = (ctypes.addressof(scratch) + MAP_BYTES - 1) // MAP_BYTES * MAP_BYTES
        _encode(aligned, args, 128)
        if ctypes.string_at(aligned, MAP_BYTES) != ctypes.string_at(target, MAP_BYTES):
            raise RuntimeError("l2_promotion: Triton's tensor map is not where or what this module expects")
        _encode(target, args, promotion)
        return desc

    utils.fill_tma_descriptor = fill
    try:
        yield
    finally:
        utils.fill_tma_descriptor = original
