"""The block-scaled fp8 tile in Gluon, with the wgmma waits placed by hand.

Triton's pipeliner waits for every wgmma whose accumulator is read by anything but the next dot
(``wgmma.wait_group 0``), so in the persistent layer's fp8 step (``persistent._scaled_step``) at most
one of a tile's two rescales runs beside a wgmma. Here the tile's two 128-column halves (L1's gate and
up, or L2's two output blocks) take turns over two K blocks per loop iteration, and three of the four
rescales run while the other half's wgmma is in flight::

    issue lo(k), hi(k)
    wait <= 1 in flight (lo done);  rescale lo      beside hi(k)
    issue lo(k+1)
    wait <= 1 in flight (hi done);  rescale hi      beside lo(k+1)
    issue hi(k+1)
    wait <= 1 in flight (lo done);  rescale lo      beside hi(k+1)
    wait 0;                         rescale hi

Nothing is in flight across the loop's back edge: with a wgmma in flight there, ptxas serialized every
wgmma of the kernel (C7514) or waited before the rescale (C7517) in each form tried. Each accumulator is
kept in units of the scales of the K block its next wgmma adds, as in ``_scaled_step`` (ratio = those
scales over the next block's; 1 past the last block), so a tile holds 128 rows. A, B and the scales are
``gemm_ceiling``'s: A [M, K] e4m3 with one scale per row and 128 K (a_scale [M, K / 128]), B [N, K] e4m3
with one per 128 x 128 block (b_scale [N / 128, K / 128]). The operands come through TMA into STAGES
stages; a stage is loaded again after every warpgroup's wgmmas that read it are done (a CTA barrier
after each iteration's last wait).

Measured on the H200 (Triton 3.6, ``gemm_ceiling``, 4 stages): 41.2 us per tile per SM at the layer's L1
shape, as fast as Triton's step with scales loaded ahead (41.5) and well behind the unscaled tile
(28.9); 19.6 against 16.3 at the L2 shape. The hand-placed waits do not close the gap.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

# Names that moved between the tested Tritons: the CTA barrier (`thread_barrier` in 3.6, `barrier` from
# 3.7) and the TMA load (`async_copy_global_to_shared` up to 3.7, `async_load` from 3.8).
_cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared


@gluon.jit
def _load_step(a_desc, b_desc, a_bufs, lo_bufs, hi_bufs, ready, step, m0, n0, k):
    """TMA loads of A [m0, k], B's lo block [n0, k] and hi block [n0 + 128, k] into stage step % STAGES."""
    STAGES: gl.constexpr = a_bufs.shape[0]
    HALF: gl.constexpr = b_desc.block_type.shape[0]
    s = step % STAGES
    bar = ready.index(s)
    mbarrier.expect(bar, a_desc.block_type.nbytes + 2 * b_desc.block_type.nbytes)
    _tma_load(a_desc, [m0, k], bar, a_bufs.index(s))
    _tma_load(b_desc, [n0, k], bar, lo_bufs.index(s))
    _tma_load(b_desc, [n0 + HALF, k], bar, hi_bufs.index(s))


@gluon.jit
def _scales(a_row, lo_row, hi_row, kb, KB, rows_layout: gl.constexpr):
    """K block kb's scales: A's per row, B's lo and hi blocks'; 1 past the last block (kb == KB)."""
    more = kb < KB
    a_s = gl.load(a_row + kb, mask=gl.full(a_row.shape, 0, gl.int1, layout=rows_layout) | more, other=1.0)
    return a_s, gl.load(lo_row + kb, mask=more, other=1.0), gl.load(hi_row + kb, mask=more, other=1.0)


@gluon.jit
def _ratio(a_was, b_was, a_s, b_s):
    """The [rows, 1] factor that takes an accumulator from units of (a_was, b_was) to units of (a_s, b_s)."""
    return gl.expand_dims((a_was / a_s) * (b_was / b_s), 1)


@gluon.jit
def _wgmma(a_bufs, b_bufs, stage, acc):
    """Issue acc + A @ B^T on the operands in ``stage`` (async: returns the accumulator's token)."""
    return warpgroup_mma(a_bufs.index(stage), b_bufs.index(stage).permute((1, 0)), acc, is_async=True)


