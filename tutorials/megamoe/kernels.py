"""Triton kernels of the MegaMoE layer (one call = the launches below, in this order).

1. ``moe_route``     per token block: top-k + softmax of the logits; copies x, ids, weights into
                     this rank's symmetric buffers.
2. ``moe_plan``      per destination rank r: deduplicated send list (token ids in slot order) and
                     its length; the slot of every token at r. Program 0 zeroes the expert counters.
   (world > 1: moe_barrier_kernel, so every rank's symmetric send data is complete.)
3. ``moe_dispatch``  per (source rank, slot): pulls the token row and its routing from the source
                     (raw CUDA through nvshmem_ptr) and counts pairs per local expert (atomics).
4. ``moe_place``     per received row: position of each of its local pairs, grouped by expert.
5. ``moe_l1_swiglu`` grouped GEMM over pairs per expert, gate and up tiles together, SwiGLU
                     epilogue -> h [pairs, INTER].
6. ``moe_l2``        grouped GEMM h @ w2[e] -> y_pair [pairs, H].
7. ``moe_combine``   per received row: weighted sum of its local pairs, pushed into the source
                     rank's symmetric ``comb[me, slot]`` (raw CUDA through nvshmem_ptr).
   (world > 1: moe_barrier_kernel, so every push has landed.)
8. ``moe_reduce``    per token: sum of its partials from the ranks it went to -> y.

``kernels_fp8`` has the fp8 variants of 1, 3, 5 and 6; the other kernels serve both precisions.

The order within an expert's pair list depends on atomics, but every pair's row is computed
independently and each token sums its partials in a fixed order, so outputs are deterministic.
"""

from __future__ import annotations

import triton
import triton.language as tl

from triton_raw_ext import dialect

DEVICE_FILE = "moe-device.cu"


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def moe_peer_ptr(sym, pe): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def moe_peer_load_i32(sym, pe): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def moe_pull(dst, src_sym, nbytes, pe): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def moe_push(dst_sym, src, nbytes, pe): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def moe_barrier(arrived_sym, epoch_ptr, me, world, timeout_ms): ...


