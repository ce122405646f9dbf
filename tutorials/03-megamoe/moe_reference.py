"""Torch references of the MoE layer (any device).

Contract: :func:`reference` is the dense-math definition the kernels are checked against, in
float32 on upcast inputs: y[t] = sum_k w[t, k] * L2_e(SwiGLU(L1_e(x[t]))) with e = ids[t, k],
L1_e(x) = x @ w1[e] ([H, 2I], gate columns first, then up), SwiGLU(g, u) = silu(g) * u and
L2_e(h) = h @ w2[e] ([I, H]). :func:`reference_bf16` is the same in bf16 matmuls with one loop over
experts, the baseline a user would write (it synchronises with the host to index tokens).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def expert_forward(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """L2(SwiGLU(L1(x))) for one expert; computes in the dtype of its inputs."""
    gu = x @ w1
    inter = w1.shape[1] // 2
    return (F.silu(gu[:, :inter]) * gu[:, inter:]) @ w2


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
