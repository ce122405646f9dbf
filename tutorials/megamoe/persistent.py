"""One MegaMoE call as one persistent kernel launch (``MegaMoE(..., impl="persistent")``).

``moe_persistent`` runs routing, dispatch, the L1 GEMM + SwiGLU, the L2 GEMM, the combine and the
write-back of one call as *work items* of a single launch, in bf16 or in fp8 e4m3 with per-128 block
scales (the math of ``kernels`` / ``kernels_fp8``, bit for bit in the quantization). No host
value is needed: the token count is a kernel argument and every count the call discovers (pairs per
expert, M tiles, rows per source) stays on the device, so one launch per rank per call, captured in a
CUDA graph or not, is the whole call.

Work items, in hand-out order (:class:`Schedule` gives the regions):

==========  =========================================  ============================================
region      one item                                   waits for (then releases)
==========  =========================================  ============================================
route       ROUTE_TOKENS tokens x ROUTE_COLS columns:  nothing (route_done)
            top-k + softmax and the tokens' plan by
            atomic counters (column chunk 0): slots in
            each rank's send list, each pair's rank
            among the pairs to its expert; x copied
            (bf16, world > 1) or quantized (fp8)
plan        one destination rank r: its send count     every route item (a signal to r: plan flag)
            and pairs per expert (the counters)
layout      this rank's pair layout: rows per source,  every rank's plan for this rank (flags)
            pairs per expert, M tiles (then signals     (layout_done)
            "nothing to combine" to sources without
            rows)
dispatch    DISPATCH_ROWS slots of one source: pulls   layout (dispatch_done, rows landed per
            the rows (raw ``moe_pull``), places pairs   M tile)
L1          one (M tile, N tile): gate/up GEMM, SwiGLU  the M tile's rows landed (L1 done per M tile)
L2          one (M tile, N tile)                        the M tile's L1 tiles (L2 done per M tile)
combine     COMBINE_ROWS rows of one source: weighted  dispatch; the M tiles of its pairs' L2;
            sum of their pairs, pushed to the source    (a signal to the source after its last row)
            (raw ``moe_push``); world 1: written to y
reduce      REDUCE_ROWS tokens: sum of the partials     every rank's combine for this rank (flags)
            the ranks pushed (world > 1 only)
==========  =========================================  ============================================

Items come from one atomic counter. The GEMM regions are sized for the most M tiles any routing can
make; an item past the call's M tiles (known once the layout is done) moves the counter to the next
region, so the other empty items are skipped (nothing waits for them).

**Progress (no deadlock, at any grid size, one program included).** Every wait of an item is for
items of an earlier region of the same rank, for items of the same region with a lower index (none
here), or for items of an earlier region on another rank (plan before layout, combine before
reduce); and no item of the plan or combine region waits for another rank. Take an item that never
finishes with the earliest region among such items, and within it the lowest index on its rank. What
it waits for on its rank has a lower index, so it was handed out before it, to a program that was
running then (only running programs take items) and that runs its items in index order; it is in an
earlier region, so by the choice it finishes. What it waits for on another rank is in an earlier
region, and so is every item that rank hands out before it: they all finish, so that rank's programs
keep taking items and reach it, and it finishes too. So every item finishes. A single program runs
its items in index order, and whatever an item waits for on its own rank it ran before. Each program
takes the next index before it runs the current one (to hide the atomic's latency): it still runs its
items in index order, which is all the argument uses. Ranks must run concurrently: one per GPU, or
several on one GPU with grids that leave SMs to each other (``programs`` default: SMs per PE).

Every wait is bounded (``moe_wait_count`` / ``moe_wait_each`` / ``moe_wait_flag`` in moe-device.cu, over
``<triton_raw/bounded_wait.h>``, ``wait_ms`` from ``knobs.wait_timeout_ms()``): a fault ends the
launch with a one-line report instead of a hang. One thread of a program polls, the others wait at a
CTA barrier, so that spinning programs do not crowd the memory system the working ones use.

**Ordering.** Work published to other programs is stored, then a CTA barrier, then a release atomic
(GPU scope) on a counter; the waiter's acquire load orders its loads after it. Flags between ranks
carry the call's epoch: ``moe_signal`` makes every thread's earlier stores visible (barrier, system
fence, release store at system scope on the peer's word) and the peer waits with an acquire at system
scope. The epoch is a device counter (``epoch_ptr``) that the last program of the launch raises, and
``sched`` (the counters) is zeroed by that same program, so calls back to back and CUDA-graph replays
need no host counter, reset or barrier. Buffers peers read (x, routing, send lists) or write (comb)
are rewritten only in a later call, which a rank starts after its reduce saw every peer's combine
flag, and a peer raises that flag after its last read of this rank's buffers and last push into
them (its combine needs every row it pulled); the next call's pushes into ``comb`` come after the
pusher saw this rank's next plan flag, raised only after this rank's last reduce.

``item_begin`` / ``item_end`` run a slice of the items: Triton's interpreter runs the programs of a
launch one after another and the ranks one after another, so the CPU simulation runs each rank's
slice up to a wait on other ranks, then the next slice (:meth:`Schedule.slices`); the epoch advances
with the slice that ends the call. On the GPU one launch runs them all.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from triton_raw_ext import dialect

from .config import FP8_BLOCK, MoEConfig, max_m_tiles, next_pow2
from .kernels import DEVICE_FILE, _tile_of, _topk_rows, moe_peer_ptr, moe_pull, moe_push
from .kernels_fp8 import _quantize_cols, _quantize_rows


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def moe_wait_count(counter, expected, what, me, timeout_ms): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def moe_wait_each(counter, expected, what, me, timeout_ms): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def moe_wait_flag(flag, epoch, what, me, peer, timeout_ms): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def moe_signal(flag_sym, value, pe): ...


QBLOCK = tl.constexpr(FP8_BLOCK)
# Words of ``sched`` (int32, zero between calls); COMB_DONE has one word per source rank, then come
# the pair count per expert, the token count per destination and the per-M-tile counters
# (Schedule.sched_words).
NEXT = tl.constexpr(0)  # the next item, relative to item_begin
EXITED = tl.constexpr(1)  # programs that left the item loop
ROUTE_DONE = tl.constexpr(2)
LAYOUT_DONE = tl.constexpr(3)
DISPATCH_DONE = tl.constexpr(4)
COMB_DONE = tl.constexpr(5)
SCHED_FIXED = 5  # words before COMB_DONE's
# A traced launch's row per item: when a program took it, when its wait ended (GEMM items; else 0),
# when it finished (%globaltimer ns), and the SM that ran it.
TRACE_FIELDS = ("start_ns", "ready_ns", "end_ns", "sm")
TRACE_WORDS = tl.constexpr(len(TRACE_FIELDS))
# What a wait is for, by the index the kernel passes: moe-device.cu's moe_wait_names, in the same order
# (the report of an expired wait prints the name).
WAIT_NAMES = (
    "route items done", "layout done", "dispatch items done", "rows landed in M tile", "L1 tiles done of M tile",
    "L2 tiles done of M tile", "plan flag", "combine flag", "tokens routed",
)  # fmt: skip
WAIT_ROUTE = tl.constexpr(WAIT_NAMES.index("route items done"))
WAIT_LAYOUT = tl.constexpr(WAIT_NAMES.index("layout done"))
WAIT_DISPATCH = tl.constexpr(WAIT_NAMES.index("dispatch items done"))
WAIT_LANDED = tl.constexpr(WAIT_NAMES.index("rows landed in M tile"))
WAIT_L1 = tl.constexpr(WAIT_NAMES.index("L1 tiles done of M tile"))
WAIT_L2 = tl.constexpr(WAIT_NAMES.index("L2 tiles done of M tile"))
WAIT_PLAN = tl.constexpr(WAIT_NAMES.index("plan flag"))
WAIT_COMBINE = tl.constexpr(WAIT_NAMES.index("combine flag"))
WAIT_ROUTED = tl.constexpr(WAIT_NAMES.index("tokens routed"))  # the Gluon kernel's plan item


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for non-negative a and positive b."""
    return -(-a // b)


@dataclass(frozen=True)
class Schedule:
    """The work items of one call, region by region in hand-out order, and the sizes of the kernel's
    counter (``sched``) and layout (``layout``) buffers. Built from the layer's shape and the item
    sizes; the GEMM regions count every M tile any routing can make (``m_tiles``). ``combine_chunks``: the
    column chunks a combine item takes one of (each chunk's items for every token block, chunk by chunk;
    the Gluon kernel's), 1 where a combine item sums whole rows."""

    world: int
    experts: int
    local_experts_p2: int
    m_tiles: int
    route: int
    plan: int
    layout: int
    dispatch: int
    l1: int
    l2: int
    combine: int
    reduce: int
    combine_chunks: int = 1

    REGIONS = ("route", "plan", "layout", "dispatch", "l1", "l2", "combine", "reduce")

    @classmethod
    def of(
        cls, cfg: MoEConfig, *, block_m: int, n1_tiles: int, n2_tiles: int, route_items: int, dispatch_rows: int,
        combine_rows: int, reduce_rows: int, combine_chunks: int = 1,
    ) -> Schedule:  # fmt: skip
        """The schedule of a layer ``cfg`` with these tile counts and items sizes."""
        w, t = cfg.world, cfg.max_tokens
        m_tiles = max_m_tiles(cfg.pair_capacity, cfg.local_experts, block_m)
        return cls(
            world=w, experts=cfg.num_experts, local_experts_p2=next_pow2(cfg.local_experts), m_tiles=m_tiles,
            route=route_items, plan=w, layout=1, dispatch=w * cdiv(t, dispatch_rows), l1=m_tiles * n1_tiles,
            l2=m_tiles * n2_tiles,
            combine=w * cdiv(t, combine_rows) * combine_chunks, reduce=cdiv(t, reduce_rows) if w > 1 else 0,
            combine_chunks=combine_chunks,
        )  # fmt: skip

    def starts(self) -> dict[str, int]:
        """First item of each region (``PLAN_START`` ... ``REDUCE_START``) and ``N_ITEMS``: kernel constexprs."""
        out, first = {}, 0
        for region in self.REGIONS:
            if region != "route":
                out[f"{region.upper()}_START"] = first
            first += getattr(self, region)
        out["N_ITEMS"] = first
        return out

    def slices(self) -> list[tuple[int, int]]:
        """(item_begin, item_end) of the runs that need no other rank to be running at the same time:
        up to the layout (which waits for every rank's plan), up to the reduce (which waits for every
        rank's combine), the rest."""
        s = self.starts()
        cuts = [0, s["LAYOUT_START"], s["REDUCE_START"], s["N_ITEMS"]]
        return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]

    @property
    def sched_words(self) -> int:
        """Length of ``sched``: the fixed counters, combine items done per source, pairs per expert, tokens
        per destination, then rows landed and L1 tiles done per M tile, and L2 tiles done per M tile (per
        combine chunk where there are several)."""
        return self.landed_word + 2 * self.m_tiles + max(self.m_tiles, self.combine_chunks)

    @property
    def landed_word(self) -> int:
        """Index in ``sched`` of the first M tile's rows-landed count (the kernel's LANDED)."""
        return SCHED_FIXED + self.world + self.experts + self.world

    @property
    def layout_words(self) -> int:
        """Length of ``layout``: M tiles; pairs, first pair and first M tile per local expert; first pair
        per (source, local expert)."""
        return 1 + (3 + self.world) * self.local_experts_p2


