"""The block-scaled fp8 tile in Gluon, warp-specialized: a loader warp and two independent consumers.

A tile of 128 x 256 is split between two consumer warpgroups of 64 rows that share nothing but the loaded
stages, so that while one works on the CUDA cores the other's wgmma keeps the tensor cores busy. Within a
consumer the tile's two 128-column halves (L1's gate and up, or L2's two output blocks) take turns. Each K
block's product goes into a fresh accumulator, which the tensor cores sum over the block's 128 K values
only, and the CUDA cores scale it and add it to the half's float32 sum (DeepGEMM's promotion)::

    loader (1 warp):  wait empty[s]; TMA A [128 rows], B lo, B hi -> stage s (ready[s] counts the bytes)
    consumer c (4 warps, rows 64c .. 64c + 63), per K block k:
        wait ready[k]; part = lo(k); wait; sum_lo += part * scales   (beside the other consumer's wgmmas)
                       part = hi(k); wait; arrive empty[k]; sum_hi += part * scales
    then, per 128-column half: wait for this consumer's last TMA store; half -> its store buffer; TMA store

The tensor cores' fp8 accumulation is not float32: a sum kept in the wgmma accumulator over the whole K
drifts from float32 as K grows. ``FAST_ACCUM`` keeps it there all the same (``_k_loop_fast``, as
``persistent._scaled_step`` does in the Triton kernel's 128-row tiles, which have no registers for a
second accumulator): each accumulator in units of the scales of the K block its next wgmma adds, two K blocks per
loop iteration so that three of each four rescales run beside a wgmma of the same consumer::

    per two K blocks k, k + 1:
        wait ready[k]; issue lo(k), hi(k)
        wait lo(k);             rescale lo      beside hi(k)
        wait ready[k + 1]; issue lo(k + 1)
        wait hi(k); arrive empty[k];  rescale hi      beside lo(k + 1); issue hi(k + 1)
        wait lo(k + 1);         rescale lo      beside hi(k + 1)
        wait hi(k + 1); arrive empty[k + 1]; rescale hi (beside the other consumer's wgmmas)

In MegaMoE's fp8 check that is 1-2 % faster at the production load, 3x the error from the
quantization-aware reference there (1.35e-2 against 3.4-4.2e-3) and over the check's bound at H 7168.
No wgmma is in flight across the loop's back edge: ptxas (Triton 3.6-3.9) could not tell a group issued
in the iteration before from one issued in this one, and serialized every wgmma of the kernel (C7514)
when a rescale waited for the older of the two.

A, B and the scales are ``gemm_ceiling``'s: A [M, K] e4m3 with one scale per row and 128 K (a_scale
[M, K / 128]), B [N, K] e4m3 with one per 128 x 128 block (b_scale [N / 128, K / 128]).

The output leaves through shared memory and TMA, not as stores from the wgmma layout (two bf16 per
thread and row, 4-byte stores): those held each consumer for its tile's 64 x 256 values while the
tensor cores waited (the tile took 12 % longer at the L1 shape, 30 % at L2's). A consumer waits for its
last store only when it needs the buffer again, so a tile's last half drains beside the next tile's
wgmmas.

Measured with ``FAST_ACCUM`` on the H200 (Triton 3.6, ``gemm_ceiling``), us per tile per SM at the layer's L1
shape (L2's, K 1536): 32.6-33.1 (13.0-13.3) against 39.3-41.5 (15.3-16.4) for Triton's step with scales loaded
ahead and 28.8 (12.1) for cuBLAS without block scales; with 4-byte stores from the wgmma layout it took
36.3-36.8 (17.5-17.7), and its rescales switched off (timing only) 28.5 (11.9). Stages of 64 K columns (a
scale block over two of them, 6 or 8 stages) were slower: 34.8-34.9 (14.1). A Gluon tile without warp
specialization (both warpgroups in step, waits placed as above, a CTA barrier per two K blocks) was no faster
than Triton's step (41.2-42.1); one K block per consumer step instead of two, 37.1 before the TMA stores (36.4
with two); scales loaded an iteration ahead, no change. Four K blocks a step, or each step's last rescale
deferred beside the next step's first wgmma, took the tile from 32.3-32.5 to 30.8-31.3 (12.5-12.9) on an H100
with ptxas 12.8 and 12.9 (with 13.4 only the deferred loop gained, 32.1 -> 31.7), but left the persistent
call's L1 items as they were or made them slower (the MegaMoE README), so the loop stays. Triton 3.6 to 3.9
compile it with no wgmma serialized.

Without scales (bf16 A and B, ``SCALED`` off) the tile runs the persistent kernel's bf16 K loop
(``_k_loop_bf16``), so that loop can be timed on dense matrices too: on an H100 (Triton 3.6) 53.3 us per
tile per SM at L1's shape and 20.7-21.0 at L2's, cuBLAS's time (53.1-53.7 and 21.1-21.2).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

# The TMA copies' names moved between the tested Tritons (`async_copy_global_to_shared` and
# `async_copy_shared_to_global` up to 3.7, `async_load` and `async_store` from 3.8).
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
CONSUMER_ROWS = gl.constexpr(64)  # rows of a tile per consumer warpgroup (a wgmma's M)


@gluon.jit
def _tile_origin(tile, tiles_m, tiles_n, GROUP_M: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """(first row, first column) of ``tile`` in ``gemm_ceiling``'s order: groups of GROUP_M M tiles, M
    fastest inside a group."""
    group = tile // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    rows_in_group = gl.minimum(tiles_m - first_m, GROUP_M)
    m0 = (first_m + (tile % (GROUP_M * tiles_n)) % rows_in_group) * BLOCK_M
    n0 = ((tile % (GROUP_M * tiles_n)) // rows_in_group) * BLOCK_N
    return m0, n0


@gluon.jit
def _loader(a_desc, b_desc, a_bufs, lo_bufs, hi_bufs, ready, empty, M, N, K, NUM_PROGRAMS: gl.constexpr,
            GROUP_M: gl.constexpr, STAGES: gl.constexpr):  # fmt: skip
    """Every K block of this program's tiles into the stages in turn: a stage is loaded again once both
    consumers have arrived on its ``empty`` barrier (a fresh barrier passes the first round's wait)."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    HALF: gl.constexpr = b_desc.block_type.shape[0]
    tiles_m = M // BLOCK_M
    tiles_n = N // (2 * HALF)
    step = 0
    for tile in range(gl.program_id(0), tiles_m * tiles_n, NUM_PROGRAMS):
        m0, n0 = _tile_origin(tile, tiles_m, tiles_n, GROUP_M, BLOCK_M, 2 * HALF)
        step = _fill(a_desc, b_desc, a_bufs, lo_bufs, hi_bufs, ready, empty, m0, n0, K // BLOCK_K, step, STAGES)


@gluon.jit
def _fill(a_desc, b_desc, a_bufs, lo_bufs, hi_bufs, ready, empty, a_row, b_row, KB, step, STAGES: gl.constexpr):
    """K blocks 0 .. KB - 1 of a tile (A rows from ``a_row``, B's lo and hi blocks of rows from ``b_row``) into
    the stages from ``step`` on, each once both consumers have released it; returns the next step."""
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    HALF: gl.constexpr = b_desc.block_type.shape[0]
    for kb in range(KB):
        s = step % STAGES
        mbarrier.wait(empty.index(s), ((step // STAGES) & 1) ^ 1)  # a fresh barrier passes the first round
        bar = ready.index(s)
        mbarrier.expect(bar, a_desc.block_type.nbytes + 2 * b_desc.block_type.nbytes)
        _tma_load(a_desc, [a_row, kb * BLOCK_K], bar, a_bufs.index(s))
        _tma_load(b_desc, [b_row, kb * BLOCK_K], bar, lo_bufs.index(s))
        _tma_load(b_desc, [b_row + HALF, kb * BLOCK_K], bar, hi_bufs.index(s))
        step += 1
    return step


@gluon.jit
def _ratio(a_was, b_was, a_s, b_s):
    """The [rows, 1] factor that takes an accumulator from units of (a_was, b_was) to units of (a_s, b_s)."""
    return gl.expand_dims((a_was / a_s) * (b_was / b_s), 1)


@gluon.jit
def _row_scales(a_row, row_ok, lo_row, hi_row, kb, KB):
    """K block kb's scales: A's per row (1 for rows past the expert's), B's lo and hi blocks'; 1 past the
    last block (kb == KB)."""
    more = kb < KB
    a_s = gl.load(a_row + kb, mask=row_ok & more, other=1.0)
    return a_s, gl.load(lo_row + kb, mask=more, other=1.0), gl.load(hi_row + kb, mask=more, other=1.0)


@gluon.jit
def _k_loop(a_bufs, lo_bufs, hi_bufs, ready, empty, a_row, row_ok, lo_row, hi_row, KB, step, ROW0: gl.constexpr,
            STAGES: gl.constexpr, mma: gl.constexpr, FAST_ACCUM: gl.constexpr, GENERIC_A: gl.constexpr):  # fmt: skip
    """The block-scaled fp8 K loop of a consumer's rows: :func:`_k_loop_promoted`, or :func:`_k_loop_fast`
    where FAST_ACCUM (the same arguments and results). GENERIC_A: the stages' A rows were written by the
    generic proxy (cp.async), so each stage's wait is followed by a proxy fence before its wgmmas read them."""
    if FAST_ACCUM:
        return _k_loop_fast(a_bufs, lo_bufs, hi_bufs, ready, empty, a_row, row_ok, lo_row, hi_row, KB, step, ROW0,
                            STAGES, mma, GENERIC_A)  # fmt: skip
    else:
        return _k_loop_promoted(a_bufs, lo_bufs, hi_bufs, ready, empty, a_row, row_ok, lo_row, hi_row, KB, step, ROW0,
                                STAGES, mma, GENERIC_A)  # fmt: skip


@gluon.jit
def _wait_stage(ready, step, STAGES: gl.constexpr, GENERIC_A: gl.constexpr):
    """Wait until stage ``step % STAGES`` has landed; where GENERIC_A, then order its A rows (written by cp.async,
    the generic proxy) before this thread's wgmmas (the async proxy) read them."""
    mbarrier.wait(ready.index(step % STAGES), (step // STAGES) & 1)
    if GENERIC_A:
        fence_async_shared()


@gluon.jit
def _k_loop_promoted(a_bufs, lo_bufs, hi_bufs, ready, empty, a_row, row_ok, lo_row, hi_row, KB, step,
                     ROW0: gl.constexpr, STAGES: gl.constexpr, mma: gl.constexpr, GENERIC_A: gl.constexpr):  # fmt: skip
    """A consumer's rows (``ROW0`` of the stages' A rows on) of one tile over KB K blocks from ``step`` on:
    (lo, hi, next step), the block-scaled sums. Each K block's product goes into a fresh accumulator (the
    tensor cores sum 128 K values) that the CUDA cores scale and add to the float32 sum, lo then hi, as
    DeepGEMM promotes it. ``a_row``: the rows' A scales (``row_ok``: the rows that have them); ``lo_row`` /
    ``hi_row``: the B blocks'; each block's scales are loaded during the block before."""
    HALF: gl.constexpr = lo_bufs.shape[1]
    sum_lo = gl.zeros([CONSUMER_ROWS, HALF], gl.float32, layout=mma)
    sum_hi = gl.zeros([CONSUMER_ROWS, HALF], gl.float32, layout=mma)
    part = gl.zeros([CONSUMER_ROWS, HALF], gl.float32, layout=mma)
    a_s, lo_s, hi_s = _row_scales(a_row, row_ok, lo_row, hi_row, 0, KB)
    for kb in range(KB):
        a_n, lo_n, hi_n = _row_scales(a_row, row_ok, lo_row, hi_row, kb + 1, KB)
        s = step % STAGES
        _wait_stage(ready, step, STAGES, GENERIC_A)
        a = a_bufs.index(s).slice(ROW0, CONSUMER_ROWS)
        part = warpgroup_mma(a, lo_bufs.index(s).permute((1, 0)), part, use_acc=False, is_async=True)
        part = warpgroup_mma_wait(num_outstanding=0, deps=(part,))
        sum_lo += part * gl.expand_dims(a_s * lo_s, 1)
        part = warpgroup_mma(a, hi_bufs.index(s).permute((1, 0)), part, use_acc=False, is_async=True)
        part = warpgroup_mma_wait(num_outstanding=0, deps=(part,))
        mbarrier.arrive(empty.index(s), count=1)
        sum_hi += part * gl.expand_dims(a_s * hi_s, 1)
        a_s, lo_s, hi_s = a_n, lo_n, hi_n
        step += 1
    return sum_lo, sum_hi, step


@gluon.jit
def _k_loop_fast(a_bufs, lo_bufs, hi_bufs, ready, empty, a_row, row_ok, lo_row, hi_row, KB, step,
                 ROW0: gl.constexpr, STAGES: gl.constexpr, mma: gl.constexpr, GENERIC_A: gl.constexpr):  # fmt: skip
    """:func:`_k_loop_promoted`'s contract (KB even), with each accumulator's whole sum kept in the tensor cores:
    in units of the scales of the K block its next wgmma adds (the last ratio takes it to units of 1), two
    K blocks per iteration in the order of the module docstring."""
    HALF: gl.constexpr = lo_bufs.shape[1]
    acc_lo = gl.zeros([CONSUMER_ROWS, HALF], gl.float32, layout=mma)
    acc_hi = gl.zeros([CONSUMER_ROWS, HALF], gl.float32, layout=mma)
    a_s, lo_s, hi_s = _row_scales(a_row, row_ok, lo_row, hi_row, 0, KB)
    for kb in range(0, KB, 2):  # two K blocks per iteration: no wgmma in flight across the back edge
        a_1, lo_1, hi_1 = _row_scales(a_row, row_ok, lo_row, hi_row, kb + 1, KB)
        a_2, lo_2, hi_2 = _row_scales(a_row, row_ok, lo_row, hi_row, kb + 2, KB)
        s0 = step % STAGES
        _wait_stage(ready, step, STAGES, GENERIC_A)
        a = a_bufs.index(s0).slice(ROW0, CONSUMER_ROWS)
        lo = warpgroup_mma(a, lo_bufs.index(s0).permute((1, 0)), acc_lo, is_async=True)
        hi = warpgroup_mma(a, hi_bufs.index(s0).permute((1, 0)), acc_hi, is_async=True)
        acc_lo, hi = warpgroup_mma_wait(num_outstanding=1, deps=(lo, hi))
        acc_lo = acc_lo * _ratio(a_s, lo_s, a_1, lo_1)  # beside hi's wgmma
        s1 = (step + 1) % STAGES
        _wait_stage(ready, step + 1, STAGES, GENERIC_A)
        a = a_bufs.index(s1).slice(ROW0, CONSUMER_ROWS)
        lo = warpgroup_mma(a, lo_bufs.index(s1).permute((1, 0)), acc_lo, is_async=True)
        acc_hi, lo = warpgroup_mma_wait(num_outstanding=1, deps=(hi, lo))
        mbarrier.arrive(empty.index(s0), count=1)
        acc_hi = acc_hi * _ratio(a_s, hi_s, a_1, hi_1)  # beside the second block's lo
        hi = warpgroup_mma(a, hi_bufs.index(s1).permute((1, 0)), acc_hi, is_async=True)
        acc_lo, hi = warpgroup_mma_wait(num_outstanding=1, deps=(lo, hi))
        acc_lo = acc_lo * _ratio(a_1, lo_1, a_2, lo_2)  # beside hi's wgmma
        acc_hi = warpgroup_mma_wait(num_outstanding=0, deps=(hi,))
        mbarrier.arrive(empty.index(s1), count=1)
        acc_hi = acc_hi * _ratio(a_1, hi_1, a_2, hi_2)  # beside the other consumer's wgmmas
        a_s, lo_s, hi_s = a_2, lo_2, hi_2
        step += 2
    return acc_lo, acc_hi, step


@gluon.jit
def _k_loop_bf16(a_bufs, lo_bufs, hi_bufs, ready, empty, KB, step, ROW0: gl.constexpr, STAGES: gl.constexpr,
                 mma: gl.constexpr, GENERIC_A: gl.constexpr):  # fmt: skip
    """A consumer's rows (``ROW0`` of the stages' A rows on) of one bf16 tile over KB K blocks (a multiple of
    BURST) from ``step`` on: (lo, hi, next step). BURST K blocks a loop iteration, their wgmmas issued as
    their stages land, each stage released once the wgmmas that read it are done; the last BURST drains
    before the back edge (no wgmma in flight across it: ptxas serialized every wgmma of a kernel that
    left one, ``triton_version.serializes_wgmma_in_flight_across_loops``), while the other consumer's
    wgmmas keep the tensor cores busy. On dense matrices the drains cost nothing measurable: 8 K blocks an
    iteration, or one with its wgmmas in flight across the back edge (Triton 3.6), took the same time."""
    BURST: gl.constexpr = 4
    HALF: gl.constexpr = lo_bufs.shape[1]
    acc_lo = gl.zeros([CONSUMER_ROWS, HALF], gl.float32, layout=mma)
    acc_hi = gl.zeros([CONSUMER_ROWS, HALF], gl.float32, layout=mma)
    for _ in range(0, KB, BURST):
        for j in gl.static_range(BURST):
            s = (step + j) % STAGES
            _wait_stage(ready, step + j, STAGES, GENERIC_A)
            a = a_bufs.index(s).slice(ROW0, CONSUMER_ROWS)
            acc_lo = warpgroup_mma(a, lo_bufs.index(s).permute((1, 0)), acc_lo, is_async=True)
            acc_hi = warpgroup_mma(a, hi_bufs.index(s).permute((1, 0)), acc_hi, is_async=True)
            if j > 0:  # the block before is done: its stage goes back
                acc_lo, acc_hi = warpgroup_mma_wait(num_outstanding=2, deps=(acc_lo, acc_hi))
                mbarrier.arrive(empty.index((step + j - 1) % STAGES), count=1)
        acc_lo, acc_hi = warpgroup_mma_wait(num_outstanding=0, deps=(acc_lo, acc_hi))
        mbarrier.arrive(empty.index((step + BURST - 1) % STAGES), count=1)
        step += BURST
    return acc_lo, acc_hi, step


@gluon.jit
def _store(c_desc, c_buf, acc, row, col):
    """acc as bf16 into C at (row, col) through ``c_buf`` by TMA, once the buffer's last store has read it."""
    tma.store_wait(0)
    c_buf.store(acc.to(gl.bfloat16))
    fence_async_shared()
    _tma_store(c_desc, [row, col], c_buf)


@gluon.jit
def _consumer(a_bufs, lo_bufs, hi_bufs, ready, empty, c_desc, c_buf, a_scale, b_scale, M, N, K, ROW0: gl.constexpr,
              NUM_PROGRAMS: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, SCALED: gl.constexpr,
              FAST_ACCUM: gl.constexpr):  # fmt: skip
    """Rows [ROW0, ROW0 + 64) of each of this program's tiles, both 128-column halves, stored as bf16 through
    ``c_buf`` (this consumer's own) by TMA. A store is waited for only when the buffer is needed again, so
    the next tile's wgmmas start while the last half drains."""
    ROWS: gl.constexpr = CONSUMER_ROWS
    BLOCK_M: gl.constexpr = a_bufs.shape[1]
    BLOCK_K: gl.constexpr = a_bufs.shape[2]
    HALF: gl.constexpr = lo_bufs.shape[1]
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                  instr_shape=[16, HALF, 32 if SCALED else 16])  # fmt: skip
    rows_layout: gl.constexpr = gl.SliceLayout(1, mma)
    tiles_m = M // BLOCK_M
    tiles_n = N // (2 * HALF)
    KB = K // BLOCK_K
    step = 0
    for tile in range(gl.program_id(0), tiles_m * tiles_n, NUM_PROGRAMS):
        m0, n0 = _tile_origin(tile, tiles_m, tiles_n, GROUP_M, BLOCK_M, 2 * HALF)
        if SCALED:
            offs_m = m0 + ROW0 + gl.arange(0, ROWS, layout=rows_layout)
            lo_row = b_scale + (n0 // HALF) * KB
            acc_lo, acc_hi, step = _k_loop(a_bufs, lo_bufs, hi_bufs, ready, empty, a_scale + offs_m * KB, offs_m < M,
                                           lo_row, lo_row + KB, KB, step, ROW0, STAGES, mma, FAST_ACCUM,
                                           False)  # fmt: skip
        else:
            acc_lo, acc_hi, step = _k_loop_bf16(a_bufs, lo_bufs, hi_bufs, ready, empty, KB, step, ROW0, STAGES, mma,
                                                False)  # fmt: skip
        _store(c_desc, c_buf, acc_lo, m0 + ROW0, n0)
        _store(c_desc, c_buf, acc_hi, m0 + ROW0, n0 + HALF)
    tma.store_wait(0)


@gluon.jit
def scaled_tiles(
    a_desc, b_desc, c_desc, a_scale, b_scale, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr,
    NUM_PROGRAMS: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr,
    LOADER_REGS: gl.constexpr, SCALED: gl.constexpr, FAST_ACCUM: gl.constexpr,
):  # fmt: skip
    """C [M, N] (bf16) = the block-scaled A [M, K] @ B [N, K]^T, a [128, 2 x 128] tile at a time (from the
    descriptors' [128, 128] blocks; C through ``c_desc``'s [64, 128] blocks), tiles handed out round-robin to
    NUM_PROGRAMS programs. Launched with 4 warps: the first consumer; a second consumer and the loader (1
    warp) are worker partitions with CONSUMER_REGS and LOADER_REGS registers per thread. M and N are
    multiples of the tile, K of 256, STAGES 2 to 4 (48 KB each, beside the consumers' two 16 KB store
    buffers). FAST_ACCUM: each sum kept in the tensor cores (:func:`_k_loop_fast`). SCALED off: bf16 A and B
    in [128, 64] blocks, no scales (``a_scale`` and ``b_scale`` are not read), the persistent kernel's bf16 K
    loop (``_k_loop_bf16``). The shape is compiled in: passed at run time, the tile loop's values left the
    second consumer's promoted K loop too few registers (ptxas of Triton 3.6-3.9 spilled inside it, and the
    tile took twice its time)."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    HALF: gl.constexpr = b_desc.block_type.shape[0]
    gl.static_assert(BLOCK_M == 2 * CONSUMER_ROWS, "a tile is two consumers' rows")
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    lo_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, HALF, BLOCK_K], b_desc.layout)
    hi_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, HALF, BLOCK_K], b_desc.layout)
    c_bufs = gl.allocate_shared_memory(c_desc.dtype, [2] + c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # one arrival per consumer
    gl.warp_specialize([
        (_consumer, (a_bufs, lo_bufs, hi_bufs, ready, empty, c_desc, c_bufs.index(0), a_scale, b_scale, M, N, K, 0,
                     NUM_PROGRAMS, GROUP_M, STAGES, SCALED, FAST_ACCUM)),
        (_consumer, (a_bufs, lo_bufs, hi_bufs, ready, empty, c_desc, c_bufs.index(1), a_scale, b_scale, M, N, K,
                     CONSUMER_ROWS, NUM_PROGRAMS, GROUP_M, STAGES, SCALED, FAST_ACCUM)),
        (_loader, (a_desc, b_desc, a_bufs, lo_bufs, hi_bufs, ready, empty, M, N, K, NUM_PROGRAMS, GROUP_M, STAGES)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])  # fmt: skip


def consumer_regs(scaled: bool, fast_accum: bool) -> int:
    """Registers per thread (setmaxnreg) of the second consumer of :func:`scaled_tiles` and of the persistent
    MegaMoE kernel's Gluon program; Triton gives the first consumer (the default partition) what the 64K
    registers leave beside it and the loader's warpgroup at 40: 464 minus this, rounded down to 8. 248
    (216 for the first) for the promoted fp8 loop's two 64 x 128 sums and a K block's product: at 232 each
    Triton 3.7's ptxas spilled inside the persistent kernel's K loops, at 240 more; 232 for both where a
    consumer holds two accumulators."""
    return 248 if scaled and not fast_accum else 232


def scaled_tiles_call(
    a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor | None, b_scale: torch.Tensor | None, c: torch.Tensor,
    programs: int, stages: int = 4, group_m: int = 8, fast_accum: bool = False,
) -> Callable[[], None]:  # fmt: skip
    """A callable that computes c = the block-scaled a @ b^T with :func:`scaled_tiles` on min(programs, tiles)
    programs, each time it is called. a [M, K] and b [N, K] e4m3, a_scale [M, K / 128] and b_scale
    [N / 128, K / 128] float32, c [M, N] bf16; or a and b bf16 without scales (None). ``fast_accum`` (fp8):
    the sums kept in the tensor cores, rescaled per K block, not promoted."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    (m, k), n = a.shape, b.shape[0]
    scaled = a.dtype == torch.float8_e4m3fn
    given = (a_scale is not None, b_scale is not None)
    if a.dtype != b.dtype or a.dtype not in (torch.float8_e4m3fn, torch.bfloat16) or given != (scaled, scaled):
        raise ValueError(f"scaled_tiles takes a and b both float8_e4m3fn with a_scale and b_scale, or both bfloat16 "
                         f"without (None); got {a.dtype} and {b.dtype}, scales {'given' if any(given) else 'None'}")
    if m % 128 or n % 256 or k % 256 or not 2 <= stages <= 4:  # fast_accum: two K blocks a step; bf16: four of 64
        raise ValueError(f"scaled_tiles needs M % 128, N % 256 and K % 256 to be 0 and 2 to 4 stages (got M={m}, "
                         f"N={n}, K={k}, stages={stages})")  # fmt: skip
    block = [128, 128 if scaled else 64]
    layout = gl.NVMMASharedLayout.get_default_for(block, gl.float8e4nv if scaled else gl.bfloat16)
    a_desc = TensorDescriptor.from_tensor(a, block, layout)
    b_desc = TensorDescriptor.from_tensor(b, block, layout)
    c_desc = TensorDescriptor.from_tensor(c, [64, 128], gl.NVMMASharedLayout.get_default_for([64, 128], gl.bfloat16))
    grid = (min(programs, (m // 128) * (n // 256)),)
    if not scaled:
        a_scale = b_scale = c  # not read

    def run() -> None:
        scaled_tiles[grid](a_desc, b_desc, c_desc, a_scale, b_scale, m, n, k, NUM_PROGRAMS=grid[0], GROUP_M=group_m,
                           STAGES=stages, CONSUMER_REGS=consumer_regs(scaled, fast_accum), LOADER_REGS=40,
                           SCALED=scaled, FAST_ACCUM=fast_accum, num_warps=4)  # fmt: skip

    return run
