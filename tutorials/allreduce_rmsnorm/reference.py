"""Reference, inputs and tolerance for the fused AllReduce + residual + RMSNorm (torch, any device).

Contract of the op being checked (README, "What is computed"): ``reduced`` is the fp32 sum of the
ranks' ``x`` in rank order rounded to the input dtype (what an all-reduce returns); then
``r = reduced + residual``, ``residual_out = r`` and ``norm_out = r * rsqrt(mean(r^2) + eps) * weight``
computed in fp32 and rounded once to the dtype. :func:`reference` computes the outputs in float64 and
leaves them unrounded; :func:`compare` accepts an output within :func:`tolerance` of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Largest relative error allowed against the float64 reference: one unit in the last place of the
# output dtype (2^-7 for bf16, 2^-10 for fp16). Rounding to the dtype costs at most half of it; the
# fp32 arithmetic of the kernel (sum of squares, rsqrt) adds ~1e-6 relative. ATOL covers values so
# close to zero that their ulp is absolute (fp16 subnormals are 6e-8 apart).
RTOL = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}
ATOL = 1e-6


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for outputs of ``dtype``; raises for dtypes the op does not support."""
    if dtype not in RTOL:
        raise ValueError(f"unsupported dtype {dtype}; the op supports bfloat16 and float16")
    return RTOL[dtype], ATOL


def make_inputs(
    case: int, rank: int, tokens: int, hidden: int, dtype: torch.dtype, device: str | torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random (x, residual, weight) of one rank for one case: different per rank and per case,
    reproducible on every rank (each rank can rebuild every other rank's inputs)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(1_000_003 * case + 7919 * rank + 17)
    x = torch.randn(tokens, hidden, generator=gen, device=device, dtype=torch.float32).to(dtype)
    residual = torch.randn(tokens, hidden, generator=gen, device=device, dtype=torch.float32).to(dtype)
    weight = (1.0 + 0.5 * torch.randn(hidden, generator=gen, device=device, dtype=torch.float32)).to(dtype)
    return x, residual, weight


def reduce_like_allreduce(xs: list[torch.Tensor]) -> torch.Tensor:
    """fp32 sum in rank order, rounded to the inputs' dtype."""
    acc = torch.zeros(xs[0].shape, dtype=torch.float32, device=xs[0].device)
    for x in xs:
        acc = acc + x.float()
    return acc.to(xs[0].dtype)


def reference(
    xs: list[torch.Tensor], residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(norm_out, residual_out) in float64, unrounded, for one rank given every rank's x."""
    r = reduce_like_allreduce(xs).double() + residual.double()
    inv = torch.rsqrt(r.square().mean(dim=-1, keepdim=True) + eps)
    return r * inv * weight.double(), r


@dataclass(frozen=True)
class Comparison:
    max_abs: float
    max_rel: float  # max |out - ref| / |ref| over elements with |ref| > 1e-3 (0 if none)
    worst_ratio: float  # max |out - ref| / (atol + rtol |ref|); <= 1 passes; inf for NaN/inf
    ok: bool


def compare(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> Comparison:
    """Compare one output with its float64 reference; NaN (poison left unwritten) never passes."""
    rtol, atol = tolerance(dtype)
    err = (out.double() - ref).abs()
    bound = atol + rtol * ref.abs()
    finite = bool(torch.isfinite(err).all())
    big = ref.abs() > 1e-3
    max_rel = float((err[big] / ref.abs()[big]).max()) if bool(big.any()) else 0.0
    ratio = float((err / bound).max()) if finite else float("inf")
    max_abs = float(err.max()) if finite else float("inf")
    return Comparison(max_abs=max_abs, max_rel=max_rel, worst_ratio=ratio, ok=finite and ratio <= 1.0)