# ----------------------------------------------------------------------------- the kernel


@triton.jit(do_not_specialize=["T", "me", "wait_ms", "item_begin", "item_end"])
def moe_persistent(
    logits_ptr, x_ptr, y_ptr,
    x_sym, ids_sym, w_sym, rank_sym, send_idx_sym, send_count_sym, send_pairs_sym, comb_sym, plan_flag_sym,
    comb_flag_sym,
    slot_ptr, recv_x, recv_ids, recv_w, recv_n, layout_ptr, sorted_row, inv_pos,
    a_src, h_ptr, h_op, y_pair, staging, sched_ptr, epoch_ptr, w1_op, w2_op,
    T, me, wait_ms, item_begin, item_end, trace_ptr, a_sorted, a_op,
    xs_sym, recv_xs, a_scale, hs_ptr, w1s_ptr, w2s_ptr,
    H: tl.constexpr, INTER: tl.constexpr, E: tl.constexpr, E_P2: tl.constexpr, K: tl.constexpr,
    K_P2: tl.constexpr, E_LOC: tl.constexpr, EL_P2: tl.constexpr, WORLD: tl.constexpr, W_P2: tl.constexpr,
    T_MAX: tl.constexpr, FP8: tl.constexpr, COPY_X: tl.constexpr, PULL: tl.constexpr, PUSH: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N1: tl.constexpr, BLOCK_N2: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, M_TILES: tl.constexpr, TMA_W1: tl.constexpr, TMA_W2: tl.constexpr,
    TMA_H: tl.constexpr, ROUTE_TOKENS: tl.constexpr, ROUTE_COLS: tl.constexpr,
    DISPATCH_ROWS: tl.constexpr, COMBINE_ROWS: tl.constexpr, REDUCE_ROWS: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_HR: tl.constexpr, PLAN_START: tl.constexpr, LAYOUT_START: tl.constexpr, DISPATCH_START: tl.constexpr,
    L1_START: tl.constexpr, L2_START: tl.constexpr, COMBINE_START: tl.constexpr, REDUCE_START: tl.constexpr,
    N_ITEMS: tl.constexpr, SCHED_WORDS: tl.constexpr, SCHED_P2: tl.constexpr, TRACE: tl.constexpr,
    HALF_TAIL: tl.constexpr, TMA_A: tl.constexpr, BLOCK_HA: tl.constexpr, SETTLE_WGMMA: tl.constexpr,
    PROMOTE: tl.constexpr,
):  # fmt: skip
    """One call of the layer on this rank: every program takes items until none is left (module
    docstring). bf16 passes None for the fp8 scale buffers (the last six). ``a_src`` / ``a_scale`` are the
    L1's A rows (x, or x_sym + x_scale in fp8, at world 1; the received rows at world > 1); ``h_op`` /
    ``w1_op`` / ``w2_op`` are tensor descriptors where TMA_H / TMA_W1 / TMA_W2, else the tensors;
    ``staging`` is y at world 1 (the combine writes it). TRACE: each item writes its row of ``trace_ptr``
    (:data:`TRACE_FIELDS`, %globaltimer ns and %smid); else ``trace_ptr`` is None. HALF_TAIL (bf16): a
    GEMM tile with at most BLOCK_M / 2 pairs left in its expert runs as a BLOCK_M / 2-row tile. TMA_A:
    dispatch copies each pair's row of ``a_src`` to its layout position in ``a_sorted`` (BLOCK_HA columns at
    a time), and L1 loads those rows through the descriptor ``a_op``; else both are None and L1 gathers
    the rows of ``a_src``. SETTLE_WGMMA (fp8): each K step waits for its last wgmma (``_scaled_step``).
    PROMOTE (fp8): each K block's product is added to float32 sums, else the sums stay in the tensor cores
    (``_scaled_step``)."""
    N1: tl.constexpr = INTER // BLOCK_N1
    N2: tl.constexpr = H // BLOCK_N2
    PAIR_COUNT: tl.constexpr = COMB_DONE + WORLD  # per expert: this call's pairs to it so far (route items)
    SENT_COUNT: tl.constexpr = PAIR_COUNT + E  # per destination rank: tokens planned for it so far
    LANDED: tl.constexpr = SENT_COUNT + WORLD  # per M tile: its pairs placed (rows landed)
    L1_DONE: tl.constexpr = LANDED + M_TILES  # per M tile: its L1 tiles done
    L2_DONE: tl.constexpr = L1_DONE + M_TILES  # per M tile: its L2 tiles done
    epoch = tl.load(epoch_ptr) + 1  # this call's; the last program stores it (item_end == N_ITEMS)
    item = item_begin + tl.atomic_add(sched_ptr + NEXT, 1, sem="relaxed")
    while item < item_end:
        following = item_begin + tl.atomic_add(sched_ptr + NEXT, 1, sem="relaxed")
        if TRACE:
            started = _globaltimer()
        if item < PLAN_START:
            _route_item(item, T, logits_ptr, x_ptr, x_sym, xs_sym, ids_sym, w_sym, rank_sym, slot_ptr, send_idx_sym,
                        sched_ptr, sched_ptr + PAIR_COUNT, sched_ptr + SENT_COUNT, H, E, E_P2, K, K_P2, E_LOC, WORLD,
                        W_P2, T_MAX, FP8, COPY_X, ROUTE_TOKENS, ROUTE_COLS)  # fmt: skip
        elif item < LAYOUT_START:
            _plan_item(item - PLAN_START, me, epoch, wait_ms, send_count_sym, send_pairs_sym, plan_flag_sym,
                       sched_ptr, sched_ptr + PAIR_COUNT, sched_ptr + SENT_COUNT, E_LOC, EL_P2, PLAN_START)  # fmt: skip
        elif item < DISPATCH_START:
            _layout_item(me, epoch, wait_ms, send_count_sym, send_pairs_sym, plan_flag_sym, comb_flag_sym, recv_n,
                         layout_ptr, sched_ptr, E_LOC, EL_P2, WORLD, W_P2, BLOCK_M, PUSH)  # fmt: skip
        elif item < L1_START:
            _dispatch_item(item - DISPATCH_START, me, wait_ms, x_sym, xs_sym, ids_sym, w_sym, rank_sym, send_idx_sym,
                           recv_x, recv_xs, recv_ids, recv_w, recv_n, layout_ptr, sorted_row, inv_pos, sched_ptr,
                           sched_ptr + LANDED, a_src, a_sorted, H, K, K_P2, E_LOC, EL_P2, WORLD, T_MAX, FP8, PULL,
                           BLOCK_M, DISPATCH_ROWS, TMA_A, BLOCK_HA)  # fmt: skip
        elif item < L2_START:
            idx = item - L1_START
            n_mt = _m_tiles(layout_ptr, sched_ptr, me, wait_ms)
            if idx >= n_mt * N1:  # past this call's M tiles: so is the rest of the region
                tl.atomic_max(sched_ptr + NEXT, L2_START - item_begin, sem="relaxed")
            else:
                pid_m, pid_n = _tile_of(idx, n_mt, N1, GROUP_M)
                expert, row0, row_end = _tile_rows(layout_ptr, pid_m, E_LOC, EL_P2, BLOCK_M)
                landed = tl.minimum(row_end - row0, BLOCK_M)
                row0 += moe_wait_count(sched_ptr + LANDED + pid_m, landed, WAIT_LANDED, me, wait_ms)
                if TRACE:
                    tl.store(trace_ptr + item * TRACE_WORDS + 1, _globaltimer())
                if FP8:
                    _l1_tile_fp8(a_src, a_op, a_scale, sorted_row, w1_op, w1s_ptr, h_ptr, hs_ptr, expert, row0,
                                 row_end, pid_n, H, INTER, BLOCK_M, TMA_W1, TMA_A, SETTLE_WGMMA, PROMOTE)  # fmt: skip
                elif HALF_TAIL and row_end - row0 <= BLOCK_M // 2:  # an expert's last tile, half full or less
                    _l1_tile_bf16(a_src, a_op, sorted_row, w1_op, h_ptr, expert, row0, row_end, pid_n, H, INTER,
                                  BLOCK_M // 2, BLOCK_N1, BLOCK_K, TMA_W1, False)  # fmt: skip
                else:
                    _l1_tile_bf16(a_src, a_op, sorted_row, w1_op, h_ptr, expert, row0, row_end, pid_n, H, INTER,
                                  BLOCK_M, BLOCK_N1, BLOCK_K, TMA_W1, TMA_A)  # fmt: skip
                _release(sched_ptr + L1_DONE + pid_m)
        elif item < COMBINE_START:
            idx = item - L2_START
            n_mt = _m_tiles(layout_ptr, sched_ptr, me, wait_ms)
            if idx >= n_mt * N2:
                tl.atomic_max(sched_ptr + NEXT, COMBINE_START - item_begin, sem="relaxed")
            else:
                pid_m, pid_n = _tile_of(idx, n_mt, N2, GROUP_M)
                expert, row0, row_end = _tile_rows(layout_ptr, pid_m, E_LOC, EL_P2, BLOCK_M)
                row0 += moe_wait_count(sched_ptr + L1_DONE + pid_m, N1, WAIT_L1, me, wait_ms)
                if TRACE:
                    tl.store(trace_ptr + item * TRACE_WORDS + 1, _globaltimer())
                if FP8:
                    _l2_tile_fp8(h_op, hs_ptr, w2_op, w2s_ptr, y_pair, expert, row0, row_end, pid_n, H, INTER,
                                 BLOCK_M, BLOCK_N2, TMA_W2, TMA_H, SETTLE_WGMMA, PROMOTE)  # fmt: skip
                elif HALF_TAIL and row_end - row0 <= BLOCK_M // 2:
                    _l2_tile_bf16(h_op, w2_op, y_pair, expert, row0, row_end, pid_n, H, INTER, BLOCK_M // 2,
                                  BLOCK_N2, BLOCK_K, TMA_W2, TMA_H)  # fmt: skip
                else:
                    _l2_tile_bf16(h_op, w2_op, y_pair, expert, row0, row_end, pid_n, H, INTER, BLOCK_M, BLOCK_N2,
                                  BLOCK_K, TMA_W2, TMA_H)  # fmt: skip
                _release(sched_ptr + L2_DONE + pid_m)
        elif item < REDUCE_START:
            _combine_item(item - COMBINE_START, me, epoch, wait_ms, recv_ids, recv_w, recv_n, inv_pos, layout_ptr,
                          y_pair, staging, comb_sym, comb_flag_sym, sched_ptr, sched_ptr + L2_DONE, H, K, K_P2,
                          E_LOC, EL_P2, WORLD, T_MAX, BLOCK_M, N2, PUSH, COMBINE_ROWS, BLOCK_H,
                          L1_START - DISPATCH_START)  # fmt: skip
        else:
            _reduce_item(item - REDUCE_START, T, me, epoch, wait_ms, comb_sym, comb_flag_sym, slot_ptr, y_ptr, H,
                         WORLD, W_P2, T_MAX, REDUCE_ROWS, BLOCK_HR)  # fmt: skip
        if TRACE:
            _trace_item(trace_ptr + item * TRACE_WORDS, started)
        item = following
    if tl.atomic_add(sched_ptr + EXITED, 1, sem="acq_rel", scope="gpu") == tl.num_programs(0) - 1:
        s = tl.arange(0, SCHED_P2)  # every other program has left the loop: reset for the next call
        tl.store(sched_ptr + s, tl.zeros_like(s), mask=s < SCHED_WORDS)
        if item_end == N_ITEMS:
            tl.store(epoch_ptr, epoch)


@triton.jit
def _globaltimer():
    """The GPU's nanosecond clock (%globaltimer: one time base for every SM)."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _trace_item(row, started):
    """Write an item's trace row (:data:`TRACE_FIELDS`; ``ready`` was written by a GEMM item's wait)."""
    smid = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(row, started)
    tl.store(row + 2, _globaltimer())
    tl.store(row + 3, smid.to(tl.int64))


@triton.jit
def _release(counter):
    """Count one finished item on ``counter``: every thread's stores first, then a release add."""
    tl.debug_barrier()
    tl.atomic_add(counter, 1, sem="release", scope="gpu")


