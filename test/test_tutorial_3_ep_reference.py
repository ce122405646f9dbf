"""Tutorial 3's distributed torch baseline (ep_reference.ep_forward) on CPU, over gloo.

Runs the exact code the multi-GPU benchmark times (there over NCCL) in 2 and 4 processes, with
uneven token counts per rank and skewed routing (ranks that receive no rows, zero-size exchanges),
and compares every rank's output with the single-process float32 reference of all experts.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.multiprocessing as mp
from conftest import free_port, init_gloo

from tutorials.megamoe.ep_reference import ep_forward
from tutorials.megamoe.reference import reference
from tutorials.megamoe.routing import route

# (H, I, E, top_k, tokens of rank 0 (rank r has 3r more), skewed routing, dtype, bound on the relative
# error). float32: only summation order differs from the reference. bf16: the bound of the layer's
# own check (megamoe.TOL_NORM), the rounding of bf16 operands and outputs.
CASES = {
    2: [(64, 32, 8, 2, 21, False, torch.float32, 1e-5), (64, 32, 8, 1, 9, True, torch.float32, 1e-5),
        (128, 64, 8, 4, 30, False, torch.bfloat16, 1e-2)],
    4: [(64, 32, 8, 3, 17, False, torch.float32, 1e-5), (128, 64, 16, 2, 12, True, torch.bfloat16, 1e-2)],
}  # fmt: skip


def _worker(rank: int, world: int, port: int) -> None:
    """One rank: every case of CASES[world]; raises naming the case and the error on a mismatch."""
    import torch.distributed as dist

    init_gloo(rank, world, port)
    try:
        for n, (h, i, e, k, t0, skewed, dtype, tol) in enumerate(CASES[world]):
            g = torch.Generator().manual_seed(n)  # the same weights on every rank
            w1 = (torch.randn(e, h, 2 * i, generator=g) / math.sqrt(h)).to(dtype)
            w2 = (torch.randn(e, i, h, generator=g) / math.sqrt(i)).to(dtype)
            g.manual_seed(1000 * n + rank)  # each rank's own tokens
            x = torch.randn(t0 + 3 * rank, h, generator=g).to(dtype)
            logits = torch.randn(x.shape[0], e, generator=g)
            if skewed:
                logits[:, 0] += 20.0  # expert 0 (rank 0) is every token's first choice
            e_loc = e // world
            y = ep_forward(x, logits, k, w1[rank * e_loc : (rank + 1) * e_loc], w2[rank * e_loc : (rank + 1) * e_loc])
            ids, weights = route(logits, k)
            ref = reference(x, ids, weights, w1, w2)
            err = float((y.float() - ref).norm() / ref.norm())
            if y.shape != x.shape or y.dtype != dtype or not err <= tol:
                raise AssertionError(
                    f"world {world} rank {rank} case {n} (H={h} I={i} E={e} k={k} skewed={skewed} {dtype}): "
                    f"output {tuple(y.shape)} {y.dtype}, relative error {err:.2e} > {tol:.0e}"
                )
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", sorted(CASES))
def test_ep_forward_matches_single_process_reference(world):
    mp.spawn(_worker, args=(world, free_port()), nprocs=world, join=True)


def test_ep_forward_needs_torch_distributed():
    x = torch.randn(4, 64)
    w1, w2 = torch.randn(2, 64, 64), torch.randn(2, 32, 64)
    with pytest.raises(RuntimeError, match="init_process_group"):
        ep_forward(x, torch.randn(4, 2), 1, w1, w2)
