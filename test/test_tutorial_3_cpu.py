"""Tutorial 3 (MegaMoE) on CPU: shapes, routing, dispatch bookkeeping, the algorithm, the kernels.

The kernel tests run the layer's real Triton kernels in Triton's interpreter (subprocess), at
world 1, 2 and 4 with emulated nvshmem_ptr, in bf16 and fp8; races and the raw CUDA code need the
GPU suite. The fp8 tests also check the block quantization helpers and the quantization-aware
reference.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, child_env

from tutorials.megamoe.config import FP8_BLOCK, MoEConfig, Tiles, choose_tiles, choose_tiles_fp8, max_m_tiles
from tutorials.megamoe.launch import launches, launches_fp8
from tutorials.megamoe.quant import (
    AMAX_FLOOR,
    FP8_MAX,
    dequantize_blocks,
    dequantize_rows,
    expert_weights,
    quantize_blocks,
    quantize_k_major,
    quantize_rows,
)
from tutorials.megamoe.reference import reference, reference_bf16, reference_fp8
from tutorials.megamoe.routing import receive_counts, route, send_plan, simulate


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
    cfg = MoEConfig(4096, 1536, 32, 8, 512, world=2)  # 16 local experts, up to 2 * 512 * 8 pairs
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
    assert by_name["moe_l1_swiglu"].grid == ((8192 // 128 + 16) * (1536 // 128),)
    assert by_name["moe_l2"].grid == ((8192 // 128 + 16) * (4096 // 256),)
    # big loads: L1's weights through TMA (faster on the H200), L2 with pointers (slower through TMA)
    assert (by_name["moe_l1_swiglu"].constexprs["TMA"], by_name["moe_l2"].constexprs["TMA"]) == (True, False)
    assert not choose_tiles(32, 4096, 1536).tma
    # L1 and L2 as one persistent launch: the grid is the program count, the counters fit gemm_sched
    with pytest.raises(ValueError, match="gemm_programs .* needs tma_l2=False"):
        launches(cfg, dataclasses.replace(tiles, gemm_programs=132, tma_l2=True), 500)
    (fused,) = [lc for lc in launches(cfg, dataclasses.replace(tiles, gemm_programs=132), 500)
                if lc.name == "moe_gemms"]  # fmt: skip
    assert fused.grid == (132,) and fused.constexprs["SCHED_P2"] >= fused.constexprs["M_TILES"] + 2
    assert fused.constexprs["M_TILES"] + 2 <= cfg.gemm_sched_len
    with pytest.raises(ValueError, match="block_m=8: moe_gemms needs block_m >= 16"):
        launches(cfg, dataclasses.replace(tiles, block_m=8, gemm_programs=132), 500)
    assert (choose_tiles(256, 4160, 1600).block_n1, choose_tiles(256, 4160, 1600).block_n2) == (64, 64)
    with pytest.raises(ValueError, match="divide"):
        choose_tiles(256, 4096, 1000)
    assert by_name["moe_reduce"].grid == (500,) and by_name["moe_route"].grid == (32, 4096 // 512)
    assert by_name["moe_combine"].grid == (2, 512, 4096 // 1024)
    assert [lc.name for lc in by_name.values() if lc.barrier_before] == ["moe_dispatch", "moe_reduce"]
    with pytest.raises(ValueError):
        launches(cfg, tiles, 513)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_world_one_reads_rows_in_place_and_skips_the_exchange(precision):
    """World 1: no token copy into x_sym (bf16), no pull, no push, no reduce; L1 reads the rows where they
    are and the combine writes y (the end-to-end result is checked by the interpreter run)."""
    cfg = MoEConfig(4096, 1536, 16, 8, 512, precision=precision)
    tiles = (choose_tiles_fp8 if precision == "fp8" else choose_tiles)(256, 4096, 1536)
    plan = {lc.step: lc for lc in launches(cfg, tiles, 500)}
    assert "moe_reduce" not in plan and not any(lc.barrier_before and lc.step != "moe_dispatch" for lc in plan.values())
    assert plan["moe_dispatch"].constexprs["PULL_ROWS"] is False
    assert plan["moe_combine"].constexprs["PUSH"] is False
    assert dict(plan["moe_combine"].params)["staging"] == "y"
    l1_keys = [k for _, k in plan["moe_l1_swiglu"].params]
    assert l1_keys[:2] == (["x_sym", "x_scale"] if precision == "fp8" else ["x", "sorted_row"])
    if precision == "bf16":
        assert plan["moe_route"].constexprs["COPY_X"] is False
    two = launches(dataclasses.replace(cfg, num_experts=32, world=2), tiles, 500)
    assert [lc.step for lc in two][-1] == "moe_reduce"
    assert all(lc.constexprs.get(f, True) is True for lc in two for f in ("PULL_ROWS", "PUSH", "COPY_X"))


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


@pytest.mark.parametrize(("t", "k", "e"), [(512, 8, 16), (50, 3, 7), (4, 8, 8)])
def test_make_inputs_routings_route_as_named(t, k, e):
    """``make_inputs``' routings, through the reference router: "balanced" gives every expert t * k / e pairs
    (within one), each token k distinct experts; "skewed" makes expert seed % e every token's first choice;
    "crowded" sends every token to experts 0 .. k - 1; an unknown routing, or "balanced" without top_k, is
    refused naming the cause."""
    from tutorials.megamoe.megamoe import make_inputs

    cpu = torch.device("cpu")
    ids, _ = route(make_inputs(t, 64, e, "balanced", 5, cpu, top_k=k)[1], k)
    per_expert = torch.bincount(ids.flatten().long(), minlength=e)
    assert int(per_expert.max() - per_expert.min()) <= 1 and int(per_expert.sum()) == t * k
    assert all(len(set(row)) == k for row in ids.tolist())
    ids, _ = route(make_inputs(t, 64, e, "skewed", 5, cpu)[1], k)
    assert bool((ids[:, 0] == 5 % e).all())
    ids, _ = route(make_inputs(t, 64, e, "crowded", 5, cpu, top_k=k)[1], k)
    assert torch.equal(ids.sort(dim=1).values, torch.arange(k, dtype=torch.int32).expand(t, k))
    with pytest.raises(ValueError, match="routing 'sorted' is not one of"):
        make_inputs(t, 64, e, "sorted", 5, cpu)
    with pytest.raises(ValueError, match="balanced routing needs 1 <= top_k <= e"):
        make_inputs(t, 64, e, "balanced", 5, cpu)


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
    """The real kernels (Triton interpreter, emulated nvshmem_ptr) at world 1, 2, 4, random + skewed, and
    skewed with L1 and L2 as one persistent launch (moe_gemms)."""
    proc = subprocess.run(
        [sys.executable, "-m", "tutorials.megamoe.cpu_sim", "--world", "1", "2", "4"],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.count("PASS") == 9 and proc.stdout.count("persistent GEMMs: PASS") == 3


# ----------------------------------------------------------------------------- fp8


def _within_e4m3_rounding(v: torch.Tensor, deq: torch.Tensor, scale: torch.Tensor) -> bool:
    """|deq - v| <= 2**-4 |v| (normal e4m3) or half the subnormal step 2**-9 (times the block scale)."""
    return bool(((deq - v).abs() <= torch.maximum(v.abs() * 2**-4, scale * 2**-10) * (1 + 1e-6)).all())


def test_quantize_rows_round_trip_and_shapes():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(33, 512, generator=g) * torch.logspace(-3, 3, 4).repeat_interleave(128)  # blocks 1e6 apart
    q, scale = quantize_rows(x.bfloat16())
    assert q.dtype == torch.float8_e4m3fn and q.shape == (33, 512) and scale.shape == (33, 4)
    v = x.bfloat16().float()
    deq = dequantize_rows(q, scale)
    assert _within_e4m3_rounding(v, deq, scale.repeat_interleave(FP8_BLOCK, 1))
    assert torch.equal(q.float().abs().unflatten(1, (4, 128)).amax(-1), torch.full((33, 4), FP8_MAX))
    torch.testing.assert_close(scale, v.abs().unflatten(1, (4, 128)).amax(-1) / FP8_MAX, rtol=0, atol=0)
    assert 0.01 < float((deq - v).norm() / v.norm()) < 0.05  # e4m3: ~3.6 % rms, not exact, not garbage


def test_quantize_rounds_to_nearest_even_and_zero_blocks():
    x = torch.zeros(2, 256)
    x[0, :6] = torch.tensor([448.0, 15.5, 14.5, 2.0**-10, 1e-3, -232.0])  # scale 1: values land on e4m3 as is
    q, scale = quantize_rows(x)
    assert q[0, :6].float().tolist() == [448.0, 16.0, 14.0, 0.0, 2.0**-9, -224.0]  # ties to even, subnormals
    assert float(scale[0, 0]) == 1.0
    zero_scales = scale.flatten()[1:]  # the other three blocks are all zero
    assert torch.equal(zero_scales, torch.full((3,), AMAX_FLOOR / FP8_MAX))
    assert torch.isfinite(zero_scales).all() and (zero_scales > 0).all()
    assert torch.equal(dequantize_rows(q, scale)[1], torch.zeros(256))


def test_quantize_blocks_are_independent():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(3, 256, 384, generator=g)
    q, scale = quantize_blocks(w)
    assert q.shape == w.shape and scale.shape == (3, 2, 3)
    per_value = scale.repeat_interleave(128, 1).repeat_interleave(128, 2)
    assert _within_e4m3_rounding(w, dequantize_blocks(q, scale), per_value)
    louder = w.clone()
    louder[1, 128:, :128] *= 1024.0  # one block: only its scale moves, its values keep their e4m3 codes
    q2, scale2 = quantize_blocks(louder)
    changed = (scale2 != scale).nonzero().tolist()
    assert changed == [[1, 1, 0]]
    assert torch.equal(q2.view(torch.uint8), q.view(torch.uint8))
    with pytest.raises(ValueError, match="multiple of 128"):
        quantize_blocks(torch.randn(128, 100))
    with pytest.raises(ValueError, match="multiple of 128"):
        quantize_rows(torch.randn(4, 192))


def test_k_major_weights_match_blocks_of_the_given_layout():
    g = torch.Generator().manual_seed(2)
    w = torch.randn(2, 256, 384, generator=g).bfloat16()  # [E, K, N]
    q, scale = quantize_k_major(w)
    assert q.shape == (2, 384, 256) and scale.shape == (2, 3, 2) and q.is_contiguous()
    torch.testing.assert_close(
        dequantize_blocks(q, scale).transpose(1, 2), dequantize_blocks(*quantize_blocks(w)), rtol=0, atol=0
    )
    bound = expert_weights(w, w.transpose(1, 2).contiguous(), "fp8")
    assert sorted(bound) == ["w1q", "w1s", "w2q", "w2s"]
    assert bound["w2q"].shape == (2, 256, 384) and bound["w2s"].shape == (2, 2, 3)
    assert sorted(expert_weights(w, w, "bf16")) == ["w1", "w2"]
    with pytest.raises(ValueError, match="bf16.*fp8"):
        expert_weights(w, w, "fp16")


def test_fp8_reference_is_the_quantized_math():
    g = torch.Generator().manual_seed(3)
    h, i, e, k = 256, 256, 4, 2
    w1, w2 = torch.randn(e, h, 2 * i, generator=g) / h**0.5, torch.randn(e, i, h, generator=g) / i**0.5
    x = torch.randn(40, h, generator=g)
    ids, w = route(torch.randn(40, e, generator=g), k)
    ref = reference(x, ids, w, w1, w2)
    fp8 = reference_fp8(x, ids, w, w1, w2)
    err = float((fp8 - ref).norm() / ref.norm())
    assert 0.03 < err < 0.1, err  # three e4m3 roundings (x, w, h) of ~3.6 % each, not more
    # Quantized operands survive a second round trip (to float32 rounding), so they lose nothing more
    # there; h is rounded again because it is computed.
    x_exact = dequantize_rows(*quantize_rows(x))
    w1_exact, w2_exact = (dequantize_blocks(*quantize_blocks(t)) for t in (w1, w2))
    torch.testing.assert_close(
        reference_fp8(x_exact, ids, w, w1_exact, w2_exact), fp8, rtol=1e-5, atol=1e-6
    )
    h_only = float((fp8 - reference(x_exact, ids, w, w1_exact, w2_exact)).norm() / ref.norm())
    assert 0.01 < h_only < err  # the h quantization is part of the reference, and only part of its error


def test_fp8_config_buffers_and_validation():
    cfg = MoEConfig(4096, 1536, 128, 8, 512, world=8, precision="fp8")
    sym = {n: (shape, dt) for n, shape, dt in cfg.symmetric_buffers()}
    local = {n: (shape, dt) for n, shape, dt in cfg.local_buffers()}
    assert sym["x_sym"] == ((512, 4096), "float8_e4m3fn") and sym["x_scale"] == ((512, 32), "float32")
    assert local["recv_x"] == ((4096, 4096), "float8_e4m3fn") and local["recv_xs"] == ((4096, 32), "float32")
    assert local["h"] == ((32768, 1536), "float8_e4m3fn") and local["h_scale"] == ((32768, 12), "float32")
    assert local["y_pair"][1] == "bfloat16" and sym["comb"][1] == "bfloat16"
    bf16 = MoEConfig(4096, 1536, 128, 8, 512, world=8)
    assert "x_scale" not in {n for n, _, _ in bf16.symmetric_buffers()}
    assert MoEConfig.nbytes(cfg.symmetric_buffers()) < MoEConfig.nbytes(bf16.symmetric_buffers())
    n = 16 * 3 * 4096 * 1536
    assert cfg.weight_bytes() == n + n // 128**2 * 4 and bf16.weight_bytes() == 2 * n
    with pytest.raises(ValueError, match="multiple of 128 for precision='fp8'"):
        MoEConfig(4096, 192, 16, 8, 512, precision="fp8")
    with pytest.raises(ValueError, match="'bf16', 'fp8'"):
        MoEConfig(4096, 1536, 16, 8, 512, precision="fp16")
    from tutorials.megamoe import MegaMoE

    with pytest.raises(ValueError, match="'bf16', 'fp8'"):  # before anything needs a GPU
        MegaMoE(128, 128, 2, 1, 8, torch.empty(0), torch.empty(0), precision="e4m3")


def test_fp8_launches():
    cfg = MoEConfig(4096, 1536, 32, 8, 512, world=2, precision="fp8")
    tiles = choose_tiles_fp8(256, 4096, 1536)
    assert (tiles.block_k, tiles.block_n1, tiles.block_m, tiles.block_n2, tiles.num_warps) == (128, 128, 64, 256, 8)
    assert choose_tiles_fp8(32, 4096, 1536).num_stages == 3 and choose_tiles_fp8(256, 4224, 1536).block_n2 == 128
    with pytest.raises(ValueError, match="multiples of 128"):
        choose_tiles_fp8(256, 4096, 1600)
    plan = launches(cfg, tiles, 500)
    assert plan == launches_fp8(cfg, tiles, 500)
    assert [lc.name for lc in plan] == [
        "moe_route_fp8",
        "moe_plan",
        "moe_dispatch_fp8",
        "moe_place",
        "moe_l1_swiglu_fp8",
        "moe_l2_fp8",
        "moe_combine",
        "moe_reduce",
    ]
    bf16_plan = launches(MoEConfig(4096, 1536, 32, 8, 512, world=2), choose_tiles(256, 4096, 1536), 500)
    assert [lc.step for lc in plan] == [lc.name for lc in bf16_plan]  # bf16 names select the fp8 steps
    for ours, theirs in zip(plan, bf16_plan, strict=True):
        if ours.name == theirs.name:  # shared kernels: the very same launch
            assert ours == theirs
    by_name = {lc.name: lc for lc in plan}
    assert by_name["moe_l1_swiglu_fp8"].grid == ((8192 // 64 + 16) * (1536 // 128),)
    assert by_name["moe_l2_fp8"].grid == ((8192 // 64 + 16) * (4096 // 256),)
    assert [lc.name for lc in plan if lc.barrier_before] == ["moe_dispatch_fp8", "moe_reduce"]
    with pytest.raises(ValueError, match=r"Tiles.gemm_programs \(one persistent GEMM launch\) is bf16 only"):
        launches(cfg, dataclasses.replace(tiles, gemm_programs=132), 500)
    for flag in ("tma_l1", "tma_l2"):
        with pytest.raises(ValueError, match="Tiles.tma_l1/tma_l2 are for the bf16 GEMMs"):
            launches(cfg, dataclasses.replace(tiles, **{flag: True}), 500)
    with pytest.raises(ValueError, match="block_k = block_n1 = 128"):
        launches(cfg, Tiles(128, 128, 256, 32, 8, 5), 500)
    with pytest.raises(ValueError, match="precision='fp8'"):
        launches_fp8(MoEConfig(4096, 1536, 16, 8, 512), tiles, 500)


def test_fp8_kernels_in_interpreter():
    """The fp8 kernels in Triton's interpreter (its float32 -> e4m3 cast replaced by torch's round to
    nearest even, see cpu_sim) at world 1, 2, 4, random + skewed, against reference_fp8."""
    proc = subprocess.run(
        [sys.executable, "-m", "tutorials.megamoe.cpu_sim", "--precision", "fp8", "--world", "1", "2", "4"],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.count("PASS") == 6


def test_tune_sweeps_build_valid_launches():
    """Every candidate of tune_gemms.py's sweeps is a tile set the launch builder accepts."""
    from tutorials.megamoe import tune_gemms

    for precision, sweep in tune_gemms.SWEEPS.items():
        cfg = MoEConfig(4096, 1536, 16, 8, 512, precision=precision)
        pick = choose_tiles_fp8 if precision == "fp8" else choose_tiles
        base = pick(256, 4096, 1536)
        for kernel, candidates in sweep:
            assert base in {tune_gemms._tiles(kernel, c, base) for c in candidates}, f"{kernel}: the layer's tiles"
        for kernel, candidates in sweep:
            for cand in candidates:
                names = [lc.name for lc in launches(cfg, tune_gemms._tiles(kernel, cand, base), 512)]
                assert kernel in names, (precision, kernel, cand)