@triton.jit
def _m_tiles(layout_ptr, sched_ptr, me, wait_ms):
    """This call's M tiles (once the layout item has run)."""
    zero = moe_wait_count(sched_ptr + LAYOUT_DONE, 1, WAIT_LAYOUT, me, wait_ms)
    return tl.load(layout_ptr + zero, cache_modifier=".cg")


@triton.jit
def _route_item(
    item, T, logits_ptr, x_ptr, x_sym, xs_sym, ids_sym, w_sym, rank_sym, slot_ptr, send_idx_sym, sched_ptr,
    pair_count, sent_count, H: tl.constexpr, E: tl.constexpr, E_P2: tl.constexpr, K: tl.constexpr,
    K_P2: tl.constexpr, E_LOC: tl.constexpr, WORLD: tl.constexpr, W_P2: tl.constexpr, T_MAX: tl.constexpr,
    FP8: tl.constexpr, COPY_X: tl.constexpr, ROUTE_TOKENS: tl.constexpr, ROUTE_COLS: tl.constexpr,
):  # fmt: skip
    """Tokens [tb * ROUTE_TOKENS, +ROUTE_TOKENS) x columns [ch * ROUTE_COLS, +ROUTE_COLS): chunk 0 routes
    them and plans their pairs (:func:`_plan_rows`); fp8 quantizes the columns into x_sym + x_scale, bf16
    with COPY_X copies them into x_sym."""
    CHUNKS: tl.constexpr = H // ROUTE_COLS if (FP8 or COPY_X) else 1
    tb = item // CHUNKS
    ch = item % CHUNKS
    offs_t = tb * ROUTE_TOKENS + tl.arange(0, ROUTE_TOKENS)
    rows = offs_t.to(tl.int64)
    mask_t = offs_t < T
    if tb * ROUTE_TOKENS < T:
        if ch == 0:
            ids = _topk_rows(logits_ptr, ids_sym, w_sym, rows, mask_t, E, E_P2, K, K_P2, ROUTE_TOKENS)
            _plan_rows(ids, offs_t, mask_t, rank_sym, slot_ptr, send_idx_sym, pair_count, sent_count, K, K_P2, E_LOC,
                       WORLD, W_P2, T_MAX)  # fmt: skip
        if FP8:
            # All the item's columns in one step (block by block, each paid a load's latency), but at world > 1
            # at most 256: 1024 held in registers there made ptxas spill inside the GEMM loops.
            STEP: tl.constexpr = ROUTE_COLS if WORLD == 1 or ROUTE_COLS < 2 * QBLOCK else 2 * QBLOCK
            for c0 in range(0, ROUTE_COLS, STEP):  # constant bounds: Triton 3.6's interpreter needs them
                _quantize_cols(x_ptr, x_sym, xs_sym, rows, mask_t, ch * ROUTE_COLS + c0, H, STEP)
        elif COPY_X:
            cc = tl.arange(0, 64)  # H and ROUTE_COLS are multiples of 64
            for c0 in range(0, ROUTE_COLS, 64):
                offs = rows[:, None] * H + ch * ROUTE_COLS + c0 + cc[None, :]
                tl.store(x_sym + offs, tl.load(x_ptr + offs, mask=mask_t[:, None]), mask=mask_t[:, None])
    _release(sched_ptr + ROUTE_DONE)


