"""Tutorial 3 (MegaMoE) on CPU: shapes, routing, dispatch bookkeeping, the algorithm, the kernels.

The last test runs the layer's real Triton kernels in Triton's interpreter (subprocess), at
world 1, 2 and 4 with emulated nvshmem_ptr; races and the raw CUDA code need the GPU suite.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

TUTORIAL = Path(__file__).resolve().parent.parent / "tutorials" / "03-megamoe"
sys.path.insert(0, str(TUTORIAL))

from moe_config import MoEConfig, choose_tiles, max_m_tiles  # noqa: E402
from moe_launch import launches  # noqa: E402
from moe_reference import reference, reference_bf16  # noqa: E402
from moe_routing import receive_counts, route, send_plan, simulate  # noqa: E402


def test_config_validation():
    with pytest.raises(ValueError, match="divisible"):
        MoEConfig(128, 128, 6, 2, 16, world=4)
    with pytest.raises(ValueError, match="multiple of 64"):
        MoEConfig(100, 128, 4, 2, 16)
    with pytest.raises(ValueError, match="top_k"):
        MoEConfig(128, 128, 4, 5, 16)


def test_workspace_sizes_production():
    cfg = MoEConfig(4096, 1536, 128, 8, 512, world=8)
    assert cfg.local_experts == 16 and cfg.recv_rows == 4096 and cfg.pair_capacity == 4096 * 8
    sym = dict((n, s) for n, s, _ in cfg.symmetric_buffers())
    assert sym["comb"] == (8, 512, 4096) and sym["send_idx"] == (8, 512)
    assert MoEConfig.nbytes(cfg.symmetric_buffers()) < 64 << 20  # fits NVSHMEM's default heap easily
    assert cfg.weight_bytes() == 16 * 3 * 4096 * 1536 * 2


def test_max_m_tiles_bounds_any_split():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        e = int(torch.randint(1, 20, (1,), generator=g))
        cap = int(torch.randint(1, 2000, (1,), generator=g))
        cuts = torch.sort(torch.randint(0, cap + 1, (e - 1,), generator=g)).values.tolist()
        rows = [b - a for a, b in zip([0, *cuts], [*cuts, cap], strict=True)]
        for bm in (64, 128):
            assert sum(-(-r // bm) for r in rows) <= max_m_tiles(cap, e, bm)


def test_tiles_and_launch_grids():
    cfg = MoEConfig(4096, 1536, 16, 8, 512)
    tiles = choose_tiles(256, 4096, 1536)
    assert tiles.block_m == 128 and choose_tiles(32, 4096, 1536).block_m == 64
    by_name = {lc.name: lc for lc in launches(cfg, tiles, 500)}
    assert list(by_name) == [
        "moe_route",
        "moe_plan",
        "moe_dispatch",
        "moe_place",
        "moe_l1_swiglu",
        "moe_l2",
        "moe_combine",
        "moe_reduce",
    ]
    assert by_name["moe_l1_swiglu"].grid == ((4096 // 128 + 16) * (1536 // 128),)
    assert by_name["moe_l2"].grid == ((4096 // 128 + 16) * (4096 // 256),)
    assert (choose_tiles(256, 4160, 1600).block_n1, choose_tiles(256, 4160, 1600).block_n2) == (64, 64)
    with pytest.raises(ValueError, match="divide"):
        choose_tiles(256, 4096, 1000)
    assert by_name["moe_reduce"].grid == (500,) and by_name["moe_route"].grid == (32,)
    assert [lc.name for lc in by_name.values() if lc.barrier_before] == ["moe_dispatch", "moe_reduce"]
    with pytest.raises(ValueError):
        launches(cfg, tiles, 513)


def test_route_matches_topk_softmax():
    logits = torch.randn(64, 16)
    ids, w = route(logits, 4)
    vals, ref_ids = torch.topk(logits, 4)
    assert torch.equal(ids.long(), ref_ids)
    torch.testing.assert_close(w, torch.softmax(vals, 1))
    full = torch.softmax(logits, 1).gather(1, ref_ids)
    torch.testing.assert_close(w, full / full.sum(1, keepdim=True))  # = renormalised full softmax
    tied = torch.zeros(2, 8)
    assert route(tied, 3)[0].tolist() == [[0, 1, 2], [0, 1, 2]]  # ties go to the lower id


@pytest.mark.parametrize("world", [1, 2, 4])
def test_send_plan_dedups_and_loses_nothing(world):
    e_loc, k, t = 3, 4, 50
    ids = torch.stack([torch.randperm(e_loc * world)[:k] for _ in range(t)]).int()
    plan = send_plan(ids, e_loc, world)
    for r in range(world):
        goes = ((ids.long() // e_loc) == r).any(1)
        assert int(plan.send_count[r]) == int(goes.sum())
        listed = plan.send_idx[r, : int(plan.send_count[r])]
        assert torch.equal(listed.long(), torch.nonzero(goes).flatten())  # each token once, in order
        assert (plan.send_idx[r, int(plan.send_count[r]) :] == -1).all()
        assert torch.equal(plan.slot[goes, r].long(), torch.arange(int(goes.sum())))
        assert (plan.slot[~goes, r] == -1).all()


def test_receive_counts_totals():
    world, e_loc, k = 4, 2, 3
    per_rank = [torch.stack([torch.randperm(8)[:k] for _ in range(10 + r)]).int() for r in range(world)]
    rows, pairs = receive_counts(per_rank, e_loc)
    assert int(pairs.sum()) == sum(x.numel() for x in per_rank)  # every (token, expert) pair once
    for src in range(world):
        distinct = sum(len(set((x // e_loc) for x in row.tolist())) for row in per_rank[src])
        assert int(rows[:, src].sum()) == distinct


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("skewed", [False, True])
def test_expert_parallel_algorithm_matches_reference(world, skewed):
    g = torch.Generator().manual_seed(world * 10 + skewed)
    h, i, e, k = 64, 32, 8, 3
    w1 = torch.randn(e, h, 2 * i, generator=g) / h**0.5
    w2 = torch.randn(e, i, h, generator=g) / i**0.5
    xs = [torch.randn(20 - r, h, generator=g) for r in range(world)]
    routed = []
    for x in xs:
        logits = torch.randn(x.shape[0], e, generator=g)
        if skewed:
            logits[:, 5] += 20.0
        routed.append(route(logits, k))
    ys = simulate(xs, [ids for ids, _ in routed], [w for _, w in routed], w1, w2)
    for x, (ids, w), y in zip(xs, routed, ys, strict=True):
        torch.testing.assert_close(y, reference(x, ids, w, w1, w2), rtol=1e-4, atol=1e-4)


def test_bf16_reference_close_to_float32():
    h, i, e, k = 128, 64, 4, 2
    w1, w2 = (torch.randn(e, h, 2 * i) / h**0.5).bfloat16(), (torch.randn(e, i, h) / i**0.5).bfloat16()
    x = torch.randn(32, h).bfloat16()
    ids, w = route(torch.randn(32, e), k)
    ref = reference(x, ids, w, w1, w2)
    assert float((reference_bf16(x, ids, w, w1, w2).float() - ref).norm() / ref.norm()) < 1e-2


def test_kernels_in_interpreter():
    """The real kernels (Triton interpreter, emulated nvshmem_ptr) at world 1, 2, 4, random + skewed."""
    proc = subprocess.run(
        [sys.executable, str(TUTORIAL / "moe_cpu_sim.py"), "--world", "1", "2", "4"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.count("PASS") == 6
