"""Inputs and references for checking AllGather-GEMM (device-agnostic: also runs on CPU).

Every rank's shard is drawn from a generator seeded by (seed, call, rank), so any rank can rebuild
the whole gathered A without communication: that is the reference where torch.distributed cannot
gather CUDA tensors (gloo in shared-GPU mode). With NCCL the reference gathers with
``all_gather_into_tensor`` instead.
"""

from __future__ import annotations

import torch

# Relative Frobenius error bounds against a float32 reference. The kernel accumulates in fp32; the
# error is dominated by rounding the output once (relative rms ~ 2^-9/sqrt(3) ~ 1.1e-3 for bf16,
# 2^-12/sqrt(3) ~ 1.4e-4 for fp16), so these leave ~4x margin and still catch a wrong tile.
TOLERANCE = {torch.bfloat16: 5e-3, torch.float16: 1e-3}


def shard_seed(seed: int, call: int, rank: int) -> int:
    """The generator seed of ``rank``'s inputs in call number ``call``."""
    return (seed * 1_000_003 + call) * 4099 + rank


def make_inputs(m_per_rank: int, n: int, k: int, dtype: torch.dtype, seed: int, call: int, rank: int,
                device: str | torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(A_rank [m_per_rank, k], B_rank [k, n]) for ``rank``; standard normal, deterministic."""
    gen = torch.Generator(device=device).manual_seed(shard_seed(seed, call, rank))
    a = torch.randn(m_per_rank, k, generator=gen, device=device).to(dtype)
    b = torch.randn(k, n, generator=gen, device=device).to(dtype)
    return a, b


def rebuild_gathered(m_per_rank: int, n: int, k: int, dtype: torch.dtype, seed: int, call: int, world: int,
                     device: str | torch.device) -> torch.Tensor:
    """AllGather(A) [world * m_per_rank, k] rebuilt from the seeds of every rank."""
    return torch.cat([make_inputs(m_per_rank, n, k, dtype, seed, call, r, device)[0] for r in range(world)])


def reference(gathered: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``gathered @ b`` in float32 (TF32 off)."""
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return gathered.float() @ b.float()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref||_F / ||ref||_F in float64 arithmetic; NaN if ``out`` has a non-finite value."""
    out64 = out.double()
    if not bool(torch.isfinite(out64).all()):
        return float("nan")
    ref64 = ref.double()
    return float(torch.linalg.vector_norm(out64 - ref64) / torch.linalg.vector_norm(ref64))