@triton.jit
def _plan_rows(
    ids, offs_t, mask_t, rank_sym, slot_ptr, send_idx_sym, pair_count, sent_count, K: tl.constexpr,
    K_P2: tl.constexpr, E_LOC: tl.constexpr, WORLD: tl.constexpr, W_P2: tl.constexpr, T_MAX: tl.constexpr,
):  # fmt: skip
    """The plan of the tokens ``offs_t`` with top-k ids ``ids``, by atomic counters (zero at the call's
    start): each pair's rank among this rank's pairs for its expert (``pair_count[e]``) into rank_sym,
    and for each destination rank r the token's slot in r's send list (``sent_count[r]``; -1 when no
    pair goes to r) into slot[:, r], the token into send_idx[r, slot]. Positions follow the order the
    atomics land in, not token order: every reader goes through these lists, and a GEMM row's result
    does not depend on which rows share its tile. World 1 is the exception: L1 gathers its rows from x
    by received row, so the slot of token t is t."""
    kk = tl.arange(0, K_P2)
    valid = mask_t[:, None] & (kk[None, :] < K)
    rank = tl.atomic_add(pair_count + ids, tl.full(ids.shape, 1, tl.int32), mask=valid, sem="relaxed")
    tl.store(rank_sym + offs_t[:, None] * K + kk[None, :], rank, mask=valid)
    if WORLD == 1:  # every token goes to this rank, whose L1 reads x itself: a token's slot is the token
        tl.store(slot_ptr + offs_t, offs_t, mask=mask_t)
        tl.store(send_idx_sym + offs_t, offs_t, mask=mask_t)
        tl.atomic_add(sent_count, tl.sum(mask_t.to(tl.int32), axis=0), sem="relaxed")
    else:
        ww = tl.arange(0, W_P2)
        goes = (ids // E_LOC)[:, :, None] == ww[None, None, :]  # [tokens, k, destination]
        sent = tl.max((goes & valid[:, :, None]).to(tl.int32), axis=1) > 0
        dest = ww[None, :] + tl.zeros_like(offs_t)[:, None]
        slot = tl.atomic_add(sent_count + dest, tl.full(dest.shape, 1, tl.int32), mask=sent, sem="relaxed")
        in_world = mask_t[:, None] & (dest < WORLD)
        tl.store(slot_ptr + offs_t[:, None] * WORLD + dest, tl.where(sent, slot, -1), mask=in_world)
        tl.store(send_idx_sym + dest * T_MAX + slot, offs_t[:, None], mask=sent)


@triton.jit
def _plan_item(
    r, me, epoch, wait_ms, send_count_sym, send_pairs_sym, plan_flag_sym, sched_ptr, pair_count, sent_count,
    E_LOC: tl.constexpr, EL_P2: tl.constexpr, N_ROUTE: tl.constexpr,
):  # fmt: skip
    """Destination rank r, once every route item is done: the tokens it gets and the pairs per expert it
    gets (the route items' counters) into send_count[r] and send_pairs[r]. Then raises this rank's plan
    flag on r."""
    zero = moe_wait_count(sched_ptr + ROUTE_DONE, N_ROUTE, WAIT_ROUTE, me, wait_ms)
    ee = tl.arange(0, EL_P2)
    per_expert = tl.load(pair_count + r * E_LOC + ee + zero, mask=ee < E_LOC, other=0, cache_modifier=".cg")
    tl.store(send_count_sym + r, tl.load(sent_count + r + zero, cache_modifier=".cg"))
    tl.store(send_pairs_sym + r * E_LOC + ee, per_expert, mask=ee < E_LOC)
    moe_signal(plan_flag_sym + me, epoch, r)


@triton.jit
def _layout_item(
    me, epoch, wait_ms, send_count_sym, send_pairs_sym, plan_flag_sym, comb_flag_sym, recv_n, layout_ptr, sched_ptr,
    E_LOC: tl.constexpr, EL_P2: tl.constexpr, WORLD: tl.constexpr, W_P2: tl.constexpr, BLOCK_M: tl.constexpr,
    PUSH: tl.constexpr,
):  # fmt: skip
    """Once every rank's plan for this rank is in: rows per source (recv_n) and the pair layout. Pairs are
    grouped by local expert, then by source, then in the source's order; M tiles of BLOCK_M pairs never
    span two experts. ``layout``: [0] M tiles, then per local expert its pairs, first pair and first M
    tile, then the first pair of each (source, expert). Sources that send nothing get this rank's
    combine flag at once (PUSH: world > 1)."""
    ww = tl.arange(0, W_P2)
    ee = tl.arange(0, EL_P2)
    counts = tl.zeros([W_P2], dtype=tl.int32)
    pairs = tl.zeros([W_P2, EL_P2], dtype=tl.int32)
    for src in tl.static_range(WORLD):
        zero = moe_wait_flag(plan_flag_sym + src, epoch, WAIT_PLAN, me, src, wait_ms)
        their_count = moe_peer_ptr(send_count_sym, src).to(tl.pointer_type(tl.int32))
        their_pairs = moe_peer_ptr(send_pairs_sym, src).to(tl.pointer_type(tl.int32))
        c = tl.load(their_count + me + zero, cache_modifier=".cg")
        p = tl.load(their_pairs + me * E_LOC + ee + zero, mask=ee < E_LOC, other=0, cache_modifier=".cg")
        counts = tl.where(ww == src, c, counts)
        pairs = tl.where(ww[:, None] == src, p[None, :], pairs)
    tl.store(recv_n + ww, counts, mask=ww < WORLD)
    total = tl.sum(pairs, axis=0)
    tiles = (total + BLOCK_M - 1) // BLOCK_M
    first_pair = tl.cumsum(total, axis=0) - total
    tl.store(layout_ptr, tl.sum(tiles, axis=0))
    tl.store(layout_ptr + 1 + ee, total)
    tl.store(layout_ptr + 1 + EL_P2 + ee, first_pair)
    tl.store(layout_ptr + 1 + 2 * EL_P2 + ee, tl.cumsum(tiles, axis=0) - tiles)
    src_first = first_pair[None, :] + tl.cumsum(pairs, axis=0) - pairs
    tl.store(layout_ptr + 1 + 3 * EL_P2 + ww[:, None] * EL_P2 + ee[None, :], src_first, mask=(ww < WORLD)[:, None])
    if PUSH:
        for src in tl.static_range(WORLD):
            if tl.sum(tl.where(ww == src, counts, 0), axis=0) == 0:
                moe_signal(comb_flag_sym + me, epoch, src)
    _release(sched_ptr + LAYOUT_DONE)


@triton.jit
def _tile_rows(layout_ptr, pid_m, E_LOC: tl.constexpr, EL_P2: tl.constexpr, BLOCK_M: tl.constexpr):
    """(local expert, first pair, end of the expert's pairs) of M tile ``pid_m`` of the layout."""
    ee = tl.arange(0, EL_P2)
    inside = ee < E_LOC
    total = tl.load(layout_ptr + 1 + ee, mask=inside, other=0, cache_modifier=".cg")
    first_pair = tl.load(layout_ptr + 1 + EL_P2 + ee, mask=inside, other=0, cache_modifier=".cg")
    first_tile = tl.load(layout_ptr + 1 + 2 * EL_P2 + ee, mask=inside, other=0, cache_modifier=".cg")
    tile_end = tl.where(inside, first_tile + (total + BLOCK_M - 1) // BLOCK_M, 0x7FFFFFFF)
    expert = tl.sum((tile_end <= pid_m).to(tl.int32), axis=0)
    this = ee == expert
    start = tl.sum(tl.where(this, first_pair, 0), axis=0)
    row0 = start + (pid_m - tl.sum(tl.where(this, first_tile, 0), axis=0)) * BLOCK_M
    return expert, row0, start + tl.sum(tl.where(this, total, 0), axis=0)


@triton.jit
def _pair_tiles(layout_ptr, e, pos, owned, EL_P2: tl.constexpr, BLOCK_M: tl.constexpr):
    """M tile of each pair at position ``pos`` of local expert ``e`` (0 where not ``owned``)."""
    e_safe = tl.where(owned, e, 0)
    first_pair = tl.load(layout_ptr + 1 + EL_P2 + e_safe, cache_modifier=".cg")
    first_tile = tl.load(layout_ptr + 1 + 2 * EL_P2 + e_safe, cache_modifier=".cg")
    return tl.where(owned, first_tile + (pos - first_pair) // BLOCK_M, 0)


@triton.jit
def _dispatch_item(
    idx, me, wait_ms, x_sym, xs_sym, ids_sym, w_sym, rank_sym, send_idx_sym, recv_x, recv_xs, recv_ids, recv_w,
    recv_n, layout_ptr, sorted_row, inv_pos, sched_ptr, landed_ptr, a_src, a_sorted, H: tl.constexpr,
    K: tl.constexpr, K_P2: tl.constexpr, E_LOC: tl.constexpr, EL_P2: tl.constexpr, WORLD: tl.constexpr,
    T_MAX: tl.constexpr, FP8: tl.constexpr, PULL: tl.constexpr, BLOCK_M: tl.constexpr, DISPATCH_ROWS: tl.constexpr,
    TMA_A: tl.constexpr, BLOCK_HA: tl.constexpr,
):  # fmt: skip
    """Slots [blk * DISPATCH_ROWS, +DISPATCH_ROWS) of source src (this rank's own first): pull each token
    row into received row src * T_MAX + slot (PULL: world > 1), copy its routing, place its pairs at
    their layout positions (sorted_row, inv_pos; TMA_A: their rows of ``a_src`` into ``a_sorted`` too),
    then count them landed in their M tiles."""
    BLOCKS: tl.constexpr = (T_MAX + DISPATCH_ROWS - 1) // DISPATCH_ROWS
    src = (me + idx // BLOCKS) % WORLD
    slot0 = (idx % BLOCKS) * DISPATCH_ROWS
    zero = moe_wait_count(sched_ptr + LAYOUT_DONE, 1, WAIT_LAYOUT, me, wait_ms)
    n = tl.load(recv_n + src + zero, cache_modifier=".cg")
    if slot0 < n:
        their_idx = moe_peer_ptr(send_idx_sym, src).to(tl.pointer_type(tl.int32)) + me * T_MAX
        if PULL:
            for j in range(0, DISPATCH_ROWS):
                if slot0 + j < n:
                    t = tl.load(their_idx + slot0 + j, cache_modifier=".cg").to(tl.int64)
                    row = (src * T_MAX + slot0 + j).to(tl.int64)
                    if FP8:
                        moe_pull(recv_x + row * H, x_sym + t * H, H, src)
                        moe_pull(recv_xs + row * (H // QBLOCK), xs_sym + t * (H // QBLOCK), (H // QBLOCK) * 4, src)
                    else:
                        moe_pull(recv_x + row * H, x_sym + t * H, H * 2, src)
        slots = slot0 + tl.arange(0, DISPATCH_ROWS)
        live = slots < n
        tok = tl.load(their_idx + slots, mask=live, other=0, cache_modifier=".cg").to(tl.int64)
        rows = (src * T_MAX + slots).to(tl.int64)
        kk = tl.arange(0, K_P2)
        mk = live[:, None] & (kk[None, :] < K)
        at = tok[:, None] * K + kk[None, :]
        ids = tl.load(moe_peer_ptr(ids_sym, src).to(tl.pointer_type(tl.int32)) + at, mask=mk, other=-1,
                      cache_modifier=".cg")  # fmt: skip
        wts = tl.load(moe_peer_ptr(w_sym, src).to(tl.pointer_type(tl.float32)) + at, mask=mk, other=0.0,
                      cache_modifier=".cg")  # fmt: skip
        e = ids - me * E_LOC
        owned = mk & (e >= 0) & (e < E_LOC)
        rank = tl.load(moe_peer_ptr(rank_sym, src).to(tl.pointer_type(tl.int32)) + at, mask=owned, other=0,
                       cache_modifier=".cg")  # fmt: skip
        out = rows[:, None] * K + kk[None, :]
        tl.store(recv_ids + out, ids, mask=mk)
        tl.store(recv_w + out, wts, mask=mk)
        pos = tl.load(layout_ptr + 1 + 3 * EL_P2 + src * EL_P2 + tl.where(owned, e, 0), cache_modifier=".cg") + rank
        tl.store(sorted_row + pos, (rows[:, None] + tl.zeros_like(kk)[None, :]).to(tl.int32), mask=owned)
        tl.store(inv_pos + out, tl.where(owned, pos, -1), mask=mk)
        tile = _pair_tiles(layout_ptr, e, pos, owned, EL_P2, BLOCK_M)
        if TMA_A:
            tl.debug_barrier()  # the rows pulled, by every thread, before they are read
            for c in range(0, H, BLOCK_HA):
                cols = c + tl.arange(0, BLOCK_HA)
                vals = tl.load(a_src + rows[:, None] * H + cols[None, :], mask=live[:, None], cache_modifier=".cg")
                for choice in tl.static_range(K):  # each pair of the rows: that column of pos / owned
                    at_k = kk[None, :] == choice
                    pos_k = tl.sum(tl.where(at_k, pos, 0), axis=1).to(tl.int64)
                    owned_k = tl.sum(tl.where(at_k & owned, 1, 0), axis=1) > 0
                    tl.store(a_sorted + pos_k[:, None] * H + cols[None, :], vals, mask=owned_k[:, None])
        tl.debug_barrier()  # the rows pulled and the pairs placed, by every thread, before the counts
        tl.atomic_add(landed_ptr + tile, tl.full(tile.shape, 1, tl.int32), mask=owned, sem="release", scope="gpu")
    _release(sched_ptr + DISPATCH_DONE)


@triton.jit
def _a_rows(sorted_row, row0, row_end, BLOCK_M: tl.constexpr):
    """(pair positions, which of them are the expert's, their received rows) of an L1 tile's BLOCK_M pairs."""
    offs_m = row0 + tl.arange(0, BLOCK_M)
    mask_m = offs_m < row_end
    rows = tl.load(sorted_row + offs_m, mask=mask_m, other=0, cache_modifier=".cg").to(tl.int64)
    return offs_m, mask_m, rows


@triton.jit
def _l1_tile_bf16(
    a_src, a_op, sorted_row, w1_op, h_ptr, expert, row0, row_end, pid_n, H: tl.constexpr, INTER: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TMA_W1: tl.constexpr, TMA_A: tl.constexpr,
):  # fmt: skip
    """h[p, n] = silu(x_p @ w1[e][:, n]) * (x_p @ w1[e][:, INTER + n]) for the tile's pairs p; A rows
    through TMA_A's descriptor over the pair-ordered rows (rows past the expert's belong to others: their
    h rows are not stored) or gathered through sorted_row; w1 [E_LOC * H, 2 * INTER] through TMA_W1's
    descriptor or pointers."""
    offs_m, mask_m, rows = _a_rows(sorted_row, row0, row_end, BLOCK_M)
    n0 = pid_n * BLOCK_N
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_src + rows[:, None] * H + offs_k[None, :]
    acc_g = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, H, BLOCK_K):
        if TMA_A:
            a = a_op.load([row0, k])
        else:
            a = tl.load(a_ptrs + k, mask=mask_m[:, None], other=0.0)
        if TMA_W1:
            gate = w1_op.load([expert * H + k, n0])
            up = w1_op.load([expert * H + k, INTER + n0])
        else:
            w_ptrs = w1_op + (expert.to(tl.int64) * H + k + offs_k)[:, None] * (2 * INTER) + offs_n[None, :]
            gate = tl.load(w_ptrs)
            up = tl.load(w_ptrs + INTER)
        acc_g = tl.dot(a, gate, acc_g)
        acc_u = tl.dot(a, up, acc_u)
    h = acc_g * tl.sigmoid(acc_g) * acc_u
    tl.store(h_ptr + offs_m.to(tl.int64)[:, None] * INTER + offs_n[None, :], h.to(tl.bfloat16), mask=mask_m[:, None])


@triton.jit
def _l1_tile_fp8(
    a_src, a_op, a_scale, sorted_row, w1_op, w1s_ptr, h_ptr, hs_ptr, expert, row0, row_end, pid_n,
    H: tl.constexpr, INTER: tl.constexpr, BLOCK_M: tl.constexpr, TMA_W1: tl.constexpr, TMA_A: tl.constexpr,
    SETTLE: tl.constexpr, PROMOTE: tl.constexpr,
):  # fmt: skip
    """As ``moe_l1_swiglu_fp8``: the sum over K blocks of 128 of ``dot(a, b) * (a_scale * b_scale)`` for gate
    and up (:func:`_scaled_step`); SwiGLU; h quantized per (pair, 128 columns). The weights are
    ``persistent_launch.persistent_weights``': each 128 rows of gate followed by the same rows of up
    (w1q [E_LOC * 2 * INTER, H], K-major), read through TMA_W1's descriptor ([128, 128] boxes, transposed
    for the dot) or pointers. A rows as in ``_l1_tile_bf16`` (TMA_A), their scales gathered through
    sorted_row. SETTLE: wait for a K step's last wgmma within the step (:func:`_scaled_step`). Each step's
    scales are loaded during the step before (:func:`_carried`): Triton's pipeliner prefetches only a dot's
    A and B, so a scale loaded in its own step holds the step for a load's latency (``gemm_ceiling``, dense
    tiles of this shape on the H200: 42.6 us per SM so, 40.1 loaded ahead, 29.0 without scales)."""
    KB: tl.constexpr = H // QBLOCK
    offs_m, mask_m, rows = _a_rows(sorted_row, row0, row_end, BLOCK_M)
    offs_k = tl.arange(0, QBLOCK)
    e = expert.to(tl.int64)
    w_row = expert * 2 * INTER + pid_n * 2 * QBLOCK  # this tile's gate block, then its up block
    s_ptr = w1s_ptr + (e * (INTER // QBLOCK) + pid_n) * 2 * KB  # their scales: KB for gate, then KB for up
    a_ptrs = a_src + rows[:, None] * H + offs_k[None, :]
    as_ptrs = a_scale + rows * KB
    acc_g = tl.zeros([BLOCK_M, QBLOCK], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_M, QBLOCK], dtype=tl.float32)
    a_s, g_s, u_s = tl.full([BLOCK_M], 1.0, tl.float32), 1.0, 1.0  # rows past the tile: scale 1, never stored
    a_next = tl.load(as_ptrs, mask=mask_m, other=1.0)  # each step's scales are loaded one step ahead
    g_next = tl.load(s_ptr)
    u_next = tl.load(s_ptr + KB)
    for kb in range(0, KB):
        if TMA_A:
            a = a_op.load([row0, kb * QBLOCK])
        else:
            a = tl.load(a_ptrs + kb * QBLOCK, mask=mask_m[:, None], other=0.0)
        a_was, g_was, u_was = a_s, g_s, u_s
        a_s, g_s, u_s = _carried(a_next), _carried(g_next), _carried(u_next)
        b_g = _weight_block(w1_op, w_row, kb * QBLOCK, H, TMA_W1)
        acc_g = _scaled_step(a, b_g, acc_g, a_was, a_s, g_was, g_s, False, PROMOTE)
        b_u = _weight_block(w1_op, w_row + QBLOCK, kb * QBLOCK, H, TMA_W1)
        acc_u = _scaled_step(a, b_u, acc_u, a_was, a_s, u_was, u_s, SETTLE, PROMOTE)  # the step's last dot
        following = tl.minimum(kb + 1, KB - 1)
        a_next = tl.load(as_ptrs + following, mask=mask_m, other=1.0)
        g_next = tl.load(s_ptr + following)
        u_next = tl.load(s_ptr + KB + following)
    g = _scaled_sum(acc_g, a_s, g_s, PROMOTE)
    u = _scaled_sum(acc_u, a_s, u_s, PROMOTE)
    q, scale = _quantize_rows(g * tl.sigmoid(g) * u)
    offs_p = offs_m.to(tl.int64)
    offs_n = pid_n * QBLOCK + tl.arange(0, QBLOCK)
    tl.store(h_ptr + offs_p[:, None] * INTER + offs_n[None, :], q, mask=mask_m[:, None])
    tl.store(hs_ptr + offs_p * (INTER // QBLOCK) + pid_n, scale, mask=mask_m)


@triton.jit
def _scaled_step(a, b, acc, a_was, a_s, b_was, b_s, SETTLE: tl.constexpr, PROMOTE: tl.constexpr):
    """One K block of a block-scaled fp8 product. PROMOTE: ``acc`` is the float32 sum of the earlier
    blocks' ``dot(a, b) * a_scale * b_scale``; the block's dot runs into a fresh accumulator whose scaled
    product is added to it (DeepGEMM's order: the tensor cores never sum more than one block of 128).
    Else ``acc`` is kept in units of the current block's scales: given acc = (that sum) / (a_was * b_was),
    returns the sum plus ``dot(a, b) * a_s * b_s``, divided by a_s * b_s (after the last block
    :func:`_scaled_sum` multiplies the scales back in). The wgmma then accumulates in place, with no
    product beside the accumulator, which lets a tile hold 128 rows (halving the weight bytes each row
    costs), but the tensor cores sum the whole K at their own precision: 3x the error of promotion from
    the quantization-aware reference at the production load. Float32 holds the rescaled sum unless a
    row's A block and the B block both sit at the scale floor (``quant.AMAX_FLOOR``, all-zero blocks)
    after partial sums above about 1e8. ``a_was`` / ``a_s``: [rows]; ``b_was`` / ``b_s``: scalars.

    SETTLE (in place; the caller passes it for a K step's last dot): Triton waits for this wgmma before
    the step ends (``+ 0.0`` uses its result there). Without it the last dot stays in flight into the next
    step, beside its scale loads and barrier wait: the production fp8 layer took 320 us instead of 355 on
    the H200 with Triton 3.6. The ptxas of Triton >= 3.7 serializes every wgmma of a kernel that leaves
    one in flight across a loop's back edge (C7518), so there the callers settle it. A promoted step
    waits for its dot anyway, to add the product."""
    if PROMOTE:
        return acc + tl.dot(a, b) * (a_s[:, None] * b_s)
    acc = tl.dot(a, b, acc * ((a_was / a_s)[:, None] * (b_was / b_s)))
    if SETTLE:
        acc += 0.0
    return acc


@triton.jit
def _scaled_sum(acc, a_s, b_s, PROMOTE: tl.constexpr):
    """A tile's float32 sums from :func:`_scaled_step`'s accumulator after the last K block, whose scales
    are ``a_s`` ([rows]) and ``b_s``."""
    if PROMOTE:
        return acc
    return acc * (a_s * b_s)[:, None]


@triton.jit
def _carried(scale):
    """A scale loaded in the step before, as this step's: ``+ 0.0`` keeps the loop from yielding a carried
    value unchanged, which Triton's pipeliner takes for a dependence two iterations back and then leaves
    the loop unpipelined (no multi-buffered TMA loads)."""
    return scale + 0.0


@triton.jit
def _weight_block(w_op, row, k, ROW_LEN: tl.constexpr, TMA: tl.constexpr):
    """The [128 (K), 128 (N)] block of K-major fp8 weights (``w_op`` [rows, ROW_LEN]) for a dot's B: weight
    rows [row, row + 128), columns [k, k + 128), through TMA's descriptor ([128, 128] boxes, transposed)
    or pointer loads."""
    if TMA:
        block = w_op.load([row, k]).T
    else:
        rows = (tl.arange(0, QBLOCK) + row).to(tl.int64)
        block = tl.load(w_op + rows[None, :] * ROW_LEN + (tl.arange(0, QBLOCK) + k)[:, None])
    return block


@triton.jit
def _l2_tile_bf16(
    h_op, w2_op, y_pair, expert, row0, row_end, pid_n, H: tl.constexpr, INTER: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TMA_W2: tl.constexpr, TMA_H: tl.constexpr,
):  # fmt: skip
    """y_pair[p] = h[p] @ w2[e] for the tile's pairs: h [PAIRS, INTER] and w2 [E_LOC * INTER, H] through
    descriptors (TMA_H, TMA_W2) or pointers. A TMA tile's rows past the expert's are the next expert's (or
    zeros past the buffer); only the expert's rows are stored."""
    offs_m = row0 + tl.arange(0, BLOCK_M)
    mask_m = offs_m < row_end
    n0 = pid_n * BLOCK_N
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, INTER, BLOCK_K):
        if TMA_H:
            a = h_op.load([row0, k])
        else:
            a = tl.load(h_op + offs_m.to(tl.int64)[:, None] * INTER + (k + offs_k)[None, :], mask=mask_m[:, None],
                        other=0.0, cache_modifier=".cg")  # fmt: skip
        if TMA_W2:
            b = w2_op.load([expert * INTER + k, n0])
        else:
            b = tl.load(w2_op + (expert.to(tl.int64) * INTER + k + offs_k)[:, None] * H + offs_n[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(y_pair + offs_m.to(tl.int64)[:, None] * H + offs_n[None, :], acc.to(tl.bfloat16), mask=mask_m[:, None])


@triton.jit
def _l2_tile_fp8(
    h_op, hs_ptr, w2_op, w2s_ptr, y_pair, expert, row0, row_end, pid_n, H: tl.constexpr, INTER: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TMA_W2: tl.constexpr, TMA_H: tl.constexpr, SETTLE: tl.constexpr,
    PROMOTE: tl.constexpr,
):  # fmt: skip
    """As ``moe_l2_fp8``: y_pair[p] = h[p] @ w2[e] with block scales, a K block at a time
    (:func:`_scaled_step`). A tile of 256 columns spans two w2 scale blocks: it runs as two 128-column
    dots, each with its block's scale as a scalar (a per-column scale vector cost 140 B of spills with
    Triton 3.9's ptxas, which then serialized the wgmma). w2q [E_LOC * H, INTER] K-major through
    TMA_W2's descriptor ([128, 128] boxes) or pointers. SETTLE as in ``_l1_tile_fp8``."""
    KB: tl.constexpr = INTER // QBLOCK
    TWO: tl.constexpr = BLOCK_N == 2 * QBLOCK
    offs_m = row0 + tl.arange(0, BLOCK_M)
    mask_m = offs_m < row_end
    offs_p = offs_m.to(tl.int64)
    n0 = pid_n * BLOCK_N
    half = tl.arange(0, QBLOCK)
    offs_k = tl.arange(0, QBLOCK)
    e = expert.to(tl.int64)
    w_row = expert * H + n0  # this tile's first weight block; the second follows
    bs_ptr = w2s_ptr + e * (H // QBLOCK * KB) + (n0 // QBLOCK) * KB  # the first block's scales; the second's next
    as_ptrs = hs_ptr + offs_p * KB
    acc_lo = tl.zeros([BLOCK_M, QBLOCK], dtype=tl.float32)
    acc_hi = tl.zeros([BLOCK_M, QBLOCK], dtype=tl.float32)
    a_s, lo_s, hi_s = tl.full([BLOCK_M], 1.0, tl.float32), 1.0, 1.0
    a_next = tl.load(as_ptrs, mask=mask_m, other=1.0, cache_modifier=".cg")  # scales one step ahead, as in L1
    lo_next = tl.load(bs_ptr)
    hi_next = tl.load(bs_ptr + KB) if TWO else 1.0
    for kb in range(0, KB):
        if TMA_H:
            a = h_op.load([row0, kb * QBLOCK])
        else:
            a = tl.load(h_op + offs_p[:, None] * INTER + (offs_k + kb * QBLOCK)[None, :], mask=mask_m[:, None],
                        other=0.0, cache_modifier=".cg")  # fmt: skip
        a_was, lo_was, hi_was = a_s, lo_s, hi_s
        a_s, lo_s, hi_s = _carried(a_next), _carried(lo_next), _carried(hi_next)
        b_lo = _weight_block(w2_op, w_row, kb * QBLOCK, INTER, TMA_W2)
        acc_lo = _scaled_step(a, b_lo, acc_lo, a_was, a_s, lo_was, lo_s, SETTLE and not TWO, PROMOTE)
        if TWO:
            b_hi = _weight_block(w2_op, w_row + QBLOCK, kb * QBLOCK, INTER, TMA_W2)
            acc_hi = _scaled_step(a, b_hi, acc_hi, a_was, a_s, hi_was, hi_s, SETTLE, PROMOTE)
        following = tl.minimum(kb + 1, KB - 1)
        a_next = tl.load(as_ptrs + following, mask=mask_m, other=1.0, cache_modifier=".cg")
        lo_next = tl.load(bs_ptr + following)
        if TWO:
            hi_next = tl.load(bs_ptr + KB + following)
    out = y_pair + offs_p[:, None] * H + (n0 + half)[None, :]
    tl.store(out, _scaled_sum(acc_lo, a_s, lo_s, PROMOTE).to(tl.bfloat16), mask=mask_m[:, None])
    if TWO:
        tl.store(out + QBLOCK, _scaled_sum(acc_hi, a_s, hi_s, PROMOTE).to(tl.bfloat16), mask=mask_m[:, None])


@triton.jit
def _combine_item(
    idx, me, epoch, wait_ms, recv_ids, recv_w, recv_n, inv_pos, layout_ptr, y_pair, staging, comb_sym, comb_flag_sym,
    sched_ptr, l2_done_ptr, H: tl.constexpr, K: tl.constexpr, K_P2: tl.constexpr, E_LOC: tl.constexpr,
    EL_P2: tl.constexpr, WORLD: tl.constexpr, T_MAX: tl.constexpr, BLOCK_M: tl.constexpr, N2: tl.constexpr,
    PUSH: tl.constexpr, COMBINE_ROWS: tl.constexpr, BLOCK_H: tl.constexpr, N_DISPATCH: tl.constexpr,
):  # fmt: skip
    """Received rows [blk * COMBINE_ROWS, +COMBINE_ROWS) of source src (other ranks first): once the L2
    tiles of their pairs are done, each row's weighted sum of its pairs into ``staging`` (y at world 1),
    then (PUSH) into src's comb[me, slot]; the item that completes src's rows raises this rank's
    combine flag on src."""
    BLOCKS: tl.constexpr = (T_MAX + COMBINE_ROWS - 1) // COMBINE_ROWS
    src = (me + 1 + idx // BLOCKS) % WORLD
    slot0 = (idx % BLOCKS) * COMBINE_ROWS
    zero = moe_wait_count(sched_ptr + DISPATCH_DONE, N_DISPATCH, WAIT_DISPATCH, me, wait_ms)
    n = tl.load(recv_n + src + zero, cache_modifier=".cg")
    if slot0 < n:
        slots = slot0 + tl.arange(0, COMBINE_ROWS)
        live = slots < n
        rows = (src * T_MAX + slots).to(tl.int64)
        kk = tl.arange(0, K_P2)
        mk = live[:, None] & (kk[None, :] < K)
        at = rows[:, None] * K + kk[None, :]
        pos = tl.load(inv_pos + at, mask=mk, other=-1, cache_modifier=".cg")
        e = tl.load(recv_ids + at, mask=mk, other=-1, cache_modifier=".cg") - me * E_LOC
        tile = _pair_tiles(layout_ptr, e, pos, pos >= 0, EL_P2, BLOCK_M)
        tl.debug_barrier()
        moe_wait_each(l2_done_ptr + tile, tl.where(pos >= 0, N2, 0), WAIT_L2, me, wait_ms)
        tl.debug_barrier()  # every thread's waits before any thread's y_pair loads
        # The rows side by side and the K pairs unrolled: each step issues K independent loads of
        # [COMBINE_ROWS, BLOCK_H] (latency, not bandwidth, bounds a few rows) and sums in registers.
        w = tl.load(recv_w + at, mask=mk, other=0.0, cache_modifier=".cg")
        cols = tl.arange(0, BLOCK_H)
        for h0 in range(0, H, BLOCK_H):
            acc = tl.zeros([COMBINE_ROWS, BLOCK_H], dtype=tl.float32)
            for k in tl.static_range(K):
                p_k = tl.sum(tl.where(kk[None, :] == k, pos, 0), axis=1)
                w_k = tl.sum(tl.where(kk[None, :] == k, w, 0.0), axis=1)
                v = tl.load(y_pair + p_k.to(tl.int64)[:, None] * H + h0 + cols[None, :], mask=(p_k >= 0)[:, None],
                            other=0.0, cache_modifier=".cg")  # fmt: skip
                acc += v.to(tl.float32) * w_k[:, None]
            tl.store(staging + rows[:, None] * H + h0 + cols[None, :], acc.to(tl.bfloat16), mask=live[:, None])
        if PUSH:  # moe_push starts with a CTA barrier: every thread's staging stores are in
            for j in range(0, COMBINE_ROWS):
                slot = slot0 + j
                if slot < n:
                    row = (src * T_MAX + slot).to(tl.int64)
                    moe_push(comb_sym + (me * T_MAX + slot).to(tl.int64) * H, staging + row * H, H * 2, src)
            tl.debug_barrier()  # every thread's pushes before the count
            done = tl.atomic_add(sched_ptr + COMB_DONE + src, 1, sem="acq_rel", scope="gpu")
            if done == (n + COMBINE_ROWS - 1) // COMBINE_ROWS - 1:
                moe_signal(comb_flag_sym + me, epoch, src)


@triton.jit
def _reduce_item(
    idx, T, me, epoch, wait_ms, comb_sym, comb_flag_sym, slot_ptr, y_ptr, H: tl.constexpr, WORLD: tl.constexpr,
    W_P2: tl.constexpr, T_MAX: tl.constexpr, REDUCE_ROWS: tl.constexpr, BLOCK_HR: tl.constexpr,
):  # fmt: skip
    """Tokens [idx * REDUCE_ROWS, +REDUCE_ROWS): once every rank's combine for this rank is in,
    y[t] = sum over the ranks r t went to of comb[r, slot[t, r]] (float32 sum, bf16 out)."""
    t0 = idx * REDUCE_ROWS
    if t0 < T:
        zero = tl.zeros([], dtype=tl.int32)
        for r in tl.static_range(WORLD):
            zero += moe_wait_flag(comb_flag_sym + r, epoch, WAIT_COMBINE, me, r, wait_ms)
        rr = tl.arange(0, W_P2)
        hh = tl.arange(0, BLOCK_HR)
        for j in range(0, REDUCE_ROWS):
            t = (t0 + j + zero).to(tl.int64)
            if t < T:
                slots = tl.load(slot_ptr + t * WORLD + rr, mask=rr < WORLD, other=-1)
                sent = slots >= 0
                src_rows = (rr * T_MAX + slots).to(tl.int64)
                for h0 in range(0, H, BLOCK_HR):
                    v = tl.load(comb_sym + src_rows[:, None] * H + h0 + hh[None, :], mask=sent[:, None], other=0.0,
                                cache_modifier=".cg")  # fmt: skip
                    tl.store(y_ptr + t * H + h0 + hh, tl.sum(v.to(tl.float32), axis=0).to(tl.bfloat16))