def test_run_refuses_a_selection_that_matches_no_launch():
    from tutorials.megamoe import MegaMoE

    layer = MegaMoE.__new__(MegaMoE)  # run() picks launches before it touches a GPU
    layer.cfg, layer._launches, layer.impl = MoEConfig(128, 128, 2, 1, 64, 1, "bf16"), {}, "launches"
    layer.tiles = dataclasses.replace(choose_tiles(64, 128, 128), gemm_programs=4)
    expected = r"only=\('moe_l2',\)\): no launch .* has that name or step; it has .*moe_gemms"
    with pytest.raises(ValueError, match=expected):
        layer.run({}, 64, only=("moe_l2",))


def test_an_output_at_a_misaligned_address_is_refused_with_the_rule():
    from tutorials.megamoe import MegaMoE

    layer = MegaMoE.__new__(MegaMoE)  # the argument checks of a call need no GPU and no workspace
    layer.closed, layer.cfg, layer.impl = False, MoEConfig(128, 128, 2, 1, 64, 1, "bf16"), "launches"
    x, logits = torch.zeros(64, 128, dtype=torch.bfloat16), torch.zeros(64, 2)
    out = torch.empty(64 * 128 + 1, dtype=torch.bfloat16)[1:].view(64, 128)  # 2 bytes past an aligned start
    with pytest.raises(ValueError, match="contiguous bf16 tensor of shape \\(64, 128\\) at a 16-byte aligned address"):
        layer(x, logits, out=out)


