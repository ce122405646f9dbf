"""FP8 e4m3 kernels of the MegaMoE layer: the four steps that depend on the precision.

A call with ``precision="fp8"`` runs ``moe_route_fp8``, ``moe_plan``, ``moe_dispatch_fp8``,
``moe_place``, ``moe_l1_swiglu_fp8``, ``moe_l2_fp8``, ``moe_combine``, ``moe_reduce`` (the others are
the bf16 path's, see ``kernels``). Quantization follows ``quant`` bit for bit: a block's scale
is ``max(amax, AMAX_FLOOR) / 448`` and its values ``e4m3(clamp(v / scale, -448, 448))`` with IEEE
division. Activations have one scale per token and 128 channels, weights one per 128 x 128 block,
stored K-major (``w1q [E, 2I, H]``, ``w2q [E, H, I]``) so that wgmma reads B K-contiguous, as fp8
wgmma requires.

* ``moe_route_fp8``     top-k as ``moe_route``; quantizes x into x_sym (e4m3) + x_scale.
* ``moe_dispatch_fp8``  as ``moe_dispatch``, pulling the e4m3 row (H bytes) and its H/128 scales.
* ``moe_l1_swiglu_fp8`` per K step of 128: ``acc += dot(a, b) * (a_scale * b_scale)`` for gate and
                        up (the scaled sum in float32 after every step, as DeepGEMM promotes it);
                        SwiGLU; h quantized per (pair, 128 columns) -> h (e4m3) + h_scale.
* ``moe_l2_fp8``        the same K loop over h, w2 -> y_pair bf16.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .config import FP8_BLOCK
from .kernels import (
    _expert_tile,
    _receive_routing,
    _route_topk,
    _tile_order,
    _token_rows,
    moe_peer_load_i32,
    moe_pull,
)
from .quant import AMAX_FLOOR, FP8_MAX

QBLOCK = tl.constexpr(FP8_BLOCK)
_FP8_MAX = tl.constexpr(FP8_MAX)
_AMAX_FLOOR = tl.constexpr(AMAX_FLOOR)


@triton.jit
def _quantize_rows(v):
    """(e4m3 values, float32 scale per row) of a float32 [rows, QBLOCK] block, as quant.quantize_rows."""
    scale = tl.math.div_rn(tl.maximum(tl.max(tl.abs(v), axis=1), _AMAX_FLOOR), _FP8_MAX)
    q = tl.minimum(tl.maximum(tl.math.div_rn(v, scale[:, None]), -_FP8_MAX), _FP8_MAX)
    return q.to(tl.float8e4nv), scale


@triton.jit
def _quantize_blocks(v, BLOCKS: tl.constexpr):
    """(e4m3 values, float32 scales [rows, BLOCKS]) of a float32 [rows, BLOCKS * QBLOCK] tile: each
    128-column block as :func:`_quantize_rows`, all blocks' loads and math in one step."""
    rows: tl.constexpr = v.shape[0]
    blocks = tl.reshape(v, [rows, BLOCKS, v.shape[1] // BLOCKS])
    scale = tl.math.div_rn(tl.maximum(tl.max(tl.abs(blocks), axis=2), _AMAX_FLOOR), _FP8_MAX)
    q = tl.minimum(tl.maximum(tl.math.div_rn(blocks, scale[:, :, None]), -_FP8_MAX), _FP8_MAX)
    return tl.reshape(q, [rows, v.shape[1]]).to(tl.float8e4nv), scale


@triton.jit
def _quantize_cols(x_ptr, x_sym, xs_sym, rows, mask_t, c0, H: tl.constexpr, COLS: tl.constexpr):
    """Columns [c0, c0 + COLS) of x's ``rows`` (bf16 [T, H]) quantized into x_sym (e4m3 [T, H]) and their
    scales into xs_sym (float32 [T, H / 128]), all blocks in one step (:func:`_quantize_blocks`) rather
    than a block at a time, where each block waits for its own load."""
    offs = rows[:, None] * H + c0 + tl.arange(0, COLS)[None, :]
    q, scale = _quantize_blocks(tl.load(x_ptr + offs, mask=mask_t[:, None], other=0.0).to(tl.float32), COLS // QBLOCK)
    tl.store(x_sym + offs, q, mask=mask_t[:, None])
    kb = c0 // QBLOCK + tl.arange(0, COLS // QBLOCK)
    tl.store(xs_sym + rows[:, None] * (H // QBLOCK) + kb[None, :], scale, mask=mask_t[:, None])


@triton.jit(do_not_specialize=["T"])
def moe_route_fp8(
    logits_ptr,
    x_ptr,
    x_sym,
    xs_sym,
    ids_sym,
    w_sym,
    T,
    E: tl.constexpr,
    E_P2: tl.constexpr,
    K: tl.constexpr,
    K_P2: tl.constexpr,
    H: tl.constexpr,
    BLOCK_T: tl.constexpr,
    H_CHUNK: tl.constexpr,
):
    """Program (token block, column chunk): top-k and softmax as moe_route (chunk 0); x (bf16) ->
    x_sym (e4m3 [T, H]) and xs_sym (float32 [T, H/128]) for its H_CHUNK columns."""
    if tl.program_id(1) == 0:
        _route_topk(logits_ptr, ids_sym, w_sym, T, E, E_P2, K, K_P2, BLOCK_T)
    rows, mask_t = _token_rows(T, BLOCK_T)
    _quantize_cols(x_ptr, x_sym, xs_sym, rows, mask_t, tl.program_id(1) * H_CHUNK, H, H_CHUNK)


@triton.jit(do_not_specialize=["me"])
def moe_dispatch_fp8(
    x_sym,
    xs_sym,
    ids_sym,
    w_sym,
    send_idx_sym,
    send_count_sym,
    recv_x,
    recv_xs,
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
    """Program (src, slot): as moe_dispatch, for an e4m3 row (H bytes) and its H/128 float32 scales."""
    src = tl.program_id(0)
    slot = tl.program_id(1)
    n = moe_peer_load_i32(send_count_sym + me, src)
    if slot == 0:
        tl.store(recv_n + src, n)
    if slot < n:
        t = moe_peer_load_i32(send_idx_sym + me * T_MAX + slot, src).to(tl.int64)
        row = (src * T_MAX + slot).to(tl.int64)
        if PULL_ROWS:  # world 1: the GEMM reads x_sym and x_scale where they are
            moe_pull(recv_x + row * H, x_sym + t * H, H, src)
            moe_pull(recv_xs + row * (H // QBLOCK), xs_sym + t * (H // QBLOCK), (H // QBLOCK) * 4, src)
        _receive_routing(ids_sym, w_sym, recv_ids, recv_w, counters_ptr, src, t, row, me, K, K_P2, E_LOC)


@triton.jit
def moe_l1_swiglu_fp8(
    recv_x,
    recv_xs,
    sorted_row,
    counters_ptr,
    w1q_ptr,
    w1s_ptr,
    h_ptr,
    hs_ptr,
    H: tl.constexpr,
    INTER: tl.constexpr,
    E_LOC: tl.constexpr,
    E_P2: tl.constexpr,
    BLOCK_M: tl.constexpr,
    M_TILES: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """h[p, n] = silu(g) * u with g, u = x_p @ w1[e] gate/up columns n (block-scaled e4m3 operands);
    then h quantized per (pair, 128 columns): this tile's QBLOCK columns are one scale block."""
    KB: tl.constexpr = H // QBLOCK
    pid_m, pid_n = _tile_order(M_TILES, INTER // QBLOCK, GROUP_M)
    expert, row0, row_end = _expert_tile(counters_ptr, pid_m, E_LOC, E_P2, BLOCK_M)
    if expert >= E_LOC:
        return
    offs_m = row0 + tl.arange(0, BLOCK_M)
    mask_m = offs_m < row_end
    rows = tl.load(sorted_row + offs_m, mask=mask_m, other=0).to(tl.int64)
    offs_n = pid_n * QBLOCK + tl.arange(0, QBLOCK)
    offs_k = tl.arange(0, QBLOCK)
    e = expert.to(tl.int64)
    a_ptrs = recv_x + rows[:, None] * H + offs_k[None, :]
    as_ptrs = recv_xs + rows * KB
    # B tile [K, N] read from K-major w1q [E, 2I, H]: K contiguous
    g_ptrs = w1q_ptr + e * (2 * INTER * H) + offs_n[None, :] * H + offs_k[:, None]
    gs_ptr = w1s_ptr + e * (2 * INTER // QBLOCK * KB) + pid_n * KB  # gate block row; up is INTER/128 below
    acc_g = tl.zeros([BLOCK_M, QBLOCK], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_M, QBLOCK], dtype=tl.float32)
    for kb in range(0, KB):
        a = tl.load(a_ptrs, mask=mask_m[:, None], other=0.0)
        a_s = tl.load(as_ptrs + kb, mask=mask_m, other=0.0)[:, None]
        g = tl.dot(a, tl.load(g_ptrs))
        u = tl.dot(a, tl.load(g_ptrs + INTER * H))
        acc_g += g * (a_s * tl.load(gs_ptr + kb))
        acc_u += u * (a_s * tl.load(gs_ptr + (INTER // QBLOCK) * KB + kb))
        a_ptrs += QBLOCK
        g_ptrs += QBLOCK
    q, scale = _quantize_rows(acc_g * tl.sigmoid(acc_g) * acc_u)
    offs_p = offs_m.to(tl.int64)
    tl.store(h_ptr + offs_p[:, None] * INTER + offs_n[None, :], q, mask=mask_m[:, None])
    tl.store(hs_ptr + offs_p * (INTER // QBLOCK) + pid_n, scale, mask=mask_m)


@triton.jit
def moe_l2_fp8(
    h_ptr,
    hs_ptr,
    counters_ptr,
    w2q_ptr,
    w2s_ptr,
    y_ptr,
    H: tl.constexpr,
    INTER: tl.constexpr,
    E_LOC: tl.constexpr,
    E_P2: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    M_TILES: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """y_pair[p] = h[p] @ w2[e] for pairs p of expert e (block-scaled e4m3 operands, bf16 out)."""
    KB: tl.constexpr = INTER // QBLOCK
    pid_m, pid_n = _tile_order(M_TILES, H // BLOCK_N, GROUP_M)
    expert, row0, row_end = _expert_tile(counters_ptr, pid_m, E_LOC, E_P2, BLOCK_M)
    if expert >= E_LOC:
        return
    offs_m = row0 + tl.arange(0, BLOCK_M)
    mask_m = offs_m < row_end
    offs_p = offs_m.to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, QBLOCK)
    e = expert.to(tl.int64)
    a_ptrs = h_ptr + offs_p[:, None] * INTER + offs_k[None, :]
    as_ptrs = hs_ptr + offs_p * KB
    b_ptrs = w2q_ptr + e * (H * INTER) + offs_n[None, :] * INTER + offs_k[:, None]  # K-major w2q [E, H, I]
    bs_ptrs = w2s_ptr + e * (H // QBLOCK * KB) + (offs_n // QBLOCK) * KB  # a tile may span scale blocks
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for kb in range(0, KB):
        a = tl.load(a_ptrs, mask=mask_m[:, None], other=0.0)
        a_s = tl.load(as_ptrs + kb, mask=mask_m, other=0.0)
        acc += tl.dot(a, tl.load(b_ptrs)) * (a_s[:, None] * tl.load(bs_ptrs + kb)[None, :])
        a_ptrs += QBLOCK
        b_ptrs += QBLOCK
    tl.store(y_ptr + offs_p[:, None] * H + offs_n[None, :], acc.to(tl.bfloat16), mask=mask_m[:, None])
