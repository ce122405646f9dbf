"""The persistent layer's fp8 GEMM items in Gluon, warp-specialized: L1 tiles (gate and up, SwiGLU, h
quantized per 128 columns) and L2 tiles over a call's pair layout, with ``gluon_scaled_tiles``' loader and
consumers.

An item is the persistent kernel's (``persistent.moe_persistent``): L1 tile (M, N) of 128 pairs x (128
gate + 128 up columns), then L2 tile (M, N) of 128 pairs x 256 output columns, in ``kernels._tile_of``'s
order over the call's M tiles (``layout[0]``), and :func:`moe_gemm_items` runs every item of a call
once its rows have landed. The operands are the persistent kernel's: the pairs' A rows in layout order
(``a_sorted``, the ``tma_a`` knob) with their scales gathered through ``sorted_row``; the interleaved
``w1q`` [E * 2I, H] (each 128 gate rows, then the same 128 up rows) and ``w2q`` [E * H, I], K-major; h
[pairs, I] e4m3 with ``h_scale`` [pairs, I / 128]; ``y_pair`` [pairs, H] bf16.

Per program, three partitions (as in ``gluon_scaled_tiles``)::

    loader (1 warp):  takes the next item from the call's counter and hands it to the consumers (a ring
                      of two slots in shared memory); waits until the item's M tile's rows have landed
                      (L1) or its L1 tiles are done (L2); then every K block of A rows, B lo, B hi into
                      the stages
    consumer c (4 warps, rows 64c .. 64c + 63 of each tile): once the item's first stage has landed
                      (so the loader's wait is behind it), the block-scaled K loop of
                      gluon_scaled_tiles; then L1: silu(gate) * up quantized to h and h_scale, the M
                      tile's L1 count raised; L2: y_pair. Both store 16 bytes per thread after a layout
                      conversion, masked to the expert's rows (an expert's last, partial tile ends in the
                      next expert's rows)

Outputs are not stored by TMA, unlike ``gluon_scaled_tiles``' (whose lesson was the 4-byte stores of the
wgmma layout, not the lack of TMA): a partial tile needs masked stores anyway, and without store buffers
the kernel holds four stages, which the layer's loads need, its weights coming from HBM (H200, random
routing: 241.0 us for every item with four stages, 247.6 with three, 249.8 with three and y_pair by TMA).

No deadlock at any grid size: items are taken in increasing order, an L1 item waits only for rows that
have landed (before the launch), and an L2 item only for L1 items taken before it, which their programs
finish without waiting on anything their loader does next (a loader takes its next item only after
loading every K block of the last).

Counts (``counters``, zero at launch): [0] the next item; [1 + m] one release add per consumer and L1
tile of M tile m (2 N1 once its L1 tiles are done). ``landed`` [M tiles] holds the rows of each M tile
that have landed (the persistent kernel's LANDED counters). Bounded waits (``moe_wait_async``): a count
that does not fill within ``wait_ms`` reports and traps.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from triton_raw_ext import dialect

from .gluon_scaled_tiles import CONSUMER_ROWS, _k_loop, _tma_load
from .kernels import DEVICE_FILE, _tile_of
from .persistent import TRACE_WORDS, WAIT_L1, WAIT_LANDED, _globaltimer, _trace_item
from .quant import AMAX_FLOOR, FP8_MAX

QBLOCK = gl.constexpr(128)  # the fp8 scale block: a K step, an L1 tile's gate (or up) columns
RING = gl.constexpr(2)  # items the loader may have handed out ahead of the consumers
_FP8_MAX = gl.constexpr(FP8_MAX)
_AMAX_FLOOR = gl.constexpr(AMAX_FLOOR)
# A partition's CTA barrier (its own warps only inside warp_specialize): `thread_barrier` in Triton 3.6
_barrier = getattr(gl, "barrier", None) or gl.thread_barrier


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def moe_wait_async(counter, expected, what, me, timeout_ms): ...


@gluon.jit
def _tile_rows(layout_ptr, pid_m, E_LOC: gl.constexpr, EL_P2: gl.constexpr, WARPS: gl.constexpr):
    """(local expert, first pair, end of the expert's pairs) of 128-pair M tile ``pid_m`` of the layout
    (``persistent._tile_rows``), in a partition of WARPS warps."""
    ee = gl.arange(0, EL_P2, layout=gl.BlockedLayout([1], [32], [WARPS], [0]))
    inside = ee < E_LOC
    total = gl.load(layout_ptr + 1 + ee, mask=inside, other=0, cache_modifier=".cg")
    first_pair = gl.load(layout_ptr + 1 + EL_P2 + ee, mask=inside, other=0, cache_modifier=".cg")
    first_tile = gl.load(layout_ptr + 1 + 2 * EL_P2 + ee, mask=inside, other=0, cache_modifier=".cg")
    tile_end = gl.where(inside, first_tile + (total + QBLOCK - 1) // QBLOCK, 0x7FFFFFFF)
    expert = gl.sum((tile_end <= pid_m).to(gl.int32), axis=0)
    this = ee == expert
    start = gl.sum(gl.where(this, first_pair, 0), axis=0)
    row0 = start + (pid_m - gl.sum(gl.where(this, first_tile, 0), axis=0)) * QBLOCK
    return expert, row0, start + gl.sum(gl.where(this, total, 0), axis=0)


@gluon.jit
def _item(layout_ptr, item, n_mt, N1: gl.constexpr, N2: gl.constexpr, E_LOC: gl.constexpr, EL_P2: gl.constexpr,
          GROUP_M: gl.constexpr, WARPS: gl.constexpr):  # fmt: skip
    """(is L2, M tile, N tile, expert, first pair, end of the expert's pairs) of ``item``."""
    is_l2 = item >= n_mt * N1
    if is_l2:
        pid_m, pid_n = _tile_of(item - n_mt * N1, n_mt, N2, GROUP_M)
    else:
        pid_m, pid_n = _tile_of(item, n_mt, N1, GROUP_M)
    expert, row0, row_end = _tile_rows(layout_ptr, pid_m, E_LOC, EL_P2, WARPS)
    return is_l2, pid_m, pid_n, expert, row0, row_end


@gluon.jit
def _trace_row(item, n_mt, N1: gl.constexpr, M_TILES: gl.constexpr):
    """The persistent kernel's trace row of ``item`` relative to its L1 region (``persistent.TRACE_FIELDS``):
    its L2 region starts M_TILES * N1 items after its L1 region, whatever the call's M tiles."""
    return gl.where(item >= n_mt * N1, item + (M_TILES - n_mt) * N1, item)


@gluon.jit
def _fill(a_desc, b_desc, a_bufs, lo_bufs, hi_bufs, ready, empty, a_row, b_row, KB, step, STAGES: gl.constexpr):
    """K blocks 0 .. KB - 1 of A rows [a_row, +128) and B rows [b_row, +256) into the stages from ``step``
    on; returns the next step."""
    for kb in range(KB):
        s = step % STAGES
        mbarrier.wait(empty.index(s), ((step // STAGES) & 1) ^ 1)
        bar = ready.index(s)
        mbarrier.expect(bar, a_desc.block_type.nbytes + 2 * b_desc.block_type.nbytes)
        _tma_load(a_desc, [a_row, kb * QBLOCK], bar, a_bufs.index(s))
        _tma_load(b_desc, [b_row, kb * QBLOCK], bar, lo_bufs.index(s))
        _tma_load(b_desc, [b_row + QBLOCK, kb * QBLOCK], bar, hi_bufs.index(s))
        step += 1
    return step


@gluon.jit
def _publish(items, item_full, item_free, item, taken):
    """Hand ``item`` (the loader's ``taken``-th) to both consumers through the ring of RING slots, once they
    have read the item that slot held before."""
    s = taken % RING
    mbarrier.wait(item_free.index(s), ((taken // RING) & 1) ^ 1)  # a fresh barrier passes the first round
    items.index(s).store(gl.full([1], item, gl.int32, layout=gl.BlockedLayout([1], [32], [1], [0])))
    mbarrier.arrive(item_full.index(s), count=1)


@gluon.jit
def _receive(items, item_full, item_free, taken):
    """The consumer's ``taken``-th item from the ring (:func:`_publish`)."""
    s = taken % RING
    mbarrier.wait(item_full.index(s), (taken // RING) & 1)
    item = gl.max(items.index(s).load(gl.BlockedLayout([1], [32], [4], [0])), axis=0)
    _barrier()  # every warp has read the slot before it is handed back
    mbarrier.arrive(item_free.index(s), count=1)
    return item


@gluon.jit
def _loader(a_desc, h_desc, w1_desc, w2_desc, a_bufs, lo_bufs, hi_bufs, ready, empty, items, item_full, item_free,
            layout_ptr, landed_ptr, counters_ptr, me, wait_ms, trace_ptr, H: gl.constexpr, INTER: gl.constexpr,
            E_LOC: gl.constexpr, EL_P2: gl.constexpr, GROUP_M: gl.constexpr, M_TILES: gl.constexpr,
            STAGES: gl.constexpr, TRACE: gl.constexpr):  # fmt: skip
    """Takes the call's items from the counter in turn, hands each to the consumers, and once its operands
    are there loads every K block of it into the stages (TRACE: when the wait ended, in the item's trace
    row); past the last item, hands them ``n_mt * (N1 + N2)``, which ends their loops."""
    N1: gl.constexpr = INTER // QBLOCK
    N2: gl.constexpr = H // (2 * QBLOCK)
    n_mt = gl.load(layout_ptr, cache_modifier=".cg")
    total = n_mt * (N1 + N2)
    step = 0
    taken = 0
    item = gl.atomic_add(counters_ptr, 1, sem="relaxed", scope="gpu")
    while item < total:
        _publish(items, item_full, item_free, item, taken)
        is_l2, pid_m, pid_n, expert, row0, row_end = _item(layout_ptr, item, n_mt, N1, N2, E_LOC, EL_P2, GROUP_M, 1)
        if is_l2:
            moe_wait_async(counters_ptr + 1 + pid_m, 2 * N1, WAIT_L1, me, wait_ms)
        else:
            moe_wait_async(landed_ptr + pid_m, gl.minimum(row_end - row0, QBLOCK), WAIT_LANDED, me, wait_ms)
        if TRACE:
            gl.store(trace_ptr + _trace_row(item, n_mt, N1, M_TILES) * TRACE_WORDS + 1, _globaltimer())
        if is_l2:
            step = _fill(h_desc, w2_desc, a_bufs, lo_bufs, hi_bufs, ready, empty, row0, expert * H + pid_n * 2 * QBLOCK,
                         INTER // QBLOCK, step, STAGES)  # fmt: skip
        else:
            step = _fill(a_desc, w1_desc, a_bufs, lo_bufs, hi_bufs, ready, empty, row0,
                         (expert * N1 + pid_n) * 2 * QBLOCK, H // QBLOCK, step, STAGES)  # fmt: skip
        taken += 1
        item = gl.atomic_add(counters_ptr, 1, sem="relaxed", scope="gpu")
    _publish(items, item_full, item_free, total, taken)


@gluon.jit
def _h_out(gate, up, h_ptr, hs_ptr, offs_m, row_end, pid_n, INTER: gl.constexpr):
    """silu(gate) * up of a consumer's rows quantized per row (``kernels_fp8._quantize_rows``'s formula)
    into h's 128 columns of N tile ``pid_n`` and its scale; rows past the expert's are not stored."""
    v = gate * (1 / (1 + gl.exp(-gate))) * up
    scale = gl.div_rn(gl.maximum(gl.max(gl.abs(v), axis=1), _AMAX_FLOOR), _FP8_MAX)
    q = gl.minimum(gl.maximum(gl.div_rn(v, gl.expand_dims(scale, 1)), -_FP8_MAX), _FP8_MAX).to(gl.float8e4nv)
    gl.store(hs_ptr + offs_m.to(gl.int64) * (INTER // QBLOCK) + pid_n, scale, mask=offs_m < row_end)
    rows_16b: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0])  # a row's 128 bytes: 8 threads
    q = gl.convert_layout(q, rows_16b)
    rows = gl.convert_layout(offs_m, gl.SliceLayout(1, rows_16b))
    cols = pid_n * QBLOCK + gl.arange(0, QBLOCK, layout=gl.SliceLayout(0, rows_16b))
    out = h_ptr + gl.expand_dims(rows.to(gl.int64) * INTER, 1) + gl.expand_dims(cols, 0)
    gl.store(out, q, mask=gl.expand_dims(rows < row_end, 1))


@gluon.jit
def _y_out(lo, hi, y_pair, offs_m, row_end, col0, H: gl.constexpr):
    """A consumer's rows of an L2 tile (two 128-column blocks from ``col0``) into y_pair, 16 bytes per store
    after a layout conversion; rows past the expert's (an expert's last, partial tile, whose further rows
    are the next expert's) are not stored."""
    rows_16b: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])  # a row's 256 bytes: 16 threads
    rows = gl.convert_layout(offs_m, gl.SliceLayout(1, rows_16b))
    cols = col0 + gl.arange(0, QBLOCK, layout=gl.SliceLayout(0, rows_16b))
    out = y_pair + gl.expand_dims(rows.to(gl.int64) * H, 1) + gl.expand_dims(cols, 0)
    keep = gl.expand_dims(rows < row_end, 1)
    gl.store(out, gl.convert_layout(lo.to(gl.bfloat16), rows_16b), mask=keep)
    gl.store(out + QBLOCK, gl.convert_layout(hi.to(gl.bfloat16), rows_16b), mask=keep)


@gluon.jit
def _consumer(a_bufs, lo_bufs, hi_bufs, ready, empty, items, item_full, item_free, layout_ptr, counters_ptr,
              sorted_row, a_scale, h_ptr, hs_ptr, y_pair, w1s_ptr, w2s_ptr, trace_ptr, H: gl.constexpr,
              INTER: gl.constexpr, E_LOC: gl.constexpr, EL_P2: gl.constexpr, GROUP_M: gl.constexpr,
              M_TILES: gl.constexpr, ROW0: gl.constexpr, STAGES: gl.constexpr, TRACE: gl.constexpr):  # fmt: skip
    """Rows [ROW0, ROW0 + 64) of each item the loader hands this program (TRACE, the first consumer: when
    it took each item, when it finished it and its SM, in the item's trace row)."""
    N1: gl.constexpr = INTER // QBLOCK
    N2: gl.constexpr = H // (2 * QBLOCK)
    KB1: gl.constexpr = H // QBLOCK
    KB2: gl.constexpr = INTER // QBLOCK
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, QBLOCK, 32])
    rows_layout: gl.constexpr = gl.SliceLayout(1, mma)
    n_mt = gl.load(layout_ptr, cache_modifier=".cg")
    step = 0
    taken = 0
    item = _receive(items, item_full, item_free, taken)
    while item < n_mt * (N1 + N2):
        is_l2, pid_m, pid_n, expert, row0, row_end = _item(layout_ptr, item, n_mt, N1, N2, E_LOC, EL_P2, GROUP_M, 4)
        if TRACE and ROW0 == 0:
            started = _globaltimer()
        # The item's first stage has landed: the loader has passed the item's wait, so what it waited for
        # (the rows' positions and scales, h and its scales) is visible to this partition's loads too.
        mbarrier.wait(ready.index(step % STAGES), (step // STAGES) & 1)
        offs_m = row0 + ROW0 + gl.arange(0, CONSUMER_ROWS, layout=rows_layout)
        row_ok = offs_m < row_end
        if is_l2:
            lo_row = w2s_ptr + (expert * N2 + pid_n) * 2 * KB2  # the tile's two weight blocks' scales
            lo, hi, step = _k_loop(a_bufs, lo_bufs, hi_bufs, ready, empty, hs_ptr + offs_m.to(gl.int64) * KB2, row_ok,
                                   lo_row, lo_row + KB2, KB2, step, ROW0, STAGES, mma)  # fmt: skip
            _y_out(lo, hi, y_pair, offs_m, row_end, pid_n * 2 * QBLOCK, H)
        else:
            rows = gl.load(sorted_row + offs_m, mask=row_ok, other=0, cache_modifier=".cg").to(gl.int64)
            gate_row = w1s_ptr + (expert * N1 + pid_n) * 2 * KB1  # gate's scales, then up's
            gate, up, step = _k_loop(a_bufs, lo_bufs, hi_bufs, ready, empty, a_scale + rows * KB1, row_ok, gate_row,
                                     gate_row + KB1, KB1, step, ROW0, STAGES, mma)  # fmt: skip
            _h_out(gate, up, h_ptr, hs_ptr, offs_m, row_end, pid_n, INTER)
            _barrier()  # every thread's h stores before the count
            gl.atomic_add(counters_ptr + 1 + pid_m, 1, sem="release", scope="gpu")
        if TRACE and ROW0 == 0:
            _trace_item(trace_ptr + _trace_row(item, n_mt, N1, M_TILES) * TRACE_WORDS, started)
        taken += 1
        item = _receive(items, item_full, item_free, taken)


@gluon.jit
def moe_gemm_items(
    a_desc, h_desc, w1_desc, w2_desc, layout_ptr, landed_ptr, counters_ptr, sorted_row, a_scale, h_ptr,
    hs_ptr, y_pair, w1s_ptr, w2s_ptr, me, wait_ms, trace_ptr, H: gl.constexpr, INTER: gl.constexpr,
    E_LOC: gl.constexpr, EL_P2: gl.constexpr, GROUP_M: gl.constexpr, M_TILES: gl.constexpr, STAGES: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr, TRACE: gl.constexpr,
):  # fmt: skip
    """Every L1 and L2 item of a call (module docstring), each program of 4 warps (the first consumer; the
    second and the loader, 1 warp, are worker partitions with CONSUMER_REGS and LOADER_REGS registers per
    thread). Descriptors: ``a_desc`` (a_sorted), ``h_desc``, ``w1_desc``, ``w2_desc`` [128, 128] e4m3 blocks.
    H and INTER multiples of 256; STAGES 2 to 4 (48 KB each). TRACE: the persistent kernel's trace rows
    (``persistent.TRACE_FIELDS``) from its L1 region on (M_TILES: its bound on the M tiles); else
    ``trace_ptr`` is None."""
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, 2 * CONSUMER_ROWS, QBLOCK], a_desc.layout)
    lo_bufs = gl.allocate_shared_memory(w1_desc.dtype, [STAGES, QBLOCK, QBLOCK], w1_desc.layout)
    hi_bufs = gl.allocate_shared_memory(w1_desc.dtype, [STAGES, QBLOCK, QBLOCK], w1_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # one arrival per consumer
    items = gl.allocate_shared_memory(gl.int32, [RING, 1], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    item_full = gl.allocate_shared_memory(gl.int64, [RING, 1], mbarrier.MBarrierLayout())
    item_free = gl.allocate_shared_memory(gl.int64, [RING, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(RING):
        mbarrier.init(item_full.index(i), count=1)
        mbarrier.init(item_free.index(i), count=2)
    gl.warp_specialize([
        (_consumer, (a_bufs, lo_bufs, hi_bufs, ready, empty, items, item_full, item_free, layout_ptr, counters_ptr,
                     sorted_row, a_scale, h_ptr, hs_ptr, y_pair, w1s_ptr, w2s_ptr, trace_ptr, H, INTER, E_LOC, EL_P2,
                     GROUP_M, M_TILES, 0, STAGES, TRACE)),
        (_consumer, (a_bufs, lo_bufs, hi_bufs, ready, empty, items, item_full, item_free, layout_ptr, counters_ptr,
                     sorted_row, a_scale, h_ptr, hs_ptr, y_pair, w1s_ptr, w2s_ptr, trace_ptr, H, INTER, E_LOC, EL_P2,
                     GROUP_M, M_TILES, CONSUMER_ROWS, STAGES, TRACE)),
        (_loader, (a_desc, h_desc, w1_desc, w2_desc, a_bufs, lo_bufs, hi_bufs, ready, empty, items, item_full,
                   item_free, layout_ptr, landed_ptr, counters_ptr, me, wait_ms, trace_ptr, H, INTER, E_LOC, EL_P2,
                   GROUP_M, M_TILES, STAGES, TRACE)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])  # fmt: skip