@pytest.mark.parametrize(("m", "n", "k", "stages"), [(128, 256, 320, 4), (128, 256, 384, 4), (64, 256, 256, 4),
                                                    (128, 128, 256, 4), (128, 256, 256, 1),
                                                    (128, 256, 256, 5)])  # fmt: skip
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16])
def test_gluon_scaled_tiles_refuse_what_they_do_not_tile(m, n, k, stages, dtype):
    """``gluon_scaled_tiles.scaled_tiles_call`` names the rule (whole 128 x 256 tiles, whole K steps: two
    fp8 K blocks of 128 or four bf16 ones of 64, two to four stages) before any descriptor or launch, rather
    than reading past K, waiting on a stage no load fills (a consumer holds one stage while it waits for the
    next) or failing to allocate more shared memory than an SM has."""
    from tutorials.megamoe.gluon_scaled_tiles import scaled_tiles_call

    a, b = torch.empty(m, k, dtype=dtype), torch.empty(n, k, dtype=dtype)
    a_s, b_s, c = torch.empty(m, k // 128), torch.empty(n // 128, k // 128), torch.empty(m, n, dtype=torch.bfloat16)
    if dtype == torch.bfloat16:
        a_s = b_s = None
    rule = rf"M % 128, N % 256 and K % 256 to be 0 and 2 to 4 stages \(got M={m}, N={n}, K={k}, stages={stages}\)"
    with pytest.raises(ValueError, match=rule):
        scaled_tiles_call(a, b, a_s, b_s, c, programs=132, stages=stages)


@pytest.mark.parametrize(("dtype", "with_scales", "got"), [
    (torch.float16, False, "torch.float16 and torch.float16, scales None"),
    (torch.float8_e4m3fn, False, "torch.float8_e4m3fn and torch.float8_e4m3fn, scales None"),
    (torch.bfloat16, True, "torch.bfloat16 and torch.bfloat16, scales given"),
])  # fmt: skip
def test_gluon_scaled_tiles_refuse_operands_they_do_not_take(dtype, with_scales, got):
    """``scaled_tiles_call`` takes e4m3 operands with their scales or bf16 ones without; any other dtype, or
    scales missing or extra, is refused naming both forms and what it got, rather than compiled as the
    other kind of tile."""
    from tutorials.megamoe.gluon_scaled_tiles import scaled_tiles_call

    a, b, c = torch.empty(128, 256, dtype=dtype), torch.empty(256, 256, dtype=dtype), torch.empty(128, 256)
    a_s, b_s = (torch.empty(128, 2), torch.empty(2, 2)) if with_scales else (None, None)
    with pytest.raises(ValueError, match=re.escape("a and b both float8_e4m3fn with a_scale and b_scale, or both "
                                                   f"bfloat16 without (None); got {got}")):  # fmt: skip
        scaled_tiles_call(a, b, a_s, b_s, c, programs=132)


def test_gemm_phase_counts_the_rows_of_each_m_tile():
    """``gemm_phase.landed_counts``: the rows of each 128-pair M tile of a layout (the persistent kernel's
    LANDED counts once every row has landed): experts' full tiles 128, their last tiles the rest, an expert
    without pairs no tile, 0 past the call's M tiles."""
    from tutorials.megamoe.gemm_phase import landed_counts

    layout = torch.tensor([5, 300, 0, 128, 1, 0, 300, 300, 428, 0, 3, 3, 4, 0, 0, 0, 0], dtype=torch.int32)
    assert landed_counts(layout, 4, 7, 128).tolist() == [128, 128, 44, 128, 1, 0, 0]


def test_gemm_run_refuses_an_unknown_region_and_one_region_of_the_triton_kernel():
    """``gemm_phase.gemm_run`` names its regions for a region it does not have, and refuses L1 or L2 alone for
    the Triton kernel (whose L1 counts it does not restore), before it touches the layer."""
    from tutorials.megamoe.config import MoEConfig
    from tutorials.megamoe.gemm_phase import gemm_run
    from tutorials.megamoe.persistent_launch import choose_persistent

    cfg = MoEConfig(4096, 1536, 16, 8, 512, 1, "fp8")
    with pytest.raises(ValueError, match="region 'l3' is not one of .*'gemm', 'l1', 'l2', 'call'"):
        gemm_run(None, choose_persistent(cfg), None, None, None, "l3")
    for region in ("l1", "l2"):
        with pytest.raises(ValueError, match=f"region '{region}' needs the Gluon kernel's L1 counts .gluon=1."):
            gemm_run(None, choose_persistent(cfg, gluon=False), None, None, None, region)


@pytest.mark.parametrize(("knob", "cause"), [("gluon", "use NAME=VALUE"), ("block_mm=128", "use NAME=VALUE")])
def test_check_refuses_a_knob_it_cannot_set_before_starting(knob, cause):
    """``megamoe --knob`` names the rule and the fields before the runtime starts (no PE is started for a typo)."""
    from tutorials.megamoe import megamoe

    with pytest.raises(SystemExit, match=f"--knob '{knob}': {cause} with NAME one of .*'gluon'"):
        megamoe.main(["--impl", "persistent", "--knob", knob])


@pytest.mark.parametrize(("argv", "rule"), [
    (["--stages", "5"], "needs .*2 to 4 stages .*num_stages=5"),
    (["--stages", "1"], "needs .*2 to 4 stages .*num_stages=1"),
    (["--shape", "256", "256", "4", "4", "33"], "needs block_m=128.*got block_m=64"),  # few pairs: 64-row tiles
])  # fmt: skip
def test_gemm_phase_refuses_what_the_gluon_kernel_cannot_run_before_starting(argv, rule):
    """``gemm_phase`` names the Gluon kernel's rule (``persistent_launch``'s) before the runtime starts, not after
    a whole layer was built and run."""
    from tutorials.megamoe import gemm_phase

    with pytest.raises(SystemExit, match=f"gemm_phase --shape .* --stages .*: PersistentConfig.gluon {rule}"):
        gemm_phase.main(argv)
