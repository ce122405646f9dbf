"""Tutorial 3's grouped-GEMM expert-parallel baseline (ep_baseline) on CPU, over gloo, at world 1 and 2.

bf16 runs the exact code the multi-GPU benchmark times (``torch._grouped_mm`` runs on CPU). fp8's
``torch._scaled_grouped_mm`` has no CPU kernel, so its GEMM alone is replaced here by a loop over the
groups of the same scaled product; the token packing, the exchanges, the sort by expert, the group
ends and the combine are the real ones. Every rank's output is compared with the single-process
float32 reference of all experts.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.multiprocessing as mp
from conftest import free_port, init_gloo

from tutorials.megamoe.ep_baseline import FP8Experts, dispatch_compute_combine, ep_forward, experts_for, plan
from tutorials.megamoe.reference import reference
from tutorials.megamoe.routing import route

# (H, I, E, top_k, tokens of rank 0 (rank r has 5r more), skewed routing, precision, bound on the relative
# error vs float32). bf16: the layer's own bound (megamoe.TOL_NORM). fp8: e4m3 x, w and h with row-wise
# scales (a scale applied to the wrong row or column is off by far more).
CASES = [(64, 32, 8, 2, 21, False, "bf16", 1e-2), (128, 64, 8, 4, 30, True, "bf16", 1e-2),
         (128, 64, 8, 3, 17, False, "fp8", 0.1), (64, 128, 4, 2, 9, True, "fp8", 0.1)]  # fmt: skip


class LoopFP8Experts(FP8Experts):
    """FP8Experts whose grouped GEMM is a loop of float32 matmuls over the groups (no CPU fp8 GEMM)."""

    @staticmethod
    def gemm(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
             ends: torch.Tensor) -> torch.Tensor:  # fmt: skip
        out = torch.empty(a.shape[0], b.shape[2], dtype=torch.bfloat16)
        start = 0
        for g, end in enumerate(ends.tolist()):
            rows = a[start:end].float() * a_scale[start:end, None]
            out[start:end] = (rows @ (b[g].float() * b_scale[g][None, :])).to(torch.bfloat16)
            start = end
        return out


def _worker(rank: int, world: int, port: int) -> None:
    """One rank: every case; raises naming the case and the error on a mismatch."""
    import torch.distributed as dist

    init_gloo(rank, world, port)
    try:
        for n, (h, i, e, k, t0, skewed, precision, tol) in enumerate(CASES):
            g = torch.Generator().manual_seed(n)  # the same weights on every rank
            w1 = (torch.randn(e, h, 2 * i, generator=g) / math.sqrt(h)).to(torch.bfloat16)
            w2 = (torch.randn(e, i, h, generator=g) / math.sqrt(i)).to(torch.bfloat16)
            g.manual_seed(1000 * n + rank)  # each rank's own tokens
            x = torch.randn(t0 + 5 * rank, h, generator=g).to(torch.bfloat16)
            logits = torch.randn(x.shape[0], e, generator=g)
            if skewed:
                logits[:, -1] += 20.0  # the last rank's last expert is every token's first choice
            e_loc = e // world
            mine = slice(rank * e_loc, (rank + 1) * e_loc)
            experts = experts_for("bf16", w1[mine], w2[mine]) if precision == "bf16" else LoopFP8Experts(
                w1[mine], w2[mine])  # fmt: skip
            y = ep_forward(x, logits, k, experts, e_loc)
            again = dispatch_compute_combine(x, plan(logits, k, e_loc), experts)  # the benchmark's split
            ids, weights = route(logits, k)
            ref = reference(x, ids, weights, w1, w2)
            err = float((y.float() - ref).norm() / ref.norm())
            if y.shape != x.shape or y.dtype != x.dtype or not err <= tol or not torch.equal(y, again):
                raise AssertionError(
                    f"world {world} rank {rank} case {n} (H={h} I={i} E={e} k={k} skewed={skewed} {precision}): "
                    f"output {tuple(y.shape)} {y.dtype}, relative error {err:.2e} (bound {tol:.0e}), "
                    f"plan + dispatch_compute_combine equal to ep_forward: {torch.equal(y, again)}"
                )
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [1, 2])
def test_ep_baseline_matches_single_process_reference(world):
    mp.spawn(_worker, args=(world, free_port()), nprocs=world, join=True)


def test_fp8_tokens_travel_with_their_scale():
    x = torch.randn(5, 128).to(torch.bfloat16) * torch.tensor([1.0, 10.0, 0.1, 3.0, 0.0])[:, None].to(torch.bfloat16)
    experts = FP8Experts(torch.randn(2, 128, 64).to(torch.bfloat16), torch.randn(2, 32, 128).to(torch.bfloat16))
    packed = experts.pack(x)
    assert packed.dtype == torch.uint8 and packed.shape == (5, 128 + 4)
    values = packed[:, :128].contiguous().view(torch.float8_e4m3fn).float()
    scale = packed[:, 128:].contiguous().view(torch.float32)
    back = values * scale
    assert float((back - x.float()).norm() / x.float().norm()) < 0.05
    assert torch.equal(back[4], torch.zeros(128))


def test_ep_baseline_needs_torch_distributed():
    with pytest.raises(RuntimeError, match="init_process_group"):
        plan(torch.randn(4, 2), 1, 2)


def test_experts_for_names_the_precisions():
    with pytest.raises(ValueError, match="'bf16' or 'fp8'"):
        experts_for("fp16", torch.zeros(1, 64, 64), torch.zeros(1, 32, 64))
