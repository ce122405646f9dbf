"""Torch references of the MoE layer (any device).

Contract: :func:`reference` is the dense-math definition the kernels are checked against, in
float32 on upcast inputs: y[t] = sum_k w[t, k] * L2_e(SwiGLU(L1_e(x[t]))) with e = ids[t, k],
L1_e(x) = x @ w1[e] ([H, 2I], gate columns first, then up), SwiGLU(g, u) = silu(g) * u and
L2_e(h) = h @ w2[e] ([I, H]). :func:`reference_bf16` is the same in bf16 matmuls with one loop over
experts, the baseline a user would write (it synchronises with the host to index tokens).
:func:`reference_fp8` is :func:`reference` with the fp8 layer's quantization applied where the layer
applies it (``quant``: x per token and 128 channels, weights per 128 x 128 block, h per pair and
128 channels after SwiGLU), each quantized value then used exactly in float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .quant import dequantize_blocks, dequantize_rows, quantize_blocks, quantize_rows


def swiglu(gu: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up of ``gu`` [..., 2I] (gate columns first)."""
    inter = gu.shape[-1] // 2
    return F.silu(gu[..., :inter]) * gu[..., inter:]


def expert_forward(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """L2(SwiGLU(L1(x))) for one expert; computes in the dtype of its inputs."""
    return swiglu(x @ w1) @ w2


def reference(
    x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor
) -> torch.Tensor:
    """float32 output [T, H] for tokens ``x`` [T, H], routing ``ids``/``weights`` [T, k], all experts."""
    y = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
    xf = x.float()
    for e in torch.unique(ids).tolist():
        tok, k = torch.nonzero(ids == e, as_tuple=True)
        out = expert_forward(xf[tok], w1[e].float(), w2[e].float())
        y.index_add_(0, tok, weights[tok, k].float()[:, None] * out)
    return y


def _fake_quant_rows(x: torch.Tensor) -> torch.Tensor:
    return dequantize_rows(*quantize_rows(x))


def reference_fp8(
    x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor
) -> torch.Tensor:
    """float32 output [T, H] of the fp8 layer's math: as :func:`reference`, with x, w1[e], w2[e] and h
    replaced by their quantize-dequantize round trips (H and I multiples of 128)."""
    y = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
    xq = _fake_quant_rows(x)
    for e in torch.unique(ids).tolist():
        tok, k = torch.nonzero(ids == e, as_tuple=True)
        h = swiglu(xq[tok] @ dequantize_blocks(*quantize_blocks(w1[e])))
        out = _fake_quant_rows(h) @ dequantize_blocks(*quantize_blocks(w2[e]))
        y.index_add_(0, tok, weights[tok, k].float()[:, None] * out)
    return y


def reference_bf16(
    x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor
) -> torch.Tensor:
    """bf16 output [T, H]: per-expert bf16 matmuls, float32 weighted sum."""
    y = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
    flat = ids.flatten().long()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=w1.shape[0]).tolist()
    tok_sorted = order // ids.shape[1]
    start = 0
    for e, n in enumerate(counts):
        if n:
            sel = order[start : start + n]
            tok = tok_sorted[start : start + n]
            out = expert_forward(x[tok], w1[e], w2[e])
            y.index_add_(0, tok, weights.flatten()[sel].float()[:, None] * out.float())
        start += n
    return y.to(torch.bfloat16)
