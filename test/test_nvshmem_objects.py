"""Which NVSHMEM functions are linked as precompiled objects, and the register limit they are built with."""

from __future__ import annotations

import pytest

from triton_raw_ext.nvshmem_objects import links_separately, register_limit

COLLECTIVES = [
    "nvshmem_barrier_all", "nvshmemx_barrier_all_block", "nvshmem_barrier", "nvshmemx_barrier_warp",
    "nvshmem_sync_all", "nvshmemx_sync_all_warp", "nvshmem_team_sync", "nvshmemx_team_sync_block",
    "nvshmemx_broadcastmem_block", "nvshmem_int32_broadcast", "nvshmemx_alltoallmem_warp", "nvshmem_float_alltoall",
    "nvshmemx_fcollectmem_block", "nvshmemx_int32_min_reduce_block", "nvshmem_double_sum_reduce",
    "nvshmemx_uint8_xor_reducescatter_warp",
]  # fmt: skip
POINT_TO_POINT = [
    "nvshmem_my_pe", "nvshmem_team_my_pe", "nvshmem_int_p", "nvshmemx_putmem_signal_block", "nvshmem_signal_wait_until",
    "nvshmem_quiet", "nvshmem_fence", "nvshmem_int32_atomic_fetch_add", "nvshmemx_getmem_nbi_warp", "nvshmem_ptr",
]  # fmt: skip


@pytest.mark.parametrize("symbol", COLLECTIVES)
def test_collectives_link_separately(symbol):
    assert links_separately(symbol)


@pytest.mark.parametrize("symbol", POINT_TO_POINT)
def test_point_to_point_calls_are_inlined(symbol):
    assert not links_separately(symbol)


@pytest.mark.parametrize("num_warps,maxnreg,limit", [(1, None, 255), (4, None, 255), (8, None, 255), (16, None, 128),
                                                     (32, None, 64), (4, 96, 96), (16, 200, 128)])
def test_register_limit_lets_the_block_launch(num_warps, maxnreg, limit):
    assert register_limit(num_warps, maxnreg) == limit
    assert limit * num_warps * 32 <= 65536 + num_warps * 32  # 255 registers take 256 in the file