@gluon.jit
def scaled_tiles(
    a_desc, b_desc, c_ptr, a_scale, b_scale, M, N, K, NUM_PROGRAMS: gl.constexpr, GROUP_M: gl.constexpr,
    STAGES: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """C [M, N] (bf16) = the block-scaled A [M, K] @ B [N, K]^T, a [BLOCK_M, 2 x 128] tile at a time (BLOCK_M
    and the K block from ``a_desc``'s block, 128 x 128 from ``b_desc``'s), tiles handed out round-robin to
    NUM_PROGRAMS programs in ``gemm_ceiling``'s order. M and N are multiples of the tile, K of two K blocks;
    STAGES is even."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    HALF: gl.constexpr = b_desc.block_type.shape[0]
    gl.static_assert(STAGES % 2 == 0, "STAGES must be even: a loop iteration takes two K blocks")
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, HALF, 32])  # fmt: skip
    rows_layout: gl.constexpr = gl.SliceLayout(1, mma)
    cols_layout: gl.constexpr = gl.SliceLayout(0, mma)

    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    lo_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, HALF, BLOCK_K], b_desc.layout)
    hi_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, HALF, BLOCK_K], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)

    tiles_m = M // BLOCK_M
    tiles_n = N // (2 * HALF)
    KB = K // BLOCK_K
    step = 0  # K blocks this program has loaded before the current tile: the stage and phase of each
    for tile in range(gl.program_id(0), tiles_m * tiles_n, NUM_PROGRAMS):
        group = tile // (GROUP_M * tiles_n)
        first_m = group * GROUP_M
        rows_in_group = gl.minimum(tiles_m - first_m, GROUP_M)
        m0 = (first_m + (tile % (GROUP_M * tiles_n)) % rows_in_group) * BLOCK_M
        n0 = ((tile % (GROUP_M * tiles_n)) // rows_in_group) * (2 * HALF)
        for i in gl.static_range(STAGES):
            if i < KB:
                _load_step(a_desc, b_desc, a_bufs, lo_bufs, hi_bufs, ready, step + i, m0, n0, i * BLOCK_K)

        offs_m = m0 + gl.arange(0, BLOCK_M, layout=rows_layout)
        a_row = a_scale + offs_m * KB
        lo_row = b_scale + (n0 // HALF) * KB
        hi_row = lo_row + KB
        # Each accumulator is kept in units of the scales of the K block its next wgmma adds.
        acc_lo = gl.zeros([BLOCK_M, HALF], gl.float32, layout=mma)
        acc_hi = gl.zeros([BLOCK_M, HALF], gl.float32, layout=mma)
        a0, lo0, hi0 = _scales(a_row, lo_row, hi_row, 0, KB, rows_layout)
        a1, lo1, hi1 = _scales(a_row, lo_row, hi_row, 1, KB, rows_layout)
        for kb in range(0, KB, 2):
            # Blocks kb and kb + 1; the scales of kb + 2 and kb + 3 load meanwhile (the loop's next two).
            a2, lo2, hi2 = _scales(a_row, lo_row, hi_row, kb + 2, KB, rows_layout)
            a3, lo3, hi3 = _scales(a_row, lo_row, hi_row, kb + 3, KB, rows_layout)
            s0 = (step + kb) % STAGES
            s1 = s0 + 1
            mbarrier.wait(ready.index(s0), ((step + kb) // STAGES) & 1)
            lo = _wgmma(a_bufs, lo_bufs, s0, acc_lo)
            hi = _wgmma(a_bufs, hi_bufs, s0, acc_hi)
            acc_lo = warpgroup_mma_wait(num_outstanding=1, deps=(lo,))
            acc_lo = acc_lo * _ratio(a0, lo0, a1, lo1)  # beside hi's wgmma
            mbarrier.wait(ready.index(s1), ((step + kb + 1) // STAGES) & 1)
            lo = _wgmma(a_bufs, lo_bufs, s1, acc_lo)
            acc_hi = warpgroup_mma_wait(num_outstanding=1, deps=(hi,))
            acc_hi = acc_hi * _ratio(a0, hi0, a1, hi1)  # beside lo's
            hi = _wgmma(a_bufs, hi_bufs, s1, acc_hi)
            acc_lo = warpgroup_mma_wait(num_outstanding=1, deps=(lo,))
            acc_lo = acc_lo * _ratio(a1, lo1, a2, lo2)  # beside hi's
            # acc_lo passes through the last wait so that its rescale is computed before it
            acc_hi, acc_lo = warpgroup_mma_wait(num_outstanding=0, deps=(hi, acc_lo))
            acc_hi = acc_hi * _ratio(a1, hi1, a2, hi2)
            a0, lo0, hi0, a1, lo1, hi1 = a2, lo2, hi2, a3, lo3, hi3
            # Both blocks' wgmmas are done in this warpgroup; after the barrier, in every warpgroup.
            _cta_barrier()
            for i in gl.static_range(2):
                if kb + STAGES + i < KB:
                    _load_step(a_desc, b_desc, a_bufs, lo_bufs, hi_bufs, ready, step + kb + STAGES + i, m0, n0,
                               (kb + STAGES + i) * BLOCK_K)  # fmt: skip
        step += KB
        # The scales past the last block are 1: the accumulators leave the loop scaled.
        offs_n = n0 + gl.arange(0, HALF, layout=cols_layout)
        out = c_ptr + gl.expand_dims(offs_m, 1) * N + gl.expand_dims(offs_n, 0)
        gl.store(out, acc_lo.to(gl.bfloat16))
        gl.store(out + HALF, acc_hi.to(gl.bfloat16))
        _cta_barrier()  # every warpgroup's wgmmas done before the next tile's first loads reuse the stages

    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))


def scaled_tiles_call(
    a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor, c: torch.Tensor, programs: int,
    stages: int = 4, group_m: int = 8,
) -> Callable[[], None]:  # fmt: skip
    """A callable that computes c = the block-scaled a @ b^T with :func:`scaled_tiles` on min(programs, tiles)
    programs of 8 warps, each time it is called. a [M, K] and b [N, K] e4m3, a_scale [M, K / 128] and
    b_scale [N / 128, K / 128] float32, c [M, N] bf16."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    (m, k), n = a.shape, b.shape[0]
    if m % 128 or n % 256 or k % 256 or stages % 2:
        raise ValueError(f"scaled_tiles needs M % 128, N % 256, K % 256 and stages % 2 to be 0 (got M={m}, "
                         f"N={n}, K={k}, stages={stages})")  # fmt: skip
    layout = gl.NVMMASharedLayout.get_default_for([128, 128], gl.float8e4nv)
    a_desc = TensorDescriptor.from_tensor(a, [128, 128], layout)
    b_desc = TensorDescriptor.from_tensor(b, [128, 128], layout)
    grid = (min(programs, (m // 128) * (n // 256)),)

    def run() -> None:
        scaled_tiles[grid](a_desc, b_desc, c, a_scale, b_scale, m, n, k, NUM_PROGRAMS=grid[0], GROUP_M=group_m,
                           STAGES=stages, num_warps=8)  # fmt: skip

    return run
