"""The persistent call at world 1 as one warp-specialized Gluon kernel, fp8 or bf16 (``PersistentConfig.gluon``,
the default where it runs): ``persistent.moe_persistent``'s work items (route, plan, layout, dispatch, L1,
L2, combine) with its counters, layout and trace, and its GEMM items on ``gluon_scaled_tiles``' loader and
consumers (bf16: the same stages of 128-byte rows, 64 K columns, and a K loop without scales).

Per program, three partitions::

    loader (4 warps, 1 with tma_a):
                      takes the next item from ``sched[NEXT]`` once the consumers have taken up the last
                      one (a ring of one slot in shared memory: an item waits in a program behind at most
                      one other, as in the Triton kernel) and hands it to them, a GEMM item with its M
                      tile, N tile, expert and rows read from the layout; an L1 / L2 item past the call's
                      M tiles moves the counter to the next region instead (it waits for the layout once).
                      For an L1 item it then waits until its M tile's pairs are placed (and, once, in fp8,
                      until x is quantized), for an L2 item until its M tile's L1 tiles are done, and loads
                      every K block of A rows, B lo, B hi into the stages (L1's A rows gathered from the
                      token rows by every thread's cp.async, :func:`_fill_gathered`; with tma_a by TMA from
                      the rows dispatch copied); for a combine item (a chunk of columns, 1024 at the
                      production load, of a few tokens), once the chunk's L2 tiles are done, its tokens'
                      pairs' y_pair rows of the chunk by TMA into the stages' A buffers (a token's pairs a
                      stage);
                      each dispatch item itself: its pairs' places (with tma_a also its tokens' rows by TMA
                      into a stage and from there by TMA to their pairs' places; the consumers hand the
                      stage back)
    consumer c (4 warps): L1 / L2 rows 64c .. 64c + 63 of each tile (once the item's first stage has
                      landed: the loader's wait is behind it; the second consumer only releases the stages
                      of an expert's last tile of at most 64 rows); the c-th half of each route item's
                      tokens; every other token of a combine item (from the stages); the plan item (with
                      the layout: the layout item is empty) in the first consumer alone

Measured on the H200 (production load, random routing, traced): an L1 item on a full M tile takes 36.9 us
against 33 us for the same tile on dense matrices (``gluon_scaled_tiles``): its first stage lands 2.5 us
after the consumers take it (on average; the first L1 items wait for dispatch), its K loop ends 30.2 us
in, SwiGLU and h's quantization take 5.2 us, in both consumers at once. SwiGLU as the raw ``moe_swiglu``
(ftz ex2 and reciprocal, 6 instructions a value where Triton's exp and division take 13) and e4m3 by the
saturating conversion alone (no clamps) brought full-tile L1 items to 35.5 us and the call from 240.5 /
239.2 to 234.7 / 232.3 us (CUDA graph, random / skewed, side by side). With its wgmmas and rescales
skipped (timing only) an item took 25.6 us of 40, with its loads skipped 38.7, with every expert's
weights replaced by the first one's (held in L2) 35.8: the K loop is bound by its tensor-core work, a
little by streaming the weights from HBM, not by its loads. Replayed back to back, the call runs at the
board's power limit (700 W, the SM clock held at 1695 MHz median; ``power_draw``): epilogue warps taking
SwiGLU and the stores off the consumers, or an expert's last tile of at most 64 rows run as two N tiles
in one item, shortened the consumers' waits and made the call slower, the clock lower.

bf16 (traced, random routing): an L1 item on a full M tile takes 64.3 us, as in the Triton kernel (65.2),
its L2 items 21.4 (23.3); its dispatch copies the pair-ordered A rows that TMA loads, 32 MB in bf16, where
the Triton kernel's bf16 L1 gathers x's rows. Copied by the first consumer's threads, with 4-token dispatch
items (25-27 us each at any step width) the last ended 41-54 us into the call, which was as fast as the
Triton kernel's; with 2-token items (14.7 us each) it ended at 35.5 us and the call was 2-5 % faster
(CUDA graph 342.8 / 331.9 us against
361.7 / 341.0 and 354.5 / 329.2 against 363.2 / 340.0 in two runs, random / skewed; 8-token items 357.7 /
333.1; replayed for 3 s at the power limit 369.8 against 381.6).

The math is the Triton kernel's: top-k with ties to the lower id, x quantized per token and 128 columns
with IEEE division (the same e4m3 bits and scales, by :func:`_div_rn_by`), the block-scaled K loop of
``gluon_scaled_tiles``, SwiGLU and h quantized per pair and 128 columns (bf16: neither quantized), y_pair in
bf16 and each token's weighted sum of its pairs. Its elementwise shortcuts keep the Triton kernel's bits
(``test_tutorial_3_gluon_arithmetic``): SwiGLU by ``moe_swiglu`` for every gate above -87, the clamped
e4m3 conversion by the saturating one.
The counters are ``persistent.moe_persistent``'s words of ``sched`` and ``layout``, except that the route,
L1 and L2 items count once per consumer (each finishes its half without waiting for the other's), so
their waits expect twice the items, and that the plan item waits for the routed tokens' count (raised
before the route items quantize), not for the route items: at world 1 it lays the pairs out itself, and
the fp8 dispatch items that copy rows (tma_a) wait for the route items (without tma_a each L1 loader
waits for them once, before its first gather). The first L1 items wait for nearly every dispatch item
(each M tile holds rows of most of them): on the H200 the plan ends 7.9 us into the call (the layout
item after it ended at 13.3) and the last dispatch item at 22.3 (was 32.6). L2 tiles count per combine
chunk, not per M tile: the L2 items go a chunk of columns at a time (every M tile's N tiles of the chunk)
and a combine item takes one chunk of its tokens, so the first chunks' combine items run beside the last
chunks' L2 tiles. Each token's combine waits for all of its pairs' L2 tiles, which lie in most M tiles, so
with whole rows per combine item and L2 in M tile groups every combine item waited for the last L2 tiles:
in the trace the combine ran 18 us past them. The combine items are still handed out after the last L2
item, though, so the first chunks' combine starts when the L2 region's hand-out ends (22 us after its tiles
were done, traced): what the chunks gained came from the items' speed (3.6 us for 4 tokens, against 11.5
for 2 tokens' whole rows), not from overlap.

The buffers' addresses come from a table (:data:`BUFFER_TABLE`), each loaded where it is used, said to be
16-byte aligned: a worker partition keeps whatever it takes as an argument in registers for its whole
loop, and twenty pointers left the second consumer too few for its accumulators (ptxas serialized the
wgmmas; with route, dispatch and a combine that loaded its rows itself in both consumers, ptxas
serialized them again). Rows move by TMA, not by each thread's loads and stores: a combine item that loaded
its 128 KB itself took 8-10 us on the H200 (about 14 GB/s a program, with one step's loads in flight or
two), a dispatch item that copied its 128 KB (fp8) or 256 KB (bf16) of pair rows 8-12 us or 14.7 us in the
first consumer. The combine items' sums take few registers with their rows in shared memory, so both
consumers share them, a token each in turn; the dispatch items are the loader's copies through a stage
(bf16's token rows through a descriptor the loader makes at each dispatch item: x changes from call to
call, and the layer makes the others once).

No deadlock at any grid size, by the argument of ``persistent.py`` (every wait is for items handed out
earlier, waits within a rank only): a program's consumers run the items in the order its loader took them;
the loader waits only for a GEMM item's operands (items taken before it) after handing it out, and takes
its next item only once every K block of the last is loaded, so the consumers never wait on a loader that
waits on them. Waits are bounded (``moe_wait_async``): a count that does not
fill within ``wait_ms`` reports and traps. They synchronize one partition (each thread acquires for
itself, then a partition barrier where the partition's threads share what one read), never the CTA: a CTA
barrier would wait for the other partitions. The raw ``moe_signal_async`` likewise. They poll with
volatile loads 100 ns apart and fence once, not with an acquire load per spin, so that a waiting partition
takes few issue slots and memory requests from the working ones on its SM.

World 1 only: the pulls and pushes between ranks (``moe_pull``, ``moe_push``) end and start with CTA
barriers, so their items stay in the Triton kernel (``persistent_launch`` refuses ``gluon`` at world > 1).
So the items use what world 1 makes of the Triton kernel's data flow: a token's slot is the token (no slot
or send_idx tables), every expert is local, and the one source's buffers are this rank's (no peer pointers).
Triton's interpreter does not run Gluon: the CPU checks run the Triton kernel, and the GPU checks compare
this one's outputs with the reference as the Triton kernel's are.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

from triton_raw_ext import dialect

from .gluon_scaled_tiles import CONSUMER_ROWS, _fill, _k_loop, _k_loop_bf16, _tma_load, _tma_store
from .kernels import DEVICE_FILE, _chunked_tile_of, _tile_of
from .persistent import (
    COMB_DONE,
    DISPATCH_DONE,
    EXITED,
    LAYOUT_DONE,
    NEXT,
    ROUTE_DONE,
    TRACE_WORDS,
    WAIT_DISPATCH,
    WAIT_L1,
    WAIT_L2,
    WAIT_LANDED,
    WAIT_LAYOUT,
    WAIT_ROUTE,
    WAIT_ROUTED,
    _globaltimer,
    _trace_item,
)
from .quant import AMAX_FLOOR, FP8_MAX

QBLOCK = gl.constexpr(128)  # the fp8 scale block: a K step, an L1 tile's gate (or up) columns
# sched's per-expert pair counts at world 1 (COMB_DONE has one word), then its tokens-planned count; the
# per-M-tile counts start at the kernel's LANDED (``Schedule.landed_word``): rows landed, L1 done, L2 done
PAIR_COUNT = gl.constexpr(COMB_DONE.value + 1)
RING = gl.constexpr(1)  # items handed out and not yet taken up by the consumers (see _take)
# A ring slot's words: the item, then a GEMM item's M tile, N tile, local expert, first pair and end of the
# expert's pairs (the loader derives them from the layout once; the consumers start on the item at once),
# padded to a power of two
SLOT_FIELDS = ("item", "pid_m", "pid_n", "expert", "row0", "row_end")
(SLOT_ITEM, SLOT_PID_M, SLOT_PID_N, SLOT_EXPERT, SLOT_ROW0, SLOT_ROW_END) = (
    gl.constexpr(i) for i in range(len(SLOT_FIELDS)))  # fmt: skip
SLOT_WORDS = gl.constexpr(8)
PARTS = gl.constexpr(2)  # consumers: each counts its half of a route, L1 or L2 item
_FP8_MAX = gl.constexpr(FP8_MAX)
_AMAX_FLOOR = gl.constexpr(AMAX_FLOOR)
# A partition's CTA barrier (its own warps only inside warp_specialize): `thread_barrier` in Triton 3.6
_barrier = getattr(gl, "barrier", None) or gl.thread_barrier
# cp.async from global to shared memory: `async_copy_global_to_shared` up to Triton 3.7, `async_load` from 3.8
_cp_async = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared


# A stage's A buffer as the y_pair chunks of a combine step, unswizzled: [rows, boxes, 256] for TMA's boxes,
# [rows * boxes, 256] for the consumer's loads; in fp8 as a dispatch item's token rows, [rows, H / 256, 256]
# (``reinterpret`` from Triton 3.9, ``_reinterpret`` before)
Y_CHUNKS = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=3))
Y_ROWS = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2))
X_CHUNKS = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=3))
if hasattr(gl.shared_memory_descriptor, "reinterpret"):

    @gluon.jit
    def _view(buf, dtype: gl.constexpr, shape: gl.constexpr, layout: gl.constexpr):
        return buf.reinterpret(dtype, shape, layout)

else:  # Triton 3.6 to 3.8

    @gluon.jit
    def _view(buf, dtype: gl.constexpr, shape: gl.constexpr, layout: gl.constexpr):
        return buf._reinterpret(dtype, shape, layout)


@gluon.jit
def _y_chunks(buf, rows: gl.constexpr, boxes: gl.constexpr):
    return _view(buf, gl.bfloat16, [rows, boxes, 256], Y_CHUNKS)


@gluon.jit
def _y_rows(buf, rows: gl.constexpr):
    return _view(buf, gl.bfloat16, [rows, 256], Y_ROWS)


@gluon.jit
def _x_chunks(buf, rows: gl.constexpr, boxes: gl.constexpr):
    return _view(buf, gl.float8e4nv, [rows, boxes, 256], X_CHUNKS)


# The call's buffers by binding key, in the order of the kernel's table of their addresses (module
# docstring; ``persistent_launch.call_extras`` builds it once per layer)
BUFFER_TABLE = (
    "x_sym", "x_scale", "topk_ids", "topk_w", "pair_rank", "send_count", "send_pairs",
    "plan_flag", "recv_ids", "recv_w", "recv_n", "layout", "sorted_row", "inv_pos", "a_sorted", "h", "h_scale",
    "y_pair", "sched", "w1s", "w2s",
)  # fmt: skip
(X_SYM, X_SCALE, IDS, WTS, RANK, SEND_COUNT, SEND_PAIRS, PLAN_FLAG, RECV_IDS, RECV_W, RECV_N, LAYOUT,
 SORTED_ROW, INV_POS, A_SORTED, H_BUF, H_SCALE, Y_PAIR, SCHED, W1S, W2S) = (
    gl.constexpr(i) for i in range(len(BUFFER_TABLE)))  # fmt: skip


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def moe_wait_async(counter, expected, what, me, timeout_ms): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def moe_signal_async(flag_sym, value, pe): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def moe_fence_gpu(): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def moe_swiglu(gate, up): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def moe_bulk_stores_done(): ...


# ----------------------------------------------------------------------------- small helpers


@gluon.jit
def _add(a, b):
    return a + b


@gluon.jit
def _cumsum(x, axis: gl.constexpr):
    """Inclusive prefix sum along ``axis`` (Triton 3.6's Gluon has no ``cumsum``)."""
    return gl.associative_scan(x, axis, _add)


@gluon.jit
def _div_rn_by(v, scale):
    """v / scale for positive normal ``scale`` broadcast over v: one IEEE reciprocal per scale, then per value a
    product and one FMA correction. It is ``gl.div_rn(v, scale)`` bit for bit where |v| >= 2**-100 and the
    quotient is normal (the residual v - scale * q is then a normal float, exact from the FMA, and with the
    reciprocal correctly rounded the corrected quotient is the correctly rounded one: Markstein). Below, it
    keeps v's sign; a row's fp8 scale is at least AMAX_FLOOR / FP8_MAX (about 2**-49), so such a value
    quantizes to a zero of its sign either way. ``gl.div_rn`` per value is a reciprocal and a branch to its
    slow path's check each time, one after another: an L1 item's SwiGLU and quantization of h took 8.1 us
    with it, 5.2 with this."""
    inv = gl.div_rn(gl.full_like(scale, 1.0), scale)
    q = v * inv
    q = gl.fma(gl.fma(-scale, q, v), inv, q)
    return gl.where(v == 0.0, v, q)


@gluon.jit
def _e4m3(q):
    """q (float32) as e4m3, clamped to +-FP8_MAX as the Triton kernel's formula clamps: sm_90's conversion
    (cvt.rn.satfinite) saturates, so no min / max per value (NaN stays NaN where the clamps made it -448)."""
    return q.to(gl.float8e4nv)


@gluon.jit
def _release(counter):
    """Count one finished item (or half of one) on ``counter``: the partition's stores first, then a release add."""
    _barrier()
    gl.atomic_add(counter, 1, sem="release", scope="gpu")


@gluon.jit
def _buffer(table, index: gl.constexpr, dtype: gl.constexpr):
    """The address of buffer ``BUFFER_TABLE[index]`` as a pointer to ``dtype``, 16-byte aligned as torch's and
    NVSHMEM's allocations are (said, since an address read from memory tells the compiler nothing: rows
    moved a byte at a time without it)."""
    ptr = gl.load(table + index).to(gl.pointer_type(dtype))
    return gl.multiple_of(ptr, 16)


@gluon.jit
def _tile_rows(layout_ptr, pid_m, E_LOC: gl.constexpr, EL_P2: gl.constexpr):
    """(local expert, first pair, end of the expert's pairs) of 128-pair M tile ``pid_m`` of the layout
    (``persistent._tile_rows``), in the loader."""
    ee = gl.arange(0, EL_P2, layout=gl.BlockedLayout([1], [32], [gl.num_warps()], [0]))
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
def _gemm_item(layout_ptr, item, n_mt, L1_START: gl.constexpr, L2_START: gl.constexpr, N1: gl.constexpr,
               CHUNK_TILES: gl.constexpr, E_LOC: gl.constexpr, EL_P2: gl.constexpr, GROUP_M: gl.constexpr):  # fmt: skip
    """(M tile, N tile, expert, first pair, end of the expert's pairs) of GEMM ``item`` (one of the call's
    ``n_mt`` M tiles). L2 items go a combine chunk of CHUNK_TILES N tiles at a time, so that a chunk's combine
    items can run while the later chunks' L2 tiles do."""
    is_l2 = item >= L2_START
    if is_l2:
        pid_m, pid_n = _chunked_tile_of(item - L2_START, n_mt, CHUNK_TILES, GROUP_M)
    else:
        pid_m, pid_n = _tile_of(item - L1_START, n_mt, N1, GROUP_M)
    expert, row0, row_end = _tile_rows(layout_ptr, pid_m, E_LOC, EL_P2)
    return pid_m, pid_n, expert, row0, row_end


# ----------------------------------------------------------------------------- the item ring


@gluon.jit
def _wait_slot(item_free, taken):
    """Until both consumers have read the item the loader's ``taken``-th item's ring slot held before."""
    s = taken % RING
    mbarrier.wait(item_free.index(s), ((taken // RING) & 1) ^ 1)  # a fresh barrier passes the first round


@gluon.jit
def _publish(items, item_full, taken, item, pid_m, pid_n, expert, row0, row_end):
    """Hand ``item`` (the loader's ``taken``-th; a GEMM item with its M tile, N tile, expert and rows) to both
    consumers through its slot (:func:`_wait_slot` first)."""
    s = taken % RING
    w = gl.arange(0, SLOT_WORDS, layout=gl.BlockedLayout([1], [32], [gl.num_warps()], [0]))
    words = gl.where(w == SLOT_ROW0, row0, row_end)  # row_end in SLOT_ROW_END and the padding
    words = gl.where(w == SLOT_EXPERT, expert, words)
    words = gl.where(w == SLOT_PID_N, pid_n, words)
    words = gl.where(w == SLOT_PID_M, pid_m, words)
    words = gl.where(w == SLOT_ITEM, item, words)
    items.index(s).store(words)
    mbarrier.arrive(item_full.index(s), count=1)


@gluon.jit
def _receive(items, item_full, item_free, taken):
    """The words of the consumer's ``taken``-th slot of the ring (:func:`_publish`; :func:`_word` reads one),
    each held by every thread."""
    s = taken % RING
    mbarrier.wait(item_full.index(s), (taken // RING) & 1)
    words = items.index(s).load(gl.BlockedLayout([SLOT_WORDS], [32], [4], [0]))
    _barrier()  # every warp has read the slot before it is handed back
    mbarrier.arrive(item_free.index(s), count=1)
    return words


@gluon.jit
def _word(words, i: gl.constexpr):
    """Word ``i`` of a slot that :func:`_receive` returned."""
    w = gl.arange(0, SLOT_WORDS, layout=words.type.layout)
    return gl.sum(gl.where(w == i, words, 0), axis=0)


# ----------------------------------------------------------------------------- the loader


@gluon.jit
def _take(sched_ptr, layout_ptr, n_mt, me, wait_ms, item_begin, H: gl.constexpr, INTER: gl.constexpr,
          L1_START: gl.constexpr, L2_START: gl.constexpr, COMBINE_START: gl.constexpr):  # fmt: skip
    """(the next item to hand out, the call's M tiles or -1 while not needed yet): an L1 / L2 item past the
    call's M tiles moves the counter to the next region (so is the rest of its region) and is not handed
    out; the layout is waited for at the first GEMM item."""
    N1: gl.constexpr = INTER // QBLOCK
    N2: gl.constexpr = H // (2 * QBLOCK)
    item = item_begin + gl.atomic_add(sched_ptr + NEXT, 1, sem="relaxed", scope="gpu")
    searching = item == item
    while searching & (item >= L1_START) & (item < COMBINE_START):
        if n_mt < 0:
            moe_wait_async(sched_ptr + LAYOUT_DONE, 1, WAIT_LAYOUT, me, wait_ms)
            n_mt = gl.load(layout_ptr, cache_modifier=".cg")
        is_l2 = item >= L2_START
        if gl.where(is_l2, item - L2_START >= n_mt * N2, item - L1_START >= n_mt * N1):
            gl.atomic_max(sched_ptr + NEXT, gl.where(is_l2, COMBINE_START, L2_START) - item_begin, sem="relaxed",
                          scope="gpu")  # fmt: skip
            item = item_begin + gl.atomic_add(sched_ptr + NEXT, 1, sem="relaxed", scope="gpu")
        else:
            searching = item != item
    return item, n_mt


@gluon.jit
def _pick(values, r: gl.constexpr, k: gl.constexpr):
    """Element [r, k] of ``values``, a tensor every lane holds whole: a register once the compiler folds the
    masks, where a tensor spread over the lanes takes a reduction across them per pick."""
    rr = gl.arange(0, values.shape[0], layout=gl.SliceLayout(1, values.type.layout))
    kk = gl.arange(0, values.shape[1], layout=gl.SliceLayout(0, values.type.layout))
    return gl.sum(gl.sum(gl.where((rr[:, None] == r) & (kk[None, :] == k), values, 0), axis=1), axis=0)


@gluon.jit
def _fill_combine(y_desc, a_bufs, ready, empty, table, idx, tokens, me, wait_ms, step, K: gl.constexpr,
                  K_P2: gl.constexpr, M_TILES: gl.constexpr, COMBINE_ROWS: gl.constexpr,
                  COMBINE_BLOCKS: gl.constexpr, LANDED: gl.constexpr, STAGES: gl.constexpr):  # fmt: skip
    """The y_pair rows of combine item ``idx`` (chunk ``idx // COMBINE_BLOCKS`` of the columns, its first
    ``tokens`` tokens of token block ``idx % COMBINE_BLOCKS``) into the stages from ``step`` on, once the
    chunk's L2 tiles are done: a stage per token, the token's K pair rows of the chunk in the A buffer
    (``y_desc``: y_pair as [pairs, H / 256, 256], boxes of one pair's chunk); returns the next step."""
    BOXES: gl.constexpr = y_desc.block_type.shape[1]
    CHUNK_TILES: gl.constexpr = BOXES  # L2 N tiles (256 columns each) in a chunk
    L2_DONE: gl.constexpr = LANDED + 2 * M_TILES
    # every pair in every lane
    L: gl.constexpr = gl.BlockedLayout([COMBINE_ROWS, K_P2], [1, 32], [1, gl.num_warps()], [1, 0])
    sched = _buffer(table, SCHED, gl.int32)
    chunk = idx // COMBINE_BLOCKS
    t0 = idx % COMBINE_BLOCKS * COMBINE_ROWS
    # the item's pair positions in one load (dispatch is done), in flight during the wait: with a load per
    # token before its stage's loads, 4-token items took 4.5 us on the H200
    rr = gl.arange(0, COMBINE_ROWS, layout=gl.SliceLayout(1, L))
    kk = gl.arange(0, K_P2, layout=gl.SliceLayout(0, L))
    at = (t0 + rr).to(gl.int64)[:, None] * K + kk[None, :]
    pos = gl.load(_buffer(table, INV_POS, gl.int32) + at, mask=(rr < tokens)[:, None] & (kk < K)[None, :], other=0,
                  cache_modifier=".cg")  # fmt: skip
    # every M tile's L2 tiles of the chunk, each counted by both consumers (the combine waited for dispatch,
    # so the layout's M tile count is there)
    n_mt = gl.load(_buffer(table, LAYOUT, gl.int32), cache_modifier=".cg")
    moe_wait_async(sched + L2_DONE + chunk, PARTS * CHUNK_TILES * n_mt, WAIT_L2, me, wait_ms)
    for r in gl.static_range(COMBINE_ROWS):
        if r < tokens:
            s = step % STAGES
            mbarrier.wait(empty.index(s), ((step // STAGES) & 1) ^ 1)
            bar = ready.index(s)
            mbarrier.expect(bar, K * y_desc.block_type.nbytes)
            rows = _y_chunks(a_bufs.index(s), K_P2, BOXES)
            for k in gl.static_range(K):
                _tma_load(y_desc, [_pick(pos, r, k), chunk * BOXES, 0], bar, rows.slice(k, 1))
            step += 1
    return step


@gluon.jit
def _place_pairs(table, t0, n, ROWS: gl.constexpr, K: gl.constexpr, K_P2: gl.constexpr, EL_P2: gl.constexpr):
    """The routing of tokens [t0, t0 + ROWS) (those below ``n``) for the GEMMs and the combine, a pair to a
    lane: recv_ids and recv_w, each pair's position in the layout (sorted_row: its token; inv_pos); returns
    (positions, M tiles, which pairs exist), [ROWS, K_P2]."""
    L: gl.constexpr = gl.BlockedLayout([1, 1], [32 // K_P2, K_P2], [gl.num_warps(), 1], [1, 0])
    layout_ptr = _buffer(table, LAYOUT, gl.int32)
    rr = gl.arange(0, ROWS, layout=gl.SliceLayout(1, L))
    kk = gl.arange(0, K_P2, layout=gl.SliceLayout(0, L))
    tokens = t0 + rr
    mk = (tokens < n)[:, None] & (kk[None, :] < K)
    at = tokens.to(gl.int64)[:, None] * K + kk[None, :]
    e = gl.load(_buffer(table, IDS, gl.int32) + at, mask=mk, other=0, cache_modifier=".cg")
    wts = gl.load(_buffer(table, WTS, gl.float32) + at, mask=mk, other=0.0, cache_modifier=".cg")
    rank = gl.load(_buffer(table, RANK, gl.int32) + at, mask=mk, other=0, cache_modifier=".cg")
    gl.store(_buffer(table, RECV_IDS, gl.int32) + at, e, mask=mk)
    gl.store(_buffer(table, RECV_W, gl.float32) + at, wts, mask=mk)
    # the one source's first pair per expert is the expert's first pair: a pair's M tile is its expert's first
    # tile plus its rank's, both loaded at once
    pos = gl.load(layout_ptr + 1 + 3 * EL_P2 + e, cache_modifier=".cg") + rank
    tile = gl.load(layout_ptr + 1 + 2 * EL_P2 + e, cache_modifier=".cg") + rank // QBLOCK
    gl.store(_buffer(table, SORTED_ROW, gl.int32) + pos, tokens[:, None] + gl.zeros_like(kk)[None, :], mask=mk)
    gl.store(_buffer(table, INV_POS, gl.int32) + at, gl.where(mk, pos, -1), mask=mk)
    return pos, gl.where(mk, tile, 0), mk


@gluon.jit
def _count_landed(table, tile, mk, LANDED: gl.constexpr):
    """Count the pairs ``mk`` landed in their M tiles ``tile``, once every thread's stores before are visible."""
    _barrier()
    moe_fence_gpu()
    ones = gl.full(tile.shape, 1, gl.int32, layout=tile.type.layout)
    gl.atomic_add(_buffer(table, SCHED, gl.int32) + LANDED + tile, ones, mask=mk, sem="relaxed", scope="gpu")


@gluon.jit
def _dispatch_rows(x_desc, pair_desc, a_bufs, ready, empty, table, idx, n, step, K: gl.constexpr, K_P2: gl.constexpr,
                   EL_P2: gl.constexpr, LANDED: gl.constexpr, STAGES: gl.constexpr, FP8: gl.constexpr):  # fmt: skip
    """Dispatch item ``idx`` (``persistent._dispatch_item`` at world 1 with TMA_A: a token's slot is the token,
    every expert local) in the loader, its waits done and ``n`` tokens read: its tokens' rows (fp8: the
    quantized x_sym's; bf16: x's) by TMA into the next stage's A buffer (``x_desc``: the rows as
    [tokens, H / 256, 256], boxes of the item's tokens), their routing and pair positions placed meanwhile
    (:func:`_place_pairs`); then each row by TMA from the stage to each of its pairs' places (``pair_desc``:
    a_sorted as [pairs, H / 256, 256], boxes of one pair), and once those are written the pairs counted
    landed in their M tiles. A box spans H / 256 chunks rounded up to a power of two (TMA's rule): the load
    fills the chunks past a row with zeros, the store skips them. The consumers hand the stage back;
    returns the next step."""
    ROWS: gl.constexpr = x_desc.block_type.shape[0]
    BOXES: gl.constexpr = x_desc.block_type.shape[1]
    EVERY: gl.constexpr = gl.BlockedLayout([ROWS, K_P2], [1, 32], [1, gl.num_warps()], [1, 0])  # every pair, every lane
    t0 = idx * ROWS
    s = step % STAGES
    mbarrier.wait(empty.index(s), ((step // STAGES) & 1) ^ 1)  # a fresh barrier passes the first round
    bar = ready.index(s)
    mbarrier.expect(bar, x_desc.block_type.nbytes)
    if FP8:
        rows_smem = _x_chunks(a_bufs.index(s), ROWS, BOXES)
    else:
        rows_smem = _y_chunks(a_bufs.index(s), ROWS, BOXES)
    _tma_load(x_desc, [t0, 0, 0], bar, rows_smem)  # rows past the tensor's come as zeros, past n are never stored
    pos, tile, mk = _place_pairs(table, t0, n, ROWS, K, K_P2, EL_P2)
    mbarrier.wait(bar, (step // STAGES) & 1)  # the rows have landed
    places = gl.convert_layout(pos, EVERY)
    for r in gl.static_range(ROWS):
        if t0 + r < n:
            for k in gl.static_range(K):
                _tma_store(pair_desc, [_pick(places, r, k), 0, 0], rows_smem.slice(r, 1))
    moe_bulk_stores_done()
    _count_landed(table, tile, mk, LANDED)  # the rows and pairs placed, by every thread, before the counts
    return step + 1


@gluon.jit
def _fill_gathered(rows_ptr, b_desc, a_bufs, lo_bufs, hi_bufs, ready, empty, table, row0, row_end, b_row, KB, step,
                   ROW_LEN: gl.constexpr, STAGES: gl.constexpr):  # fmt: skip
    """:func:`gluon_scaled_tiles._fill` for an L1 item whose A rows are gathered, not copied by dispatch: each K
    block's B lo and hi blocks (rows from ``b_row``) by TMA, and the 128-byte pieces of its M tile's token rows
    (``rows_ptr``: rows of ROW_LEN values; the tile's pairs [row0, row_end) in sorted_row, rows past them
    zeros) by every thread's cp.async into the stage's A buffer, counted on the stage's barrier: each thread
    adds its pending copies to it before one thread's expect-tx arrival can complete the phase. Returns the
    next step."""
    BLOCK_M: gl.constexpr = a_bufs.shape[1]
    BLOCK_K: gl.constexpr = a_bufs.shape[2]
    HALF: gl.constexpr = lo_bufs.shape[1]
    VEC: gl.constexpr = 128 // a_bufs.dtype.primitive_bitwidth  # values in 16 bytes: a cp.async each
    L: gl.constexpr = gl.BlockedLayout([1, VEC], [32 * VEC // BLOCK_K, BLOCK_K // VEC], [gl.num_warps(), 1], [1, 0])
    r = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, L))
    ok = r < row_end
    token = gl.load(_buffer(table, SORTED_ROW, gl.int32) + r, mask=ok, other=0, cache_modifier=".cg")
    cols = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, L))
    src = rows_ptr + (token.to(gl.int64) * ROW_LEN)[:, None] + cols[None, :]
    for kb in range(KB):
        s = step % STAGES
        mbarrier.wait(empty.index(s), ((step // STAGES) & 1) ^ 1)  # a fresh barrier passes the first round
        bar = ready.index(s)
        _cp_async(a_bufs.index(s), src + kb * BLOCK_K, mask=ok[:, None])
        async_copy.mbarrier_arrive(bar)  # adds one pending arrival now, made when this thread's copies land
        _barrier()
        mbarrier.expect(bar, 2 * b_desc.block_type.nbytes)
        _tma_load(b_desc, [b_row, kb * BLOCK_K], bar, lo_bufs.index(s))
        _tma_load(b_desc, [b_row + HALF, kb * BLOCK_K], bar, hi_bufs.index(s))
        step += 1
    return step


@gluon.jit
def _loader(a_desc, h_desc, w1_desc, w2_desc, y_desc, x_desc, pair_desc, a_bufs, lo_bufs, hi_bufs, ready, empty,
            items, item_full, item_free, x_ptr, T, table, me, wait_ms, item_begin, item_end, trace_ptr, H: gl.constexpr,
            INTER: gl.constexpr, K: gl.constexpr, K_P2: gl.constexpr, E_LOC: gl.constexpr, EL_P2: gl.constexpr,
            GROUP_M: gl.constexpr, M_TILES: gl.constexpr, DISPATCH_ROWS: gl.constexpr, COMBINE_ROWS: gl.constexpr,
            COMBINE_BLOCKS: gl.constexpr, BLOCK_HC: gl.constexpr, PLAN_START: gl.constexpr,
            DISPATCH_START: gl.constexpr, L1_START: gl.constexpr, L2_START: gl.constexpr, COMBINE_START: gl.constexpr,
            STAGES: gl.constexpr, LANDED: gl.constexpr, TRACE: gl.constexpr, FP8: gl.constexpr,
            GATHER_A: gl.constexpr):  # fmt: skip
    """Hands the items of [item_begin, item_end) to the consumers in turn, taking each from the counter only
    once the consumers have taken up the last (so that no item waits in a program behind more than one
    other, as in the Triton kernel); for a GEMM item, once its operands are there, loads every K block of
    it into the stages (TRACE: when the wait ended, in the item's trace row); for a combine item its
    tokens' y_pair rows (:func:`_fill_combine`); runs each dispatch item itself (:func:`_dispatch_rows`, once
    the layout is done and, in fp8, the route items, whose quantized rows it copies; TRACE: its whole trace
    row), the stages it used in the slot's M tile word for the consumers to hand back. Past the last item it
    hands them ``item_end``, which ends their loops. GATHER_A: an L1 item's A rows are gathered from the token
    rows (fp8: x_sym's, bf16: x's) by :func:`_fill_gathered`, and a dispatch item only places its pairs
    (:func:`_place_pairs`, no stage); ``a_desc``, ``x_desc`` and ``pair_desc`` are not read."""
    N1: gl.constexpr = INTER // QBLOCK
    CHUNK_TILES: gl.constexpr = BLOCK_HC // (2 * QBLOCK)  # L2 N tiles in a combine chunk
    BLOCK_K: gl.constexpr = h_desc.block_type.shape[1]
    layout_ptr = _buffer(table, LAYOUT, gl.int32)
    sched_ptr = _buffer(table, SCHED, gl.int32)
    step = 0
    taken = 0
    quantized = gl.to_tensor(0)  # GATHER_A, fp8: the route items have quantized x (waited for once)
    _wait_slot(item_free, taken)
    item, n_mt = _take(sched_ptr, layout_ptr, gl.to_tensor(-1), me, wait_ms, item_begin, H, INTER, L1_START,
                       L2_START, COMBINE_START)  # fmt: skip
    while item < item_end:
        if (item >= L1_START) & (item < COMBINE_START):
            is_l2 = item >= L2_START
            pid_m, pid_n, expert, row0, row_end = _gemm_item(layout_ptr, item, n_mt, L1_START, L2_START, N1,
                                                             CHUNK_TILES, E_LOC, EL_P2, GROUP_M)  # fmt: skip
            _publish(items, item_full, taken, item, pid_m, pid_n, expert, row0, row_end)
            if is_l2:
                moe_wait_async(sched_ptr + LANDED + M_TILES + pid_m, PARTS * N1, WAIT_L1, me, wait_ms)
            else:
                moe_wait_async(sched_ptr + LANDED + pid_m, gl.minimum(row_end - row0, QBLOCK), WAIT_LANDED, me, wait_ms)
                if GATHER_A and FP8:  # the rows it gathers: x_sym's, once every route item has quantized its part
                    if quantized == 0:
                        moe_wait_async(sched_ptr + ROUTE_DONE, PARTS * PLAN_START, WAIT_ROUTE, me, wait_ms)
                        quantized = gl.to_tensor(1)
            if TRACE:
                gl.store(trace_ptr + item * TRACE_WORDS + 1, _globaltimer())
            if is_l2:
                step = _fill(h_desc, w2_desc, a_bufs, lo_bufs, hi_bufs, ready, empty, row0,
                             expert * H + pid_n * 2 * QBLOCK, INTER // BLOCK_K, step, STAGES)  # fmt: skip
            elif GATHER_A:
                if FP8:
                    token_rows = _buffer(table, X_SYM, gl.float8e4nv)
                else:
                    token_rows = x_ptr
                step = _fill_gathered(token_rows, w1_desc, a_bufs, lo_bufs, hi_bufs, ready, empty, table, row0, row_end,
                                      (expert * N1 + pid_n) * 2 * QBLOCK, H // BLOCK_K, step, H, STAGES)  # fmt: skip
            else:
                step = _fill(a_desc, w1_desc, a_bufs, lo_bufs, hi_bufs, ready, empty, row0,
                             (expert * N1 + pid_n) * 2 * QBLOCK, H // BLOCK_K, step, STAGES)  # fmt: skip
        elif (item >= DISPATCH_START) & (item < L1_START):
            if TRACE:
                started = _globaltimer()
            zero = moe_wait_async(sched_ptr + LAYOUT_DONE, 1, WAIT_LAYOUT, me, wait_ms)
            if FP8 and not GATHER_A:  # the quantized rows it copies
                zero += moe_wait_async(sched_ptr + ROUTE_DONE, PARTS * PLAN_START, WAIT_ROUTE, me, wait_ms)
            n = gl.load(_buffer(table, RECV_N, gl.int32) + zero, cache_modifier=".cg")
            idx = item - DISPATCH_START
            if GATHER_A:  # no stage: the pairs' places only
                _publish(items, item_full, taken, item, 0, 0, 0, 0, 0)
            else:
                _publish(items, item_full, taken, item, (idx * DISPATCH_ROWS < n).to(gl.int32), 0, 0, 0, 0)
            if TRACE:
                gl.store(trace_ptr + item * TRACE_WORDS + 1, _globaltimer())
            if GATHER_A:
                if idx * DISPATCH_ROWS < n:
                    _, tile, placed = _place_pairs(table, idx * DISPATCH_ROWS, n, DISPATCH_ROWS, K, K_P2, EL_P2)
                    _count_landed(table, tile, placed, LANDED)
            elif idx * DISPATCH_ROWS < n:
                if FP8:  # the token rows: x_sym's, a buffer of the layer's
                    rows_desc = x_desc
                else:  # x's, which change from call to call: this call's, in the program's global scratch (made
                    # here, not at the loader's start, which would hand out the call's first items later)
                    ROW_BOXES: gl.constexpr = pair_desc.block_type.shape[1]  # a row's 256-column chunks, a power of 2
                    rows_desc = tma.make_tensor_descriptor(x_ptr, [T, H // 256, 256], [H, 256, 1],
                                                           [DISPATCH_ROWS, ROW_BOXES, 256], Y_CHUNKS)  # fmt: skip
                step = _dispatch_rows(rows_desc, pair_desc, a_bufs, ready, empty, table, idx, n, step, K, K_P2, EL_P2,
                                      LANDED, STAGES, FP8)  # fmt: skip
            _release(sched_ptr + DISPATCH_DONE)
            if TRACE:
                _trace_item(trace_ptr + item * TRACE_WORDS, started)
        elif item >= COMBINE_START:  # its tokens in the slot's M tile word, for the consumers' stage count
            tokens = _combine_tokens(item - COMBINE_START, me, wait_ms, table, COMBINE_ROWS, COMBINE_BLOCKS,
                                     L1_START - DISPATCH_START)  # fmt: skip
            _publish(items, item_full, taken, item, tokens, 0, 0, 0, 0)
            step = _fill_combine(y_desc, a_bufs, ready, empty, table, item - COMBINE_START, tokens, me, wait_ms, step,
                                 K, K_P2, M_TILES, COMBINE_ROWS, COMBINE_BLOCKS, LANDED, STAGES)  # fmt: skip
        else:
            _publish(items, item_full, taken, item, 0, 0, 0, 0, 0)
        taken += 1
        _wait_slot(item_free, taken)
        item, n_mt = _take(sched_ptr, layout_ptr, n_mt, me, wait_ms, item_begin, H, INTER, L1_START, L2_START,
                           COMBINE_START)  # fmt: skip
    _publish(items, item_full, taken, item_end, 0, 0, 0, 0, 0)


# ----------------------------------------------------------------------------- route, plan, layout


@gluon.jit
def _topk_rows(logits_ptr, ids_sym, w_sym, offs_t, mask_t, E: gl.constexpr, E_P2: gl.constexpr, K: gl.constexpr,
               K_P2: gl.constexpr, L: gl.constexpr):  # fmt: skip
    """``kernels._topk_rows`` for the tokens ``offs_t`` (layout SliceLayout(1, L)): top-k ids (ties to the
    lower id) and softmax weights into ids_sym / w_sym; returns the ids [tokens, K_P2] in L."""
    ROWS: gl.constexpr = offs_t.shape[0]
    rows = offs_t.to(gl.int64)
    e = gl.arange(0, E_P2, layout=gl.SliceLayout(0, L))
    kk = gl.arange(0, K_P2, layout=gl.SliceLayout(0, L))
    lg = gl.load(logits_ptr + rows[:, None] * E + e[None, :], mask=mask_t[:, None] & (e[None, :] < E),
                 other=float("-inf")).to(gl.float32)  # fmt: skip
    ids = gl.zeros([ROWS, K_P2], gl.int32, layout=L)
    vals = gl.full([ROWS, K_P2], float("-inf"), gl.float32, layout=L)
    for k in gl.static_range(K):
        best = gl.max(lg, axis=1)
        idx = gl.min(gl.where(lg == best[:, None], e[None, :], E_P2), axis=1)
        ids = gl.where(kk[None, :] == k, idx[:, None], ids)
        vals = gl.where(kk[None, :] == k, best[:, None], vals)
        lg = gl.where(e[None, :] == idx[:, None], float("-inf"), lg)
    p = gl.exp(vals - gl.max(vals, axis=1)[:, None])
    p = gl.where(kk[None, :] < K, p, 0.0)
    p = p / gl.sum(p, axis=1)[:, None]
    mk = mask_t[:, None] & (kk[None, :] < K)
    gl.store(ids_sym + rows[:, None] * K + kk[None, :], ids, mask=mk)
    gl.store(w_sym + rows[:, None] * K + kk[None, :], p, mask=mk)
    return ids


@gluon.jit
def _quantize_step(v, x_sym, xs_sym, offs, ok, scale_at, row_ok):
    """Quantize the blocks ``v`` [rows, blocks, 128] (float32) into x_sym at ``offs`` and their scales into
    xs_sym at ``scale_at`` (``kernels_fp8._quantize_blocks``' formula)."""
    scale = gl.div_rn(gl.maximum(gl.max(gl.abs(v), axis=2), _AMAX_FLOOR), _FP8_MAX)
    gl.store(x_sym + offs, _e4m3(_div_rn_by(v, scale[:, :, None])), mask=ok)
    gl.store(xs_sym + scale_at, scale, mask=row_ok[:, None])


@gluon.jit
def _quantize_cols(x_ptr, x_sym, xs_sym, t0, T, c0, H: gl.constexpr, ROWS: gl.constexpr, COLS: gl.constexpr):
    """Columns [c0, c0 + COLS) of x's tokens [t0, t0 + ROWS) (those below T) quantized per 128 columns into
    x_sym and xs_sym (``kernels_fp8._quantize_cols``), two blocks a step with the next step's loads in
    flight (H200, 16-token items of 1024 columns, 8 tokens a consumer: 9.1 us each, 13.0 with one block a
    step, 12.4 with four)."""
    STEP: gl.constexpr = 2 if COLS >= 2 * QBLOCK else 1  # blocks per step
    L3: gl.constexpr = gl.BlockedLayout([1, 1, 8], [2, 1, 16], [2, 2, 1], [2, 1, 0])  # 16 bytes of bf16 a thread
    L2: gl.constexpr = gl.SliceLayout(2, L3)
    r = t0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, L2))
    b = gl.arange(0, STEP, layout=gl.SliceLayout(0, L2))
    c = gl.arange(0, QBLOCK, layout=gl.SliceLayout(0, gl.SliceLayout(1, L3)))
    row_ok = r < T
    offs = (r.to(gl.int64)[:, None] * H + c0 + b[None, :] * QBLOCK)[:, :, None] + c[None, None, :]
    scale_at = r.to(gl.int64)[:, None] * (H // QBLOCK) + c0 // QBLOCK + b[None, :]
    ok = row_ok[:, None, None]
    v = gl.load(x_ptr + offs, mask=ok, other=0.0)
    for s in range(STEP * QBLOCK, COLS, STEP * QBLOCK):
        following = gl.load(x_ptr + offs + s, mask=ok, other=0.0)
        _quantize_step(v.to(gl.float32), x_sym, xs_sym, offs + (s - STEP * QBLOCK), ok,
                       scale_at + (s - STEP * QBLOCK) // QBLOCK, row_ok)  # fmt: skip
        v = following
    _quantize_step(v.to(gl.float32), x_sym, xs_sym, offs + (COLS - STEP * QBLOCK), ok,
                   scale_at + (COLS - STEP * QBLOCK) // QBLOCK, row_ok)  # fmt: skip


@gluon.jit
def _route_part(item, part: gl.constexpr, T, logits_ptr, x_ptr, table, H: gl.constexpr, E: gl.constexpr,
                E_P2: gl.constexpr, K: gl.constexpr, K_P2: gl.constexpr, ROUTE_TOKENS: gl.constexpr,
                ROUTE_COLS: gl.constexpr, FP8: gl.constexpr):  # fmt: skip
    """Consumer ``part``'s half of the tokens of route item ``item`` (``persistent._route_item`` at world 1):
    their top-k and plan (column chunk 0: each pair's rank among the pairs to its expert, a token's slot is
    the token), and in fp8 their ROUTE_COLS columns of the chunk quantized (bf16: one chunk, H columns)."""
    CHUNKS: gl.constexpr = H // ROUTE_COLS
    ROWS: gl.constexpr = ROUTE_TOKENS // PARTS
    SENT_COUNT: gl.constexpr = PAIR_COUNT + E
    L: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])  # a token's experts within a warp
    ch = item % CHUNKS
    t0 = (item // CHUNKS) * ROUTE_TOKENS + part * ROWS
    if t0 < T:
        if ch == 0:
            sched = _buffer(table, SCHED, gl.int32)
            offs_t = t0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, L))
            mask_t = offs_t < T
            ids = _topk_rows(logits_ptr, _buffer(table, IDS, gl.int32), _buffer(table, WTS, gl.float32), offs_t,
                             mask_t, E, E_P2, K, K_P2, L)  # fmt: skip
            kk = gl.arange(0, K_P2, layout=gl.SliceLayout(0, L))
            valid = mask_t[:, None] & (kk[None, :] < K)
            rank = gl.atomic_add(sched + PAIR_COUNT + ids, gl.full([ROWS, K_P2], 1, gl.int32, layout=L), mask=valid,
                                 sem="relaxed", scope="gpu")  # fmt: skip
            gl.store(_buffer(table, RANK, gl.int32) + offs_t[:, None] * K + kk[None, :], rank, mask=valid)
            # the tokens counted routed once their pairs are: the plan item waits for this count, not for the
            # quantization below
            _barrier()
            gl.atomic_add(sched + SENT_COUNT, gl.sum(mask_t.to(gl.int32), axis=0), sem="release", scope="gpu")
        if FP8:
            _quantize_cols(x_ptr, _buffer(table, X_SYM, gl.float8e4nv), _buffer(table, X_SCALE, gl.float32), t0, T,
                           ch * ROUTE_COLS, H, ROWS, ROUTE_COLS)  # fmt: skip


@gluon.jit
def _plan_item(T, me, epoch, wait_ms, table, E: gl.constexpr, E_LOC: gl.constexpr, EL_P2: gl.constexpr):
    """``persistent._plan_item`` and ``_layout_item`` at world 1 in one item, in one partition: once the route
    items have counted all T tokens routed (their pairs counted per expert; their quantization may still
    run), the tokens and pairs per expert into send_count / send_pairs, this rank's rows and the pair layout
    (pairs grouped by local expert; 128-pair M tiles), then the plan flag. One item, not two, and the layout
    before the flag: the flag and the wait for it took 2.7 us on the H200 before any dispatch could start."""
    VEC: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    SENT_COUNT: gl.constexpr = PAIR_COUNT + E
    sched = _buffer(table, SCHED, gl.int32)
    layout_ptr = _buffer(table, LAYOUT, gl.int32)
    zero = moe_wait_async(sched + SENT_COUNT, T, WAIT_ROUTED, me, wait_ms)
    e1 = gl.arange(0, EL_P2, layout=VEC)
    total = gl.load(sched + PAIR_COUNT + e1 + zero, mask=e1 < E_LOC, other=0, cache_modifier=".cg")
    tokens = gl.load(sched + SENT_COUNT + zero, cache_modifier=".cg")  # world 1: sent and received alike
    gl.store(_buffer(table, SEND_COUNT, gl.int32), tokens)
    gl.store(_buffer(table, SEND_PAIRS, gl.int32) + e1, total, mask=e1 < E_LOC)
    gl.store(_buffer(table, RECV_N, gl.int32), tokens)
    tiles = (total + QBLOCK - 1) // QBLOCK
    first_pair = _cumsum(total, 0) - total
    gl.store(layout_ptr, gl.sum(tiles, axis=0))
    gl.store(layout_ptr + 1 + e1, total)
    gl.store(layout_ptr + 1 + EL_P2 + e1, first_pair)
    gl.store(layout_ptr + 1 + 2 * EL_P2 + e1, _cumsum(tiles, 0) - tiles)
    gl.store(layout_ptr + 1 + 3 * EL_P2 + e1, first_pair)  # the one source's first pair per expert
    _release(sched + LAYOUT_DONE)
    moe_signal_async(_buffer(table, PLAN_FLAG, gl.int64) + me, epoch, me)  # no item waits for it at world 1


# ----------------------------------------------------------------------------- dispatch, combine


@gluon.jit
def _combine_tokens(idx, me, wait_ms, table, COMBINE_ROWS: gl.constexpr, COMBINE_BLOCKS: gl.constexpr,
                    N_DISPATCH: gl.constexpr):  # fmt: skip
    """How many of combine item ``idx``'s tokens (token block ``idx % COMBINE_BLOCKS``) the call has (once
    dispatch is done)."""
    sched = _buffer(table, SCHED, gl.int32)
    zero = moe_wait_async(sched + DISPATCH_DONE, N_DISPATCH, WAIT_DISPATCH, me, wait_ms)
    n = gl.load(_buffer(table, RECV_N, gl.int32) + zero, cache_modifier=".cg")
    return gl.minimum(gl.maximum(n - idx % COMBINE_BLOCKS * COMBINE_ROWS, 0), COMBINE_ROWS)


@gluon.jit
def _combine_item(part: gl.constexpr, idx, tokens, step, a_bufs, ready, empty, table, y_ptr, H: gl.constexpr,
                  K: gl.constexpr, K_P2: gl.constexpr, COMBINE_ROWS: gl.constexpr, COMBINE_BLOCKS: gl.constexpr,
                  BLOCK_HC: gl.constexpr, STAGES: gl.constexpr):  # fmt: skip
    """Consumer ``part``'s share of combine item ``idx`` (``persistent._combine_item`` at world 1, a token's slot
    the token, for the BLOCK_HC columns of chunk ``idx // COMBINE_BLOCKS``) for the first ``tokens`` tokens of
    its token block from the stages the loader filled (:func:`_fill_combine`: a stage per token, its pairs'
    y_pair rows of the chunk): the weighted sum of its pairs into y for every other token (the part-th, then
    every PARTS-th), the other consumer's stages handed back unread; returns the next step."""
    BOXES: gl.constexpr = BLOCK_HC // 256
    # [boxes, 256] of one pair: 16 bytes a thread, a box over a warp, the boxes over the warps
    L: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0])
    cols = (idx // COMBINE_BLOCKS * BLOCK_HC + gl.arange(0, BOXES, layout=gl.SliceLayout(1, L))[:, None] * 256
            + gl.arange(0, 256, layout=gl.SliceLayout(0, L))[None, :])  # fmt: skip
    kk = gl.arange(0, K_P2, layout=gl.BlockedLayout([1], [32], [4], [0]))
    t0 = idx % COMBINE_BLOCKS * COMBINE_ROWS
    for r in range(tokens):
        if r % PARTS == part:
            t = (t0 + r).to(gl.int64)
            w = gl.load(_buffer(table, RECV_W, gl.float32) + t * K + kk, mask=kk < K, other=0.0)  # before the wait
            s = step % STAGES
            mbarrier.wait(ready.index(s), (step // STAGES) & 1)
            rows = _y_rows(a_bufs.index(s), K_P2 * BOXES)
            acc = gl.zeros([BOXES, 256], gl.float32, layout=L)
            for k in gl.static_range(K):  # the pairs in order
                acc += gl.sum(gl.where(kk == k, w, 0.0), axis=0) * rows.slice(k * BOXES, BOXES).load(L).to(gl.float32)
            _barrier()  # every warp's reads of the stage before it is handed back
            mbarrier.arrive(empty.index(s), count=1)
            gl.store(y_ptr + t * H + cols, acc.to(gl.bfloat16))
            step += 1
        else:
            step = _pass_stages(ready, empty, 1, step, STAGES)
    return step


# ----------------------------------------------------------------------------- L1 and L2


@gluon.jit
def _h_out(gate, up, h_ptr, hs_ptr, offs_m, row_end, pid_n, INTER: gl.constexpr):
    """silu(gate) * up of a consumer's rows quantized per row (``kernels_fp8._quantize_rows``'s formula)
    into h's 128 columns of N tile ``pid_n`` and its scale; rows past the expert's are not stored."""
    v = moe_swiglu(gate, up)
    scale = gl.div_rn(gl.maximum(gl.max(gl.abs(v), axis=1), _AMAX_FLOOR), _FP8_MAX)
    q = _e4m3(_div_rn_by(v, gl.expand_dims(scale, 1)))
    gl.store(hs_ptr + offs_m.to(gl.int64) * (INTER // QBLOCK) + pid_n, scale, mask=offs_m < row_end)
    _block_out(q, h_ptr, offs_m, row_end, pid_n * QBLOCK, INTER)


@gluon.jit
def _block_out(v, out_ptr, offs_m, row_end, col0, ROW_LEN: gl.constexpr):
    """128 columns of a consumer's rows (``v``, in the wgmma layout and the output's dtype) into rows of
    ROW_LEN values at ``out_ptr`` from column ``col0``, 16 bytes per store after a layout conversion (a row
    over 8 threads in fp8, 16 in bf16); rows past the expert's (an expert's last, partial tile, whose
    further rows are the next expert's) are not stored."""
    VEC: gl.constexpr = 128 // v.dtype.primitive_bitwidth  # values in 16 bytes
    rows_16b: gl.constexpr = gl.BlockedLayout([1, VEC], [VEC * 32 // QBLOCK, QBLOCK // VEC], [4, 1], [1, 0])
    rows = gl.convert_layout(offs_m, gl.SliceLayout(1, rows_16b))
    cols = col0 + gl.arange(0, QBLOCK, layout=gl.SliceLayout(0, rows_16b))
    out = out_ptr + gl.expand_dims(rows.to(gl.int64) * ROW_LEN, 1) + gl.expand_dims(cols, 0)
    gl.store(out, gl.convert_layout(v, rows_16b), mask=gl.expand_dims(rows < row_end, 1))


@gluon.jit
def _h_out_bf16(gate, up, h_ptr, offs_m, row_end, pid_n, INTER: gl.constexpr):
    """silu(gate) * up of a consumer's rows as bf16 into h's 128 columns of N tile ``pid_n``
    (``persistent._l1_tile_bf16``'s values); rows past the expert's are not stored."""
    _block_out(moe_swiglu(gate, up).to(gl.bfloat16), h_ptr, offs_m, row_end, pid_n * QBLOCK, INTER)


@gluon.jit
def _y_out(lo, hi, y_pair, offs_m, row_end, col0, H: gl.constexpr):
    """A consumer's rows of an L2 tile (two 128-column blocks from ``col0``) as bf16 into y_pair
    (:func:`_block_out`)."""
    _block_out(lo.to(gl.bfloat16), y_pair, offs_m, row_end, col0, H)
    _block_out(hi.to(gl.bfloat16), y_pair, offs_m, row_end, col0 + QBLOCK, H)


@gluon.jit
def _pass_stages(ready, empty, KB, step, STAGES: gl.constexpr):
    """Release the KB stages from ``step`` on as they land, unread; returns the next step."""
    for _ in range(KB):
        s = step % STAGES
        mbarrier.wait(ready.index(s), (step // STAGES) & 1)
        mbarrier.arrive(empty.index(s), count=1)
        step += 1
    return step


@gluon.jit
def _gemm_part(slot, step, a_bufs, lo_bufs, hi_bufs, ready, empty, table, H: gl.constexpr, INTER: gl.constexpr,
               M_TILES: gl.constexpr, L2_START: gl.constexpr, BLOCK_HC: gl.constexpr, ROW0: gl.constexpr,
               STAGES: gl.constexpr, LANDED: gl.constexpr, FP8: gl.constexpr, FAST_ACCUM: gl.constexpr,
               GATHER_A: gl.constexpr):  # fmt: skip
    """Rows [ROW0, ROW0 + 64) of the GEMM item of ring slot ``slot`` from the stages (``step`` on; returns the
    next step): L1, SwiGLU and h (fp8: quantized), counted in its M tile's L1 count; L2 into y_pair, counted
    in its combine chunk's L2 count. An expert's last tile of at most 64 rows is the first consumer's alone.
    GATHER_A: L1's A rows come by cp.async (:func:`_fill_gathered`), so its K loop fences each stage (bf16's
    one K loop, L2's too)."""
    N1: gl.constexpr = INTER // QBLOCK
    N2: gl.constexpr = H // (2 * QBLOCK)
    BLOCK_K: gl.constexpr = a_bufs.shape[2]
    KB1: gl.constexpr = H // BLOCK_K
    KB2: gl.constexpr = INTER // BLOCK_K
    L1_DONE: gl.constexpr = LANDED + M_TILES
    L2_DONE: gl.constexpr = LANDED + 2 * M_TILES  # per combine chunk
    CHUNK_TILES: gl.constexpr = BLOCK_HC // (2 * QBLOCK)
    # a wgmma's K: 32 bytes of each row
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                  instr_shape=[16, QBLOCK, 32 if FP8 else 16])  # fmt: skip
    is_l2 = _word(slot, SLOT_ITEM) >= L2_START
    pid_m, pid_n, expert = _word(slot, SLOT_PID_M), _word(slot, SLOT_PID_N), _word(slot, SLOT_EXPERT)
    row0, row_end = _word(slot, SLOT_ROW0), _word(slot, SLOT_ROW_END)
    done = _buffer(table, SCHED, gl.int32) + gl.where(is_l2, L2_DONE + pid_n // CHUNK_TILES, L1_DONE + pid_m)
    # The item's first stage has landed: the loader has passed the item's wait, so what it waited for
    # (the rows' positions and scales, h and its scales) is visible to this partition's loads too.
    mbarrier.wait(ready.index(step % STAGES), (step // STAGES) & 1)
    offs_m = row0 + ROW0 + gl.arange(0, CONSUMER_ROWS, layout=gl.SliceLayout(1, mma))
    row_ok = offs_m < row_end
    if row_end - row0 <= ROW0:  # none of this consumer's rows: the other's wgmmas get the tensor cores alone
        step = _pass_stages(ready, empty, gl.where(is_l2, KB2, KB1), step, STAGES)
    elif not FP8:
        lo, hi, step = _k_loop_bf16(a_bufs, lo_bufs, hi_bufs, ready, empty, gl.where(is_l2, KB2, KB1), step, ROW0,
                                    STAGES, mma, GATHER_A)  # fmt: skip
        if is_l2:
            _y_out(lo, hi, _buffer(table, Y_PAIR, gl.bfloat16), offs_m, row_end, pid_n * 2 * QBLOCK, H)
        else:
            _h_out_bf16(lo, hi, _buffer(table, H_BUF, gl.bfloat16), offs_m, row_end, pid_n, INTER)
    elif is_l2:
        hs_ptr = _buffer(table, H_SCALE, gl.float32)
        lo_row = _buffer(table, W2S, gl.float32) + (expert * N2 + pid_n) * 2 * KB2  # the two weight blocks' scales
        lo, hi, step = _k_loop(a_bufs, lo_bufs, hi_bufs, ready, empty, hs_ptr + offs_m.to(gl.int64) * KB2, row_ok,
                               lo_row, lo_row + KB2, KB2, step, ROW0, STAGES, mma, FAST_ACCUM, False)  # fmt: skip
        _y_out(lo, hi, _buffer(table, Y_PAIR, gl.bfloat16), offs_m, row_end, pid_n * 2 * QBLOCK, H)
    else:
        rows = gl.load(_buffer(table, SORTED_ROW, gl.int32) + offs_m, mask=row_ok, other=0,
                       cache_modifier=".cg").to(gl.int64)  # fmt: skip
        gate_row = _buffer(table, W1S, gl.float32) + (expert * N1 + pid_n) * 2 * KB1  # gate's scales, then up's
        gate, up, step = _k_loop(a_bufs, lo_bufs, hi_bufs, ready, empty,
                                 _buffer(table, X_SCALE, gl.float32) + rows * KB1, row_ok, gate_row, gate_row + KB1,
                                 KB1, step, ROW0, STAGES, mma, FAST_ACCUM, GATHER_A)  # fmt: skip
        _h_out(gate, up, _buffer(table, H_BUF, gl.float8e4nv), _buffer(table, H_SCALE, gl.float32), offs_m, row_end,
               pid_n, INTER)  # fmt: skip
    _release(done)
    return step


# ----------------------------------------------------------------------------- the consumers and the kernel


@gluon.jit
def _consumer(part: gl.constexpr, a_bufs, lo_bufs, hi_bufs, ready, empty, items, item_full, item_free, logits_ptr,
              x_ptr, y_ptr, table, T, me, epoch, wait_ms, item_end, trace_ptr, H: gl.constexpr, INTER: gl.constexpr,
              E: gl.constexpr, E_P2: gl.constexpr, K: gl.constexpr, K_P2: gl.constexpr, E_LOC: gl.constexpr,
              EL_P2: gl.constexpr, GROUP_M: gl.constexpr, M_TILES: gl.constexpr, ROUTE_TOKENS: gl.constexpr,
              ROUTE_COLS: gl.constexpr, DISPATCH_ROWS: gl.constexpr, COMBINE_ROWS: gl.constexpr,
              COMBINE_BLOCKS: gl.constexpr, BLOCK_HC: gl.constexpr, PLAN_START: gl.constexpr,
              LAYOUT_START: gl.constexpr, DISPATCH_START: gl.constexpr, L1_START: gl.constexpr,
              L2_START: gl.constexpr, COMBINE_START: gl.constexpr, STAGES: gl.constexpr, LANDED: gl.constexpr,
              TRACE: gl.constexpr, FP8: gl.constexpr, FAST_ACCUM: gl.constexpr, GATHER_A: gl.constexpr):  # fmt: skip
    """Consumer ``part`` (0 or 1): its half of each GEMM, route and combine item the loader hands this program, in
    that order; the plan item in the first consumer alone; the stage of a dispatch item (the loader's) handed
    back (TRACE, the first consumer: when it took each item but a dispatch item, when it finished it and its
    SM, in the item's trace row)."""
    step = 0
    taken = 0
    slot = _receive(items, item_full, item_free, taken)
    item = _word(slot, SLOT_ITEM)
    while item < item_end:
        if TRACE and part == 0:
            started = _globaltimer()
        if item < PLAN_START:
            _route_part(item, part, T, logits_ptr, x_ptr, table, H, E, E_P2, K, K_P2, ROUTE_TOKENS, ROUTE_COLS, FP8)
            _release(_buffer(table, SCHED, gl.int32) + ROUTE_DONE)
        elif item < LAYOUT_START:
            if part == 0:
                _plan_item(T, me, epoch, wait_ms, table, E, E_LOC, EL_P2)
        elif item < DISPATCH_START:
            pass  # the plan item has laid the pairs out
        elif item < L1_START:
            # the loader ran it (_dispatch_rows): hand back the stage it used
            step = _pass_stages(ready, empty, _word(slot, SLOT_PID_M), step, STAGES)
        elif item < COMBINE_START:
            step = _gemm_part(slot, step, a_bufs, lo_bufs, hi_bufs, ready, empty, table, H, INTER, M_TILES, L2_START,
                              BLOCK_HC, part * CONSUMER_ROWS, STAGES, LANDED, FP8, FAST_ACCUM, GATHER_A)  # fmt: skip
        else:
            step = _combine_item(part, item - COMBINE_START, _word(slot, SLOT_PID_M), step, a_bufs, ready, empty,
                                 table, y_ptr, H, K, K_P2, COMBINE_ROWS, COMBINE_BLOCKS, BLOCK_HC, STAGES)  # fmt: skip
        if TRACE and part == 0 and not ((item >= DISPATCH_START) & (item < L1_START)):
            _trace_item(trace_ptr + item * TRACE_WORDS, started)  # dispatch items: the loader's row
        taken += 1
        slot = _receive(items, item_full, item_free, taken)
        item = _word(slot, SLOT_ITEM)


@gluon.jit(do_not_specialize=["T", "me", "wait_ms", "item_begin", "item_end"])
def moe_persistent_gluon(
    logits_ptr, x_ptr, y_ptr, table, epoch_ptr, a_desc, h_desc, w1_desc, w2_desc, y_desc, x_desc, pair_desc, T, me,
    wait_ms, item_begin, item_end, trace_ptr,
    H: gl.constexpr, INTER: gl.constexpr, E: gl.constexpr, E_P2: gl.constexpr, K: gl.constexpr, K_P2: gl.constexpr,
    E_LOC: gl.constexpr, EL_P2: gl.constexpr, GROUP_M: gl.constexpr, M_TILES: gl.constexpr,
    ROUTE_TOKENS: gl.constexpr, ROUTE_COLS: gl.constexpr, DISPATCH_ROWS: gl.constexpr, COMBINE_ROWS: gl.constexpr,
    COMBINE_BLOCKS: gl.constexpr, BLOCK_HC: gl.constexpr, PLAN_START: gl.constexpr, LAYOUT_START: gl.constexpr,
    DISPATCH_START: gl.constexpr, L1_START: gl.constexpr, L2_START: gl.constexpr, COMBINE_START: gl.constexpr,
    N_ITEMS: gl.constexpr, SCHED_WORDS: gl.constexpr, SCHED_P2: gl.constexpr, LANDED: gl.constexpr,
    STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr, TRACE: gl.constexpr,
    FP8: gl.constexpr, FAST_ACCUM: gl.constexpr, GATHER_A: gl.constexpr,
):  # fmt: skip
    """One call of the layer at world 1 on this rank (FP8: fp8, else bf16): items [item_begin, item_end) of the
    persistent schedule (``persistent.Schedule``; the whole call unless a tool reruns a region), each program
    of 4 warps (the first consumer; the second and the loader, 1 warp, are worker partitions with
    CONSUMER_REGS and LOADER_REGS registers per thread). ``table``: the addresses of the buffers of
    :data:`BUFFER_TABLE` (int64; bf16 leaves the scales' 0); logits, x and y change from call to call and are
    arguments. ``a_desc`` (a_sorted), ``h_desc``, ``w1_desc`` (K-major, interleaved gate / up blocks,
    ``persistent_launch.persistent_weights``), ``w2_desc`` (K-major): descriptors of [128, K step] boxes
    (e4m3 [128, 128] or bf16 [128, 64]). H and INTER multiples of 256; STAGES 2 to 4 (48 KB each). FAST_ACCUM
    (fp8): each GEMM's sums kept in the tensor cores, not promoted per K block (``gluon_scaled_tiles``). TRACE:
    each item's row of ``trace_ptr`` (``persistent.TRACE_FIELDS``), else it is None. GATHER_A: L1 gathers its A
    rows from the token rows by cp.async in a loader of 4 warps (the loader's warpgroup has their registers
    either way) and dispatch only places the pairs; ``a_desc``, ``x_desc`` and ``pair_desc`` are None.
    The last program to leave zeroes ``sched`` and, at the end of a call, stores its epoch, as ``moe_persistent``'s."""
    BLOCK_K: gl.constexpr = h_desc.block_type.shape[1]
    # A's stages as h's boxes: [128, K step] of 128-byte rows, the layout every A operand (a_sorted, h) takes
    a_bufs = gl.allocate_shared_memory(h_desc.dtype, [STAGES, 2 * CONSUMER_ROWS, BLOCK_K], h_desc.layout)
    lo_bufs = gl.allocate_shared_memory(w1_desc.dtype, [STAGES, QBLOCK, BLOCK_K], w1_desc.layout)
    hi_bufs = gl.allocate_shared_memory(w1_desc.dtype, [STAGES, QBLOCK, BLOCK_K], w1_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # one arrival per consumer
    items = gl.allocate_shared_memory(gl.int32, [RING, SLOT_WORDS], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    item_full = gl.allocate_shared_memory(gl.int64, [RING, 1], mbarrier.MBarrierLayout())
    item_free = gl.allocate_shared_memory(gl.int64, [RING, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(RING):
        mbarrier.init(item_full.index(i), count=1)
        mbarrier.init(item_free.index(i), count=2)
    epoch = gl.load(epoch_ptr) + 1  # this call's; the last program stores it (item_end == N_ITEMS)
    gl.warp_specialize([
        (_consumer, (0, a_bufs, lo_bufs, hi_bufs, ready, empty, items, item_full, item_free, logits_ptr, x_ptr, y_ptr,
                     table, T, me, epoch, wait_ms, item_end, trace_ptr, H, INTER, E, E_P2, K, K_P2, E_LOC, EL_P2,
                     GROUP_M, M_TILES, ROUTE_TOKENS, ROUTE_COLS, DISPATCH_ROWS, COMBINE_ROWS, COMBINE_BLOCKS,
                     BLOCK_HC, PLAN_START, LAYOUT_START, DISPATCH_START, L1_START, L2_START, COMBINE_START, STAGES,
                     LANDED, TRACE, FP8, FAST_ACCUM, GATHER_A)),
        (_consumer, (1, a_bufs, lo_bufs, hi_bufs, ready, empty, items, item_full, item_free, logits_ptr, x_ptr, y_ptr,
                     table, T, me, epoch, wait_ms, item_end, trace_ptr, H, INTER, E, E_P2, K, K_P2, E_LOC, EL_P2,
                     GROUP_M, M_TILES, ROUTE_TOKENS, ROUTE_COLS, DISPATCH_ROWS, COMBINE_ROWS, COMBINE_BLOCKS,
                     BLOCK_HC, PLAN_START, LAYOUT_START, DISPATCH_START, L1_START, L2_START, COMBINE_START, STAGES,
                     LANDED, TRACE, FP8, FAST_ACCUM, GATHER_A)),
        (_loader, (a_desc, h_desc, w1_desc, w2_desc, y_desc, x_desc, pair_desc, a_bufs, lo_bufs, hi_bufs, ready,
                   empty, items, item_full, item_free, x_ptr, T, table, me, wait_ms, item_begin, item_end, trace_ptr,
                   H, INTER, K, K_P2, E_LOC, EL_P2, GROUP_M, M_TILES, DISPATCH_ROWS, COMBINE_ROWS, COMBINE_BLOCKS,
                   BLOCK_HC, PLAN_START, DISPATCH_START, L1_START, L2_START, COMBINE_START, STAGES, LANDED, TRACE,
                   FP8, GATHER_A)),
    ], [4, 4 if GATHER_A else 1], [CONSUMER_REGS, LOADER_REGS])  # fmt: skip
    # Every partition of this program is done (warp_specialize joins them): count the program out
    sched_ptr = _buffer(table, SCHED, gl.int32)
    if gl.atomic_add(sched_ptr + EXITED, 1, sem="acq_rel", scope="gpu") == gl.num_programs(0) - 1:
        s = gl.arange(0, SCHED_P2, layout=gl.BlockedLayout([1], [32], [4], [0]))
        gl.store(sched_ptr + s, gl.zeros_like(s), mask=s < SCHED_WORDS)  # every other program has left
        if item_end == N_ITEMS:
            gl.store(epoch_ptr, epoch)
