"""Torch GEMM baselines of one MoE layer call on one GPU: the ceilings its expert GEMMs are measured against.

Contract: each function returns a callable that runs, on the GPU, the expert GEMMs of one call over the
pairs of routing ``ids`` and nothing else (no routing, no token exchange, no combine), so its time
bounds what the layer's GEMMs can reach:

* :func:`grouped_gemms`: torch's grouped GEMMs on the pairs already sorted by expert, L1, SwiGLU, L2:
  ``torch._grouped_mm`` (bf16), or ``torch._scaled_grouped_mm`` on e4m3 with one float32 scale per
  row of A and per column of B (fp8: coarser than the layer's 128 blocks, so no per-block promotion,
  and fast accumulation), h quantized per row between the two;
* :func:`dense_gemms`: the same FLOPs as two dense GEMMs with one weight matrix each ([pairs, H] x
  [H, 2I], [pairs, I] x [I, H]): ``torch.matmul`` (bf16) or ``torch._scaled_mm`` with row-wise scales and
  fast accumulation (fp8). cuBLAS on this is the dense ceiling a grouped layer is compared with.
* :func:`dense_block_scaled_gemms` (fp8): the same two dense GEMMs with the layer's numerics, e4m3 with a
  scale per row and 128 columns of A and per 128 x 128 block of the weights, each K block's product
  promoted into float32 sums (cuBLAS's block-scaled ``torch._scaled_mm``, :func:`block_scaled_mm`): the
  dense ceiling of the same arithmetic.

Inputs are bf16 (tokens ``x`` [T, H], all experts' ``w1`` [E, H, 2I] and ``w2`` [E, I, H]); fp8 operands
are quantized once, outside the timed callable (h inside it: the layer quantizes h too).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .quant import FP8, FP8_MAX, quantize_blocks, quantize_rows
from .reference import swiglu


def rowwise_fp8(v: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 values, float32 scales) with one scale per slice along ``dim`` reduced away."""
    scale = v.float().abs().amax(dim=dim, keepdim=True).clamp_min(1e-12) / FP8_MAX
    return (v.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


def _sorted_pairs(x: torch.Tensor, ids: torch.Tensor, experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(token rows of every (token, expert) pair, grouped by expert; int32 end offset of each expert)."""
    order = torch.argsort(ids.flatten().long(), stable=True)
    rows = x[order // ids.shape[1]].contiguous()
    ends = torch.cumsum(torch.bincount(ids.flatten().long(), minlength=experts), 0).to(torch.int32)
    return rows, ends


def column_major(w: torch.Tensor) -> torch.Tensor:
    """``w`` [..., K, N] with the same values, stored column-major (what the scaled GEMMs take for B)."""
    return w.transpose(-1, -2).contiguous().transpose(-1, -2)


def grouped_gemms(
    x: torch.Tensor, ids: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, precision: str
) -> Callable[[], torch.Tensor]:
    """Both expert GEMMs of a call as torch grouped GEMMs on expert-sorted pairs (module docstring)."""
    a, ends = _sorted_pairs(x, ids, w1.shape[0])
    if precision == "bf16":
        w1c, w2c = w1.contiguous(), w2.contiguous()
        return lambda: torch._grouped_mm(swiglu(torch._grouped_mm(a, w1c, offs=ends)), w2c, offs=ends)
    aq, a_scale = rowwise_fp8(a, 1)
    w1q, w1_scale = rowwise_fp8(w1, 1)  # one scale per output column of each expert
    w2q, w2_scale = rowwise_fp8(w2, 1)
    w1q, w2q = column_major(w1q), column_major(w2q)
    a_scale, w1_scale, w2_scale = a_scale.flatten(), w1_scale.flatten(1), w2_scale.flatten(1)

    def run() -> torch.Tensor:
        h = swiglu(torch._scaled_grouped_mm(aq, w1q, a_scale, w1_scale, offs=ends, out_dtype=torch.bfloat16,
                                            use_fast_accum=True))  # fmt: skip
        hq, h_scale = rowwise_fp8(h, 1)
        return torch._scaled_grouped_mm(hq, w2q, h_scale.flatten(), w2_scale, offs=ends, out_dtype=torch.bfloat16,
                                        use_fast_accum=True)  # fmt: skip

    return run


def dense_gemms(
    pairs: int, hidden: int, intermediate: int, precision: str, device: torch.device
) -> Callable[[], object]:
    """The FLOPs of both expert GEMMs of ``pairs`` pairs as two dense GEMMs (module docstring)."""
    g = torch.Generator(device=device).manual_seed(0)
    a1 = torch.randn(pairs, hidden, generator=g, device=device).to(torch.bfloat16)
    a2 = torch.randn(pairs, intermediate, generator=g, device=device).to(torch.bfloat16)
    b1 = torch.randn(hidden, 2 * intermediate, generator=g, device=device).to(torch.bfloat16)
    b2 = torch.randn(intermediate, hidden, generator=g, device=device).to(torch.bfloat16)
    if precision == "bf16":
        return lambda: (a1 @ b1, a2 @ b2)
    (a1q, s_a1), (a2q, s_a2) = rowwise_fp8(a1, 1), rowwise_fp8(a2, 1)
    (b1q, s_b1), (b2q, s_b2) = rowwise_fp8(b1, 0), rowwise_fp8(b2, 0)
    b1q, b2q = column_major(b1q), column_major(b2q)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        return (
            torch._scaled_mm(a1q, b1q, s_a1, s_b1, out_dtype=torch.bfloat16, use_fast_accum=True),
            torch._scaled_mm(a2q, b2q, s_a2, s_b2, out_dtype=torch.bfloat16, use_fast_accum=True),
        )

    return run


def block_scaled_mm(a: torch.Tensor, a_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """bf16 ``a @ w.T`` of e4m3 ``a`` [M, K] with :func:`quant.quantize_rows`' scales [M, K / 128] and e4m3
    ``w`` [N, K] with :func:`quant.quantize_blocks`' scales [N / 128, K / 128], by cuBLAS's block-scaled GEMM
    (sm_90, CUDA 12.9 or later; it promotes every 128-deep K block into float32 and has no fast
    accumulation). cuBLAS takes A's scales outer-dimension-major, hence the copy."""
    return torch._scaled_mm(a, w.t(), a_scale.t().contiguous().t(), w_scale.t(), out_dtype=torch.bfloat16,
                            use_fast_accum=False)  # fmt: skip


def dense_block_scaled_gemms(pairs: int, hidden: int, intermediate: int, device: torch.device) -> Callable[[], object]:
    """The FLOPs of both expert GEMMs of ``pairs`` pairs as two dense block-scaled fp8 GEMMs (module
    docstring); a RuntimeError from torch at the first call means its cuBLAS has no block scaling."""
    g = torch.Generator(device=device).manual_seed(0)
    a1, s_a1 = quantize_rows(torch.randn(pairs, hidden, generator=g, device=device))
    a2, s_a2 = quantize_rows(torch.randn(pairs, intermediate, generator=g, device=device))
    w1, s_w1 = quantize_blocks(torch.randn(2 * intermediate, hidden, generator=g, device=device))
    w2, s_w2 = quantize_blocks(torch.randn(hidden, intermediate, generator=g, device=device))
    return lambda: (block_scaled_mm(a1, s_a1, w1, s_w1), block_scaled_mm(a2, s_a2, w2, s_w2))