@triton.jit
def _route_topk(
    logits_ptr,
    ids_sym,
    w_sym,
    T,
    E: tl.constexpr,
    E_P2: tl.constexpr,
    K: tl.constexpr,
    K_P2: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    """Top-k ids and weights of this program's BLOCK_T tokens into ids_sym/w_sym."""
    rows, mask_t = _token_rows(T, BLOCK_T)
    _topk_rows(logits_ptr, ids_sym, w_sym, rows, mask_t, E, E_P2, K, K_P2, BLOCK_T)


@triton.jit
def _topk_rows(
    logits_ptr,
    ids_sym,
    w_sym,
    rows,
    mask_t,
    E: tl.constexpr,
    E_P2: tl.constexpr,
    K: tl.constexpr,
    K_P2: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    """Top-k ids (ties -> lower id) and softmax weights of the BLOCK_T tokens ``rows`` (int64; ``mask_t``:
    which are tokens) into ids_sym/w_sym; returns the ids [BLOCK_T, K_P2]."""
    e = tl.arange(0, E_P2)
    kk = tl.arange(0, K_P2)
    lg = tl.load(
        logits_ptr + rows[:, None] * E + e[None, :],
        mask=mask_t[:, None] & (e[None, :] < E),
        other=float("-inf"),
    ).to(tl.float32)
    ids = tl.zeros([BLOCK_T, K_P2], dtype=tl.int32)
    vals = tl.full([BLOCK_T, K_P2], float("-inf"), dtype=tl.float32)
    for k in tl.static_range(K):
        best = tl.max(lg, axis=1)
        idx = tl.min(tl.where(lg == best[:, None], e[None, :], E_P2), axis=1)
        ids = tl.where(kk[None, :] == k, idx[:, None], ids)
        vals = tl.where(kk[None, :] == k, best[:, None], vals)
        lg = tl.where(e[None, :] == idx[:, None], float("-inf"), lg)
    p = tl.exp(vals - tl.max(vals, axis=1)[:, None])
    p = tl.where(kk[None, :] < K, p, 0.0)
    p = p / tl.sum(p, axis=1)[:, None]
    mk = mask_t[:, None] & (kk[None, :] < K)
    tl.store(ids_sym + rows[:, None] * K + kk[None, :], ids, mask=mk)
    tl.store(w_sym + rows[:, None] * K + kk[None, :], p, mask=mk)
    return ids


@triton.jit
def _token_rows(T, BLOCK_T: tl.constexpr):
    """(int64 token rows, in-range mask) of the BLOCK_T tokens of route program (program_id(0), *)."""
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    return offs_t.to(tl.int64), offs_t < T


@triton.jit(do_not_specialize=["T"])
def moe_route(
    logits_ptr,
    x_ptr,
    x_sym,
    ids_sym,
    w_sym,
    T,
    E: tl.constexpr,
    E_P2: tl.constexpr,
    K: tl.constexpr,
    K_P2: tl.constexpr,
    H: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    H_CHUNK: tl.constexpr,
    COPY_X: tl.constexpr,
):
    """Program (token block, column chunk): chunk 0 does top-k (ties -> lower id) and the softmax over
    the selected logits; with COPY_X every program copies its H_CHUNK columns of x to x_sym (world 1
    needs no copy: the GEMM reads x itself, and the grid has one chunk)."""
    if tl.program_id(1) == 0:
        _route_topk(logits_ptr, ids_sym, w_sym, T, E, E_P2, K, K_P2, BLOCK_T)
    if COPY_X:
        rows, mask_t = _token_rows(T, BLOCK_T)
        cols = tl.program_id(1) * H_CHUNK + tl.arange(0, BLOCK_H)
        for h0 in range(0, H_CHUNK, BLOCK_H):
            v = tl.load(x_ptr + rows[:, None] * H + h0 + cols[None, :], mask=mask_t[:, None])
            tl.store(x_sym + rows[:, None] * H + h0 + cols[None, :], v, mask=mask_t[:, None])


@triton.jit(do_not_specialize=["T", "W"])
def moe_plan(
    ids_sym,
    slot_ptr,
    send_idx_sym,
    send_count_sym,
    counters_ptr,
    T,
    W,
    T_MAX: tl.constexpr,
    K: tl.constexpr,
    K_P2: tl.constexpr,
    E_LOC: tl.constexpr,
    E2_P2: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    """Program r: send list to rank r (dedup per token) and slots; program 0 zeroes the counters.

    ``send_idx_sym`` rows have stride T_MAX; ``slot_ptr`` is [T_MAX, W].
    """
    r = tl.program_id(0)
    if r == 0:
        c = tl.arange(0, E2_P2)
        tl.store(counters_ptr + c, tl.zeros([E2_P2], dtype=tl.int32), mask=c < 2 * E_LOC)
    kk = tl.arange(0, K_P2)
    base = tl.zeros([], dtype=tl.int32)
    for t0 in range(0, T_MAX, BLOCK_T):  # static bound; tokens past T are masked
        offs_t = t0 + tl.arange(0, BLOCK_T)
        mask_t = offs_t < T
        valid = mask_t[:, None] & (kk[None, :] < K)
        ids = tl.load(ids_sym + offs_t[:, None] * K + kk[None, :], mask=valid, other=0)
        hit = valid & (ids >= r * E_LOC) & (ids < (r + 1) * E_LOC)
        sent = tl.max(hit.to(tl.int32), axis=1)
        slot = base + tl.cumsum(sent, axis=0) - 1
        tl.store(slot_ptr + offs_t * W + r, tl.where(sent > 0, slot, -1), mask=mask_t)
        tl.store(send_idx_sym + r * T_MAX + slot, offs_t, mask=mask_t & (sent > 0))
        base += tl.sum(sent, axis=0)
    tl.store(send_count_sym + r, base)


@triton.jit(do_not_specialize=["me"])
def moe_dispatch(
    x_sym,
    ids_sym,
    w_sym,
    send_idx_sym,
    send_count_sym,
    recv_x,
    recv_ids,
    recv_w,
    recv_n,
    counters_ptr,
    me,
    T_MAX: tl.constexpr,
    H: tl.constexpr,
    K: tl.constexpr,
    K_P2: tl.constexpr,
    E_LOC: tl.constexpr,
    PULL_ROWS: tl.constexpr,
):
    """Program (src, slot): pull token row ``slot`` of src's send list to me; count local pairs.

    ``send_idx_sym`` rows have stride T_MAX. Rows past src's count are left untouched.
    """
    src = tl.program_id(0)
    slot = tl.program_id(1)
    n = moe_peer_load_i32(send_count_sym + me, src)
    if slot == 0:
        tl.store(recv_n + src, n)
    if slot < n:
        t = moe_peer_load_i32(send_idx_sym + me * T_MAX + slot, src).to(tl.int64)
        row = (src * T_MAX + slot).to(tl.int64)
        if PULL_ROWS:  # world 1: the GEMM reads the token rows where they are
            moe_pull(recv_x + row * H, x_sym + t * H, H * 2, src)
        _receive_routing(ids_sym, w_sym, recv_ids, recv_w, counters_ptr, src, t, row, me, K, K_P2, E_LOC)


@triton.jit
def _receive_routing(
    ids_sym,
    w_sym,
    recv_ids,
    recv_w,
    counters_ptr,
    src,
    t,
    row,
    me,
    K: tl.constexpr,
    K_P2: tl.constexpr,
    E_LOC: tl.constexpr,
):
    """Dispatch, after the token row: copy token t's ids and weights from src into received ``row``;
    count its pairs per local expert."""
    kk = tl.arange(0, K_P2)
    mk = kk < K
    peer_ids = moe_peer_ptr(ids_sym, src).to(tl.pointer_type(tl.int32))
    peer_w = moe_peer_ptr(w_sym, src).to(tl.pointer_type(tl.float32))
    ids = tl.load(peer_ids + t * K + kk, mask=mk, other=-1, cache_modifier=".cg")
    wts = tl.load(peer_w + t * K + kk, mask=mk, other=0.0, cache_modifier=".cg")
    tl.store(recv_ids + row * K + kk, ids, mask=mk)
    tl.store(recv_w + row * K + kk, wts, mask=mk)
    e = ids - me * E_LOC
    owned = mk & (e >= 0) & (e < E_LOC)
    tl.atomic_add(counters_ptr + e, tl.full([K_P2], 1, tl.int32), mask=owned, sem="relaxed")


@triton.jit(do_not_specialize=["me"])
def moe_place(
    recv_ids,
    recv_n,
    counters_ptr,
    sorted_row,
    inv_pos,
    me,
    T_MAX: tl.constexpr,
    K: tl.constexpr,
    K_P2: tl.constexpr,
    E_LOC: tl.constexpr,
    E_P2: tl.constexpr,
):
    """Program (src, slot): pair positions of a received row, grouped by local expert."""
    src = tl.program_id(0)
    slot = tl.program_id(1)
    n = tl.load(recv_n + src)
    if slot < n:
        row = src * T_MAX + slot
        kk = tl.arange(0, K_P2)
        mk = kk < K
        e = tl.load(recv_ids + row * K + kk, mask=mk, other=-1) - me * E_LOC
        owned = mk & (e >= 0) & (e < E_LOC)
        ee = tl.arange(0, E_P2)
        counts = tl.load(counters_ptr + ee, mask=ee < E_LOC, other=0)
        # start of expert e = sum of counts of experts below e
        start = tl.sum(tl.where(ee[None, :] < e[:, None], counts[None, :], 0), axis=1)
        rank_in_e = tl.atomic_add(
            counters_ptr + E_LOC + e, tl.full([K_P2], 1, tl.int32), mask=owned, sem="relaxed"
        )
        pos = start + rank_in_e
        tl.store(sorted_row + pos, tl.full([K_P2], 0, tl.int32) + row, mask=owned)
        tl.store(inv_pos + row * K + kk, tl.where(owned, pos, -1), mask=mk)


@triton.jit
def _expert_tile(counters_ptr, pid_m, E_LOC: tl.constexpr, E_P2: tl.constexpr, BLOCK_M: tl.constexpr):
    """(expert, first pair row, end of the expert's rows) of M tile ``pid_m``; expert == E_LOC: none."""
    ee = tl.arange(0, E_P2)
    counts = tl.load(counters_ptr + ee, mask=ee < E_LOC, other=0)
    tiles = (counts + BLOCK_M - 1) // BLOCK_M
    tile_end = tl.cumsum(tiles, axis=0)
    expert = tl.sum((tile_end <= pid_m).to(tl.int32), axis=0)
    this = ee == expert
    row_start = tl.sum(tl.where(this, tl.cumsum(counts, axis=0) - counts, 0), axis=0)
    tile_start = tl.sum(tl.where(this, tile_end - tiles, 0), axis=0)
    row_end = row_start + tl.sum(tl.where(this, counts, 0), axis=0)
    return expert, row_start + (pid_m - tile_start) * BLOCK_M, row_end


@triton.jit
def _tile_order(M_TILES: tl.constexpr, N_TILES: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of this program in a 1-D grid (:func:`_tile_of` of its program id)."""
    return _tile_of(tl.program_id(0), M_TILES, N_TILES, GROUP_M)


@triton.jit
def _tile_of(pid, M_TILES, N_TILES: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of tile ``pid`` of a 1-D order: groups of GROUP_M M tiles, M fastest inside a group
    (``M_TILES``: the M tiles of the order, a constexpr bound or a count known only on the device).

    Tiles that run together then share a few experts' A rows and weight columns, so both stay in
    L2 (M fastest over all M tiles would stream every expert's A rows once per N tile).
    """
    per_group = GROUP_M * N_TILES
    first_m = (pid // per_group) * GROUP_M
    group_size = tl.minimum(M_TILES - first_m, GROUP_M)
    return first_m + (pid % per_group) % group_size, (pid % per_group) // group_size


@triton.jit
def _chunked_tile_of(pid, M_TILES, CHUNK_TILES: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of tile ``pid`` of an order that takes the N tiles CHUNK_TILES at a time: every M tile's
    N tiles of a chunk in :func:`_tile_of`'s order, then the next chunk's (work that needs all the M tiles
    of some columns can start once their chunk is done)."""
    per_chunk = M_TILES * CHUNK_TILES
    pid_m, pid_n = _tile_of(pid % per_chunk, M_TILES, CHUNK_TILES, GROUP_M)
    return pid_m, pid_n + pid // per_chunk * CHUNK_TILES


@triton.jit
def moe_l1_swiglu(
    recv_x,
    sorted_row,
    counters_ptr,
    w1_ptr,
    h_ptr,
    H: tl.constexpr,
    INTER: tl.constexpr,
    E_LOC: tl.constexpr,
    E_P2: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    M_TILES: tl.constexpr,
    GROUP_M: tl.constexpr,
    TMA: tl.constexpr,
):
    """h[p, n] = silu(x_p @ w1[e][:, n]) * (x_p @ w1[e][:, INTER + n]) for pairs p of expert e.

    TMA: weight tiles through a device-side tensor descriptor (needs ``triton.set_allocator``); the
    A rows are gathered through the pair list either way."""
    pid_m, pid_n = _tile_order(M_TILES, INTER // BLOCK_N, GROUP_M)
    w_desc = _l1_weight_desc(w1_ptr, H, INTER, E_LOC, BLOCK_N, BLOCK_K, TMA)
    _l1_tile(recv_x, sorted_row, counters_ptr, w1_ptr, w_desc, h_ptr, pid_m, pid_n,
             H, INTER, E_LOC, E_P2, BLOCK_M, BLOCK_N, BLOCK_K, TMA)  # fmt: skip


@triton.jit
def _l1_weight_desc(w1_ptr, H: tl.constexpr, INTER: tl.constexpr, E_LOC: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, TMA: tl.constexpr):  # fmt: skip
    """TMA: w1 as [E_LOC * H, 2 * INTER] (expert e's K rows start at e * H); else w1_ptr (unused)."""
    if TMA:
        return tl.make_tensor_descriptor(
            w1_ptr, shape=[E_LOC * H, 2 * INTER], strides=[2 * INTER, 1], block_shape=[BLOCK_K, BLOCK_N]
        )
    else:
        return w1_ptr


@triton.jit
def _l1_tile(
    recv_x, sorted_row, counters_ptr, w1_ptr, w_desc, h_ptr, pid_m, pid_n,
    H: tl.constexpr, INTER: tl.constexpr, E_LOC: tl.constexpr, E_P2: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TMA: tl.constexpr,
):  # fmt: skip
    """L1 tile (pid_m, pid_n) into h; nothing when M tile pid_m holds no pairs. Returns whether it did."""
    expert, row0, row_end = _expert_tile(counters_ptr, pid_m, E_LOC, E_P2, BLOCK_M)
    if expert < E_LOC:
        offs_m = row0 + tl.arange(0, BLOCK_M)
        mask_m = offs_m < row_end
        rows = tl.load(sorted_row + offs_m, mask=mask_m, other=0).to(tl.int64)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = recv_x + rows[:, None] * H + offs_k[None, :]
        g_ptrs = w1_ptr + expert.to(tl.int64) * (H * 2 * INTER) + offs_k[:, None] * (2 * INTER) + offs_n[None, :]
        acc_g = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k in range(0, H, BLOCK_K):
            a = tl.load(a_ptrs, mask=mask_m[:, None], other=0.0)
            if TMA:
                gate = w_desc.load([expert * H + k, pid_n * BLOCK_N])
                up = w_desc.load([expert * H + k, INTER + pid_n * BLOCK_N])
            else:
                gate = tl.load(g_ptrs)
                up = tl.load(g_ptrs + INTER)
                g_ptrs += BLOCK_K * 2 * INTER
            acc_g = tl.dot(a, gate, acc_g)
            acc_u = tl.dot(a, up, acc_u)
            a_ptrs += BLOCK_K
        h = acc_g * tl.sigmoid(acc_g) * acc_u
        out = h_ptr + offs_m.to(tl.int64)[:, None] * INTER + offs_n[None, :]
        tl.store(out, h.to(tl.bfloat16), mask=mask_m[:, None])
    return expert < E_LOC


@triton.jit
def moe_l2(
    h_ptr,
    counters_ptr,
    w2_ptr,
    y_ptr,
    H: tl.constexpr,
    INTER: tl.constexpr,
    E_LOC: tl.constexpr,
    E_P2: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    M_TILES: tl.constexpr,
    GROUP_M: tl.constexpr,
    TMA: tl.constexpr,
    PAIRS: tl.constexpr,
):
    """y_pair[p] = h[p] @ w2[e] for pairs p of expert e (h has PAIRS rows).

    TMA: h and weight tiles through device-side tensor descriptors (needs ``triton.set_allocator``).
    A tile's rows past its expert's then belong to the next expert (or lie past PAIRS and read as
    zeros); their outputs are masked at the store, as with the pointer loads."""
    pid_m, pid_n = _tile_order(M_TILES, H // BLOCK_N, GROUP_M)
    a_desc, b_desc = _l2_descs(h_ptr, w2_ptr, H, INTER, E_LOC, BLOCK_M, BLOCK_N, BLOCK_K, TMA, PAIRS)
    expert, row0, row_end = _expert_tile(counters_ptr, pid_m, E_LOC, E_P2, BLOCK_M)
    if expert < E_LOC:
        _l2_tile(h_ptr, w2_ptr, a_desc, b_desc, y_ptr, expert, row0, row_end, pid_n,
                 H, INTER, BLOCK_M, BLOCK_N, BLOCK_K, TMA, False)  # fmt: skip


@triton.jit
def _l2_descs(h_ptr, w2_ptr, H: tl.constexpr, INTER: tl.constexpr, E_LOC: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TMA: tl.constexpr, PAIRS: tl.constexpr):  # fmt: skip
    """TMA: descriptors of h [PAIRS, INTER] and of w2 as [E_LOC * INTER, H] (expert e's K rows start at
    e * INTER); else the pointers themselves (unused)."""
    if TMA:
        a_desc = tl.make_tensor_descriptor(
            h_ptr, shape=[PAIRS, INTER], strides=[INTER, 1], block_shape=[BLOCK_M, BLOCK_K]
        )
        b_desc = tl.make_tensor_descriptor(
            w2_ptr, shape=[E_LOC * INTER, H], strides=[H, 1], block_shape=[BLOCK_K, BLOCK_N]
        )
        return a_desc, b_desc
    else:
        return h_ptr, w2_ptr


@triton.jit
def _l2_tile(
    h_ptr, w2_ptr, a_desc, b_desc, y_ptr, expert, row0, row_end, pid_n,
    H: tl.constexpr, INTER: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    TMA: tl.constexpr, H_FROM_L2: tl.constexpr,
):  # fmt: skip
    """L2 tile of expert ``expert``: its rows row0.. (stores masked at row_end), columns pid_n.

    H_FROM_L2: load h past the L1 cache (``.cg``); h was written by other programs of the same kernel."""
    offs_m = row0 + tl.arange(0, BLOCK_M)
    mask_m = offs_m < row_end
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = h_ptr + offs_m.to(tl.int64)[:, None] * INTER + offs_k[None, :]
    b_ptrs = w2_ptr + expert.to(tl.int64) * (INTER * H) + offs_k[:, None] * H + offs_n[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, INTER, BLOCK_K):
        if TMA:
            a = a_desc.load([row0, k])
            b = b_desc.load([expert * INTER + k, pid_n * BLOCK_N])
        else:
            if H_FROM_L2:
                a = tl.load(a_ptrs, mask=mask_m[:, None], other=0.0, cache_modifier=".cg")
            else:
                a = tl.load(a_ptrs, mask=mask_m[:, None], other=0.0)
            b = tl.load(b_ptrs)
            a_ptrs += BLOCK_K
            b_ptrs += BLOCK_K * H
        acc = tl.dot(a, b, acc)
    out = y_ptr + offs_m.to(tl.int64)[:, None] * H + offs_n[None, :]
    tl.store(out, acc.to(tl.bfloat16), mask=mask_m[:, None])


@triton.jit
def moe_gemms(
    recv_x,
    sorted_row,
    counters_ptr,
    w1_ptr,
    h_ptr,
    w2_ptr,
    y_ptr,
    sched_ptr,
    H: tl.constexpr,
    INTER: tl.constexpr,
    E_LOC: tl.constexpr,
    E_P2: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N1: tl.constexpr,
    BLOCK_N2: tl.constexpr,
    BLOCK_K: tl.constexpr,
    M_TILES: tl.constexpr,
    GROUP_M: tl.constexpr,
    TMA1: tl.constexpr,
    TMA2: tl.constexpr,
    PAIRS: tl.constexpr,
    SCHED_P2: tl.constexpr,
):
    """L1 and L2 in one persistent launch: every program takes work items from one counter until none
    is left. Items 0.. are the L1 tiles (moe_l1_swiglu's order), then the L2 tiles (moe_l2's).

    ``sched_ptr`` (int32, zero before the launch): [0] the next item, [1 + m] the L1 tiles of M tile m
    done, [1 + M_TILES] the programs finished; the last program to finish zeroes them again, so
    launches may follow each other (and CUDA-graph replays) with no other reset. SCHED_P2: a power of
    two >= M_TILES + 2.

    An L2 tile waits until its M tile's INTER // BLOCK_N1 L1 tiles are done. It cannot wait for ever:
    every L1 item was handed out before any L2 item, to a program that was running then, and L1 tiles
    wait for nothing. So the tail of L1 overlaps the start of L2 and no program count is required.
    """
    N1: tl.constexpr = INTER // BLOCK_N1
    L1_ITEMS: tl.constexpr = M_TILES * N1
    ITEMS: tl.constexpr = L1_ITEMS + M_TILES * (H // BLOCK_N2)
    w1_desc = _l1_weight_desc(w1_ptr, H, INTER, E_LOC, BLOCK_N1, BLOCK_K, TMA1)
    h_desc, w2_desc = _l2_descs(h_ptr, w2_ptr, H, INTER, E_LOC, BLOCK_M, BLOCK_N2, BLOCK_K, TMA2, PAIRS)
    done_l1 = sched_ptr + 1
    item = tl.atomic_add(sched_ptr, 1, sem="relaxed")
    while item < ITEMS:
        if item < L1_ITEMS:
            pid_m, pid_n = _tile_of(item, M_TILES, N1, GROUP_M)
            did = _l1_tile(recv_x, sorted_row, counters_ptr, w1_ptr, w1_desc, h_ptr, pid_m, pid_n,
                           H, INTER, E_LOC, E_P2, BLOCK_M, BLOCK_N1, BLOCK_K, TMA1)  # fmt: skip
            if did:
                tl.debug_barrier()  # every thread's h stores precede the release below
                tl.atomic_add(done_l1 + pid_m, 1, sem="release", scope="gpu")
        else:
            pid_m, pid_n = _tile_of(item - L1_ITEMS, M_TILES, H // BLOCK_N2, GROUP_M)
            expert, row0, row_end = _expert_tile(counters_ptr, pid_m, E_LOC, E_P2, BLOCK_M)
            if expert < E_LOC:
                while tl.atomic_add(done_l1 + pid_m, 0, sem="acquire", scope="gpu") < N1:
                    pass
                tl.debug_barrier()  # every thread's h loads follow the acquire above
                _l2_tile(h_ptr, w2_ptr, h_desc, w2_desc, y_ptr, expert, row0, row_end, pid_n,
                         H, INTER, BLOCK_M, BLOCK_N2, BLOCK_K, TMA2, True)  # fmt: skip
        item = tl.atomic_add(sched_ptr, 1, sem="relaxed")
    if tl.atomic_add(sched_ptr + 1 + M_TILES, 1, sem="acq_rel", scope="gpu") == tl.num_programs(0) - 1:
        m = tl.arange(0, SCHED_P2)  # every other program has left the loop
        tl.store(sched_ptr + m, tl.zeros_like(m), mask=m < M_TILES + 2)


@triton.jit(do_not_specialize=["me"])
def moe_combine(
    recv_w,
    recv_n,
    inv_pos,
    y_pair,
    staging,
    comb_sym,
    me,
    T_MAX: tl.constexpr,
    H: tl.constexpr,
    K: tl.constexpr,
    K_P2: tl.constexpr,
    BLOCK_H: tl.constexpr,
    H_CHUNK: tl.constexpr,
    PUSH: tl.constexpr,
):
    """Program (src, slot, column chunk): weighted sum of the row's local pairs over H_CHUNK columns,
    pushed to the same columns of src's comb[me, slot]."""
    src = tl.program_id(0)
    slot = tl.program_id(1)
    n = tl.load(recv_n + src)
    if slot < n:
        row = (src * T_MAX + slot).to(tl.int64)
        kk = tl.arange(0, K_P2)
        mk = kk < K
        pos = tl.load(inv_pos + row * K + kk, mask=mk, other=-1)
        owned = pos >= 0
        wts = tl.load(recv_w + row * K + kk, mask=mk, other=0.0)
        first = tl.program_id(2) * H_CHUNK
        cols = first + tl.arange(0, BLOCK_H)
        for h0 in range(0, H_CHUNK, BLOCK_H):
            v = tl.load(
                y_pair + pos.to(tl.int64)[:, None] * H + h0 + cols[None, :], mask=owned[:, None], other=0.0
            )
            acc = tl.sum(v.to(tl.float32) * wts[:, None], axis=0)
            tl.store(staging + row * H + h0 + cols, acc.to(tl.bfloat16))
        if PUSH:  # world 1 binds ``staging`` to y (received row == token) and needs no reduce
            dst = comb_sym + (me * T_MAX + slot).to(tl.int64) * H + first
            moe_push(dst, staging + row * H + first, H_CHUNK * 2, src)


@triton.jit(do_not_specialize=["W"])
def moe_reduce(
    comb_sym,
    slot_ptr,
    y_ptr,
    W,
    T_MAX: tl.constexpr,
    H: tl.constexpr,
    W_P2: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    """y[t] = sum over ranks r that t went to of comb[r, slot[t, r]] (float32 sum, bf16 out)."""
    t = tl.program_id(0).to(tl.int64)
    rr = tl.arange(0, W_P2)
    slots = tl.load(slot_ptr + t * W + rr, mask=rr < W, other=-1)
    sent = slots >= 0
    src_rows = (rr * T_MAX + slots).to(tl.int64)
    hh = tl.arange(0, BLOCK_H)
    for h0 in range(0, H, BLOCK_H):
        v = tl.load(comb_sym + src_rows[:, None] * H + h0 + hh[None, :], mask=sent[:, None], other=0.0)
        tl.store(y_ptr + t * H + h0 + hh, tl.sum(v.to(tl.float32), axis=0).to(tl.bfloat16))


@triton.jit(do_not_specialize=["me", "W", "wait_ms"])
def moe_barrier_kernel(arrived_sym, epoch_ptr, me, W, wait_ms):
    """One program: the barrier of every PE of the layer (raw ``moe_barrier``: see moe-device.cu), each
    wait for a peer bounded by ``wait_ms`` milliseconds."""
    moe_barrier(arrived_sym, epoch_ptr, me, W, wait_ms)
