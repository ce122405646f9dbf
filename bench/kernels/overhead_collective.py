"""The kernel of bench.compile_overhead that calls an NVSHMEM collective from ``triton_raw_ext.nvshmem``:
``raw_kernel``'s work plus an int32 min-reduce over the world team (``collective_kernel``)."""

import triton
import triton.language as tl

import triton_raw_ext.nvshmem as shm

from .overhead_raw import RAW_SIGNATURE, bench_add_one

COLLECTIVE_SIGNATURE = RAW_SIGNATURE | {"dst": "*i32", "src": "*i32", "nreduce": "i64"}
CONSTEXPRS = {"BLOCK": 1024}


@triton.jit
def collective_kernel(x_ptr, y_ptr, n, dst, src, nreduce, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, bench_add_one(x * 2.0), mask=mask)
    shm.int32_min_reduce_block(shm.TEAM_WORLD, dst, src, nreduce)
