"""Tutorial 3 (MegaMoE), ``impl="persistent"`` on CPU: the schedule, the launch, the knobs, and the one
kernel in Triton's interpreter at world 1, 2 and 4 (subprocesses, emulated nvshmem_ptr), bf16 and fp8.

The interpreter runs a launch's programs one after another and the ranks one after another, so a
call that finishes there with 1 and 3 programs shows that no wait depends on work handed out after it
(the progress argument of ``persistent.py``); races and the raw CUDA need the GPU suite.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, child_env

from tutorials.megamoe import persistent
from tutorials.megamoe.config import STATE_BUFFERS, MoEConfig
from tutorials.megamoe.megamoe import meta_bindings
from tutorials.megamoe.persistent_launch import (
    PersistentConfig,
    choose_persistent,
    gluon_misfit,
    knob_overrides,
    persistent_buffers,
    persistent_config,
    persistent_launch,
    persistent_weights,
    schedule,
)

PRODUCTION = MoEConfig(4096, 1536, 16, 8, 512, world=1)


def _interpreter(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tutorials.megamoe.persistent_sim", *args], cwd=ROOT,
                          env=child_env(), capture_output=True, text=True, timeout=900)  # fmt: skip


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_persistent_kernel_in_interpreter(precision):
    """World 1, 2, 4; random, skewed and top-1 all-to-one-expert routing; calls back to back with token
    counts that change between calls and ranks, one rank (world 1: one call) with no tokens; both
    simulated configs (every operand through TMA and through pointers) and grids of 1 and 3 programs."""
    proc = _interpreter("--precision", precision, "--world", "1", "2", "4")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(precision)]
    assert len(lines) == 9 and all(ln.endswith(": PASS") for ln in lines), proc.stdout
    for world in (1, 2, 4):
        mine = [ln for ln in lines if f"world={world} " in ln]
        assert {"config=0", "config=1"} <= {w for ln in mine for w in ln.split()}, mine
        assert any("programs=3" in ln for ln in mine), mine


def test_a_wait_on_work_nothing_will_do_is_reported_by_the_interpreter():
    """Run rank 0's whole call before rank 1 starts: its layout waits for rank 1's plan, which the
    interpreter can never run first. The simulated wait must say so, naming both PEs and the flag,
    instead of passing or spinning."""
    code = (
        "from tutorials.megamoe import persistent_sim as ps\n"
        "from tutorials.megamoe.persistent import Schedule\n"
        "Schedule.slices = lambda self: [(0, self.starts()['N_ITEMS'])]\n"
        "ps.check(2, 'bf16', 'random', ps.SIM_CONFIGS['bf16'][0], 1)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=child_env(), capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode != 0
    assert re.search(r"WouldWaitForever.*PE 0 waits for PE 1: plan flag .* is 0, expected >= 1", proc.stderr), (
        proc.stderr[-2000:]
    )


def test_schedule_regions_and_slices():
    pc = choose_persistent(PRODUCTION)
    sch = schedule(PRODUCTION, pc)
    starts = sch.starts()
    # bf16 at world 1 neither copies nor quantizes x: one route item per 32 tokens
    assert sch.route == 512 // 32 and sch.plan == 1 and sch.layout == 1 and sch.reduce == 0
    assert sch.m_tiles == 4096 // 128 + 16
    assert sch.l1 == sch.m_tiles * 1536 // 128 and sch.l2 == sch.m_tiles * 4096 // 256
    # the Gluon kernel's combine items: a chunk of 1024 columns (a token's 8 pairs in 16 KB) of 4 tokens each
    assert pc.gluon and (sch.combine_chunks, sch.combine) == (4, 4 * 512 // 4)
    assert sch.sched_words == persistent.SCHED_FIXED + 1 + 16 + 1 + 3 * sch.m_tiles
    triton_kernel = schedule(PRODUCTION, choose_persistent(PRODUCTION, gluon=False))
    assert (triton_kernel.combine_chunks, triton_kernel.combine) == (1, 512 // 4)
    order = ["PLAN_START", "LAYOUT_START", "DISPATCH_START", "L1_START", "L2_START", "COMBINE_START", "REDUCE_START",
             "N_ITEMS"]  # fmt: skip
    assert list(starts) == order and [starts[k] for k in order] == sorted(starts.values())
    assert starts["N_ITEMS"] == starts["REDUCE_START"]  # world 1: no reduce
    assert sch.slices() == [(0, starts["LAYOUT_START"]), (starts["LAYOUT_START"], starts["N_ITEMS"])]
    two = schedule(dataclasses.replace(PRODUCTION, num_experts=32, world=2), pc)
    s2 = two.starts()
    assert two.route == 16 * 4 and two.reduce == 512 // pc.reduce_rows  # world > 1 copies x's columns
    assert two.slices() == [(0, s2["LAYOUT_START"]), (s2["LAYOUT_START"], s2["REDUCE_START"]),
                            (s2["REDUCE_START"], s2["N_ITEMS"])]  # fmt: skip
    assert two.sched_words == persistent.SCHED_FIXED + 2 + two.experts + 2 + 3 * two.m_tiles
    fp8 = schedule(dataclasses.replace(PRODUCTION, precision="fp8"), choose_persistent(
        dataclasses.replace(PRODUCTION, precision="fp8")))  # fmt: skip
    assert fp8.route == 512 // 16 * 4  # fp8 quantizes x's columns at world 1 too (16-token items)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.parametrize("world", [1, 2])
def test_launch_binds_every_kernel_parameter_in_order(precision, world):
    cfg = dataclasses.replace(PRODUCTION, num_experts=16 * world, world=world, precision=precision)
    pc = choose_persistent(cfg, gluon=False)  # the Triton kernel (the Gluon one: the next test)
    launch = persistent_launch(cfg, pc, 66)
    assert launch.grid == (66,) and launch.num_warps == pc.num_warps and launch.num_stages == pc.num_stages
    assert launch.name == ("moe_persistent_fp8" if precision == "fp8" else "moe_persistent")
    runtime = [p for p, _ in launch.params]
    kernel_args = persistent.moe_persistent.arg_names
    assert runtime == kernel_args[: len(runtime)], "the layer passes the parameters by position"
    assert set(kernel_args) == set(runtime) | set(launch.constexprs)
    scales = ("xs_sym", "recv_xs", "a_scale", "hs_ptr", "w1s_ptr", "w2s_ptr")
    if precision == "bf16":
        assert all(launch.constexprs[n] is None for n in scales)
    else:
        assert set(scales) <= set(runtime)
    sym, local = persistent_buffers(cfg, pc)
    buffers = {n for n, _, _ in [*cfg.symmetric_buffers(), *cfg.local_buffers(), *sym, *local]}
    weights = {"w1q", "w1s", "w2q", "w2s"} if precision == "fp8" else {"w1", "w2"}
    per_call = {"logits", "x", "y", "T", "me", "wait_ms", "item_begin", "item_end", "w1_desc", "w2_desc", "h_desc",
                "a_desc"}
    assert {k for _, k in launch.params} - {None} <= buffers | weights | per_call
    keys = dict(launch.params)
    assert keys["trace_ptr"] is None and launch.constexprs["TRACE"] is False, "untraced: trace_ptr is None"
    assert keys["staging"] == ("y" if world == 1 else "staging")
    assert keys["a_src"] == ("recv_x" if world > 1 else "x_sym" if precision == "fp8" else "x")
    assert (launch.constexprs["PULL"], launch.constexprs["PUSH"]) == (world > 1, world > 1)
    bound = meta_bindings(cfg, pc)  # what the layer binds, on meta tensors
    w1, w2 = (bound[keys[p]] for p in ("w1_op", "w2_op"))
    if precision == "fp8":  # a box per scale block; A rows in pair order through TMA too
        assert (w1.block_shape, w2.block_shape) == ([128, 128], [128, 128]) and w1.base.dtype == torch.float8_e4m3fn
        assert bound[keys["a_op"]].block_shape == [pc.block_m, 128] and keys["a_sorted"] == "a_sorted"
    else:  # bf16 default: L1's weights through TMA, L2's through pointers (faster each way on the H200)
        assert w1.block_shape == [64, 128] and keys["w2_op"] == "w2" and w2.shape == (16, 1536, 4096)
    assert bound["item_begin"] == 0 and bound["item_end"] == schedule(cfg, pc).starts()["N_ITEMS"]
    assert {"sched", "call_epoch", "plan_flag", "comb_flag"} <= set(STATE_BUFFERS)


def test_fp8_weights_put_each_gate_block_next_to_its_up_block():
    from tutorials.megamoe.quant import expert_weights

    cfg = MoEConfig(256, 384, 2, 1, 8, precision="fp8")
    g = torch.Generator().manual_seed(0)
    w1 = torch.randn(2, 256, 768, generator=g).bfloat16()
    plain = expert_weights(w1, torch.randn(2, 384, 256, generator=g).bfloat16(), "fp8")
    woven = persistent_weights(cfg, plain, choose_persistent(cfg))
    assert woven["w1q"].shape == plain["w1q"].shape == (2, 768, 256) and woven["w1q"].is_contiguous()
    q, q_plain = woven["w1q"].view(torch.uint8), plain["w1q"].view(torch.uint8)
    for e in range(2):
        for j in range(3):  # block j: its 128 gate rows, then its 128 up rows
            assert torch.equal(q[e, 256 * j : 256 * j + 128], q_plain[e, 128 * j : 128 * j + 128])
            assert torch.equal(q[e, 256 * j + 128 : 256 * j + 256], q_plain[e, 384 + 128 * j : 384 + 128 * j + 128])
            assert torch.equal(woven["w1s"][e, j, 0], plain["w1s"][e, j])
            assert torch.equal(woven["w1s"][e, j, 1], plain["w1s"][e, 3 + j])
    bf16_cfg = MoEConfig(256, 384, 2, 1, 8)
    assert woven["w2q"] is plain["w2q"] and persistent_weights(bf16_cfg, plain, choose_persistent(bf16_cfg)) is plain


def test_bf16_weights_for_the_gluon_kernel_are_k_major_with_gate_and_up_blocks_interleaved():
    """The Gluon kernel's bf16 weights (its default where it runs): w1 [E, 2I, H] with each 128 gate rows of
    w1^T followed by the same 128 up rows (as fp8's w1q), w2 [E, H, I] = w2^T, both contiguous copies; the
    Triton kernel's are the layer's own."""
    cfg = MoEConfig(256, 512, 2, 1, 256)  # 128 pairs per expert: 128-row tiles, where the Gluon kernel runs
    g = torch.Generator().manual_seed(1)
    plain = {"w1": torch.randn(2, 256, 1024, generator=g).bfloat16(),
             "w2": torch.randn(2, 512, 256, generator=g).bfloat16()}  # fmt: skip
    assert persistent_weights(cfg, plain, choose_persistent(cfg, gluon=False)) is plain
    woven = persistent_weights(cfg, plain, choose_persistent(cfg))
    assert woven["w1"].shape == (2, 1024, 256) and woven["w1"].is_contiguous() and woven["w2"].is_contiguous()
    for e in range(2):
        for j in range(4):  # block j: its 128 gate rows, then its 128 up rows
            assert torch.equal(woven["w1"][e, 256 * j : 256 * j + 128], plain["w1"][e, :, 128 * j : 128 * j + 128].T)
            assert torch.equal(woven["w1"][e, 256 * j + 128 : 256 * j + 256],
                               plain["w1"][e, :, 512 + 128 * j : 512 + 128 * j + 128].T)  # fmt: skip
        assert torch.equal(woven["w2"][e], plain["w2"][e].T)


@pytest.mark.parametrize("precision", ["fp8", "bf16"])
def test_gluon_launch_binds_the_buffer_table_in_order(precision):
    """The Gluon kernel's launch passes its parameters in the kernel's order (the layer passes them by
    position); ``buffer_table`` holds the address of each buffer of ``BUFFER_TABLE``, every one a buffer or
    weight of the layer, in that order (bf16: 0 for the fp8 scales it does not have); with ``tma_a`` (dispatch
    copies the pair rows) its descriptors are Gluon's, boxes of 128 rows of 128 bytes (e4m3 [128, 128], bf16
    [128, 64]), and fp8 also binds its dispatch items' descriptors (x_sym's token rows, a_sorted's pair rows,
    as [rows, H / 256, 256]); bf16 only the pairs' (its kernel makes the one of x, which changes from call to
    call). By default (L1 gathers the token rows) the table's a_sorted entry is 0 too."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from tutorials.megamoe.gluon_persistent import BUFFER_TABLE, moe_persistent_gluon
    from tutorials.megamoe.persistent_launch import call_extras

    fp8 = precision == "fp8"
    cfg = MoEConfig(256, 256, 2, 1, 256, precision=precision)  # 128 pairs per expert: 128-row tiles
    gathered = choose_persistent(cfg, gluon=True)
    assert not gathered.tma_a
    pc = dataclasses.replace(gathered, tma_a=True)
    launch = persistent_launch(cfg, pc, 66)
    assert (launch.name, launch.grid, launch.num_warps) == ("moe_persistent_gluon" + ("" if fp8 else "_bf16"), (66,), 4)
    runtime = [p for p, _ in launch.params]
    assert runtime == moe_persistent_gluon.arg_names[: len(runtime)]
    assert set(moe_persistent_gluon.arg_names) == set(runtime) | set(launch.constexprs)
    assert launch.constexprs["STAGES"] == pc.num_stages == 4 and launch.constexprs["FP8"] is fp8
    sym, local = persistent_buffers(cfg, pc)
    specs = [*cfg.symmetric_buffers(), *cfg.local_buffers(), *sym, *local]
    buffers = {n: torch.zeros(shape, dtype=getattr(torch, d)) for n, shape, d in specs}
    if fp8:
        plain = {"w1q": torch.zeros(2, 512, 256, dtype=torch.float8_e4m3fn), "w1s": torch.zeros(2, 4, 2),
                 "w2q": torch.zeros(2, 256, 256, dtype=torch.float8_e4m3fn), "w2s": torch.zeros(2, 2, 2)}  # fmt: skip
    else:
        plain = {"w1": torch.zeros(2, 256, 512, dtype=torch.bfloat16),
                 "w2": torch.zeros(2, 256, 256, dtype=torch.bfloat16)}  # fmt: skip
    weights = persistent_weights(cfg, plain, pc)
    extras = call_extras(cfg, pc, {**buffers, **weights})
    everything = {**buffers, **weights}
    table = extras["buffer_table"].tolist()
    assert table == [everything[key].data_ptr() if key in everything else 0 for key in BUFFER_TABLE]
    absent = {key for key, address in zip(BUFFER_TABLE, table, strict=True) if address == 0}
    assert absent == (set() if fp8 else {"x_scale", "h_scale", "w1s", "w2s"})
    sym, local = persistent_buffers(cfg, gathered)
    gathered_buffers = {n: torch.zeros(shape, dtype=getattr(torch, d))
                        for n, shape, d in [*cfg.symmetric_buffers(), *cfg.local_buffers(), *sym, *local]}  # fmt: skip
    table = call_extras(cfg, gathered, {**gathered_buffers, **weights})["buffer_table"].tolist()
    assert {key for key, address in zip(BUFFER_TABLE, table, strict=True) if address == 0} == absent | {"a_sorted"}
    for key in ("a_desc", "h_desc", "w1_desc", "w2_desc"):
        assert isinstance(extras[key], TensorDescriptor)
        assert list(extras[key].block_shape) == [128, 128 if fp8 else 64]
        assert extras[key].base.dtype == (torch.float8_e4m3fn if fp8 else torch.bfloat16)
    # y_pair for the combine items: [pairs, H / 256, 256], a box one pair's 256 columns (top-1: 16 KB a pair)
    assert list(extras["y_desc"].block_shape) == [1, 1, 256] and extras["y_desc"].base.dtype == torch.bfloat16
    assert extras["y_desc"].base.data_ptr() == everything["y_pair"].data_ptr()
    params = dict(launch.params)
    assert params["pair_desc"] == "pair_desc" and list(extras["pair_desc"].block_shape) == [1, 1, 256]
    assert extras["pair_desc"].base.data_ptr() == everything["a_sorted"].data_ptr()
    if fp8:  # a dispatch item's token rows (4 of 256 columns), one pair's row a box
        assert params["x_desc"] == "x_desc" and list(extras["x_desc"].block_shape) == [pc.dispatch_rows, 1, 256]
        assert pc.dispatch_rows == 4 and extras["x_desc"].base.data_ptr() == everything["x_sym"].data_ptr()
    else:
        assert params["x_desc"] is None and "x_desc" not in extras
    assert meta_bindings(cfg, pc)["buffer_table"].shape == (len(BUFFER_TABLE),)
    shifted = {**everything, "y_pair": torch.zeros(1 + everything["y_pair"].numel(), dtype=torch.bfloat16)[1:]}
    with pytest.raises(ValueError, match="buffer 'y_pair' at 0x[0-9a-f]+ is not 16-byte aligned"):
        call_extras(cfg, pc, shifted)


@pytest.mark.parametrize(("cfg", "knobs", "rule"), [
    (MoEConfig(4096, 1536, 32, 8, 512, world=2, precision="fp8"), {}, "runs at world 1 .*got world 2"),
    (dataclasses.replace(PRODUCTION, world=2, num_experts=32), {}, "runs at world 1 .*got world 2"),
    (PRODUCTION, {"block_k": 128}, "needs .*block_k=64.*got .*block_k=128"),
    (PRODUCTION, {"half_tail": True}, "no half_tail .*half_tail=True"),
    (PRODUCTION, {"tma_w2": False}, "tma_w2=False"),
    (MoEConfig(384, 1536, 16, 8, 512, precision="fp8"), {"block_n2": 128}, "hidden 384"),
    (dataclasses.replace(PRODUCTION, precision="fp8"), {"num_stages": 5}, "2 to 4 stages .*num_stages=5"),
    (dataclasses.replace(PRODUCTION, precision="fp8"), {"num_stages": 1}, "2 to 4 stages .*num_stages=1"),
    (dataclasses.replace(PRODUCTION, precision="fp8"), {"block_m": 64}, "needs block_m=128.*got block_m=64"),
    (dataclasses.replace(PRODUCTION, precision="fp8"), {"route_tokens": 1}, "route_tokens must be >= 2, got 1"),
    (dataclasses.replace(PRODUCTION, precision="fp8"), {"tma_a": True, "dispatch_rows": 8},
     "16 KB stage buffer.*got 8 \\* 4096"),
    (PRODUCTION, {"tma_a": True, "dispatch_rows": 4}, "16 KB stage buffer.*got 4 \\* 8192"),
    (MoEConfig(7168, 2048, 16, 8, 512, precision="fp8"), {"tma_a": True, "dispatch_rows": 4},
     "rounded up to a power of two.*got 4 \\* 8192: lower dispatch_rows"),
    (MoEConfig(4096, 1536, 64, 33, 512, precision="fp8"), {}, "top_k must be <= 32, got 33"),
])  # fmt: skip
def test_gluon_knob_refuses_what_its_kernel_cannot_run(cfg, knobs, rule):
    """``gluon`` names its rule (world 1, H and I multiples of 256; 128-row tiles, 256-column L2 tiles, K steps
    of 128 bytes, the weights through TMA, whole tiles split between the consumers, 2 to 4 stages of
    48 KB) before anything is built, rather than failing in the compiler's shared-memory allocation or
    reading past a K loop."""
    pc = dataclasses.replace(choose_persistent(cfg, gluon=True), gluon=True, **{"block_m": 128, **knobs})
    with pytest.raises(ValueError, match=rule):
        persistent_launch(cfg, pc, 132)


def test_knobs_that_cannot_run_are_refused_naming_the_knob():
    fp8 = dataclasses.replace(PRODUCTION, precision="fp8")
    triton_fp8 = choose_persistent(fp8, gluon=False)
    with pytest.raises(ValueError, match="block_m=128: the Triton kernel's fp8 sums.*set fast_accum=1"):
        persistent_launch(fp8, dataclasses.replace(triton_fp8, block_m=128), 132)
    persistent_launch(fp8, dataclasses.replace(triton_fp8, block_m=128, fast_accum=True), 132)
    with pytest.raises(ValueError, match="fp8 needs block_k = block_n1 = 128"):
        persistent_launch(fp8, PersistentConfig(block_k=64), 132)
    for block_n2 in (64, 512):
        with pytest.raises(ValueError, match=f"fp8 needs block_n2 128 or 256 .*got {block_n2}"):
            persistent_launch(fp8, PersistentConfig(block_n2=block_n2), 132)
    with pytest.raises(ValueError, match=r"block_n2=256 does not divide 4224"):
        persistent_launch(dataclasses.replace(PRODUCTION, hidden=4224), PersistentConfig(block_k=64), 132)
    with pytest.raises(ValueError, match="dispatch_rows=6 must be a power of two"):
        persistent_launch(PRODUCTION, PersistentConfig(block_k=64, dispatch_rows=6), 132)
    with pytest.raises(ValueError, match="block_m=8: tl.dot needs at least 16 rows"):
        persistent_launch(PRODUCTION, PersistentConfig(block_m=8, block_k=64), 132)
    with pytest.raises(ValueError, match="programs=0 must be >= 1"):
        persistent_launch(PRODUCTION, choose_persistent(PRODUCTION), 0)
    with pytest.raises(ValueError, match="half_tail needs bf16, tma_h=False"):
        persistent_launch(fp8, dataclasses.replace(choose_persistent(fp8), half_tail=True), 132)
    triton_bf16 = choose_persistent(PRODUCTION, gluon=False)
    with pytest.raises(ValueError, match="half_tail needs bf16, tma_h=False"):
        persistent_launch(PRODUCTION, dataclasses.replace(triton_bf16, half_tail=True, tma_h=True),
                          132)  # fmt: skip
    assert persistent_launch(PRODUCTION, dataclasses.replace(triton_bf16, half_tail=True),
                             132).constexprs["HALF_TAIL"] is True  # fmt: skip
    with_tma_a = dataclasses.replace(triton_bf16, half_tail=True, tma_a=True)
    assert persistent_launch(PRODUCTION, with_tma_a, 132).constexprs["TMA_A"] is True  # half tiles gather


def test_default_knobs():
    big = choose_persistent(PRODUCTION, gluon=False)
    assert (big.block_m, big.block_n1, big.block_n2, big.block_k, big.num_warps) == (128, 128, 256, 64, 8)
    assert (big.tma_w1, big.tma_w2, big.tma_h, big.half_tail) == (True, False, False, True)
    small = choose_persistent(MoEConfig(256, 192, 4, 4, 33))
    assert (small.block_m, small.block_n1, small.block_n2, small.num_warps) == (64, 64, 128, 4)
    persistent_launch(MoEConfig(256, 192, 4, 4, 33), small, 8)  # fits the shape
    fp8_cfg = dataclasses.replace(PRODUCTION, precision="fp8")
    fp8 = choose_persistent(fp8_cfg, gluon=False)
    # the Triton kernel promotes its fp8 sums per K block, which leaves registers for 64-row tiles only
    assert (fp8.block_m, fp8.block_n1, fp8.block_n2, fp8.block_k, fp8.num_stages) == (64, 128, 256, 128, 4)
    assert fp8.route_tokens == 16 and fp8.tma_a and not fp8.fast_accum
    assert (fp8.gluon, fp8.dispatch_rows, fp8.combine_rows) == (False, 8, 4)
    fast = choose_persistent(fp8_cfg, gluon=False, fast_accum=True)  # sums in the tensor cores: 128 rows
    assert fast == dataclasses.replace(fp8, block_m=128, fast_accum=True)
    assert persistent_config(fp8_cfg, {"gluon": False, "fast_accum": True}) == fast
    assert [persistent_launch(fp8_cfg, pc, 132).constexprs["PROMOTE"] for pc in (fp8, fast)] == [True, False]
    # by default the Gluon kernel where it runs (world 1), with 128-row tiles, smaller dispatch and combine items
    # (L1's loader gathers the token rows: dispatch copies none)
    fp8_gluon = choose_persistent(fp8_cfg)
    assert fp8_gluon == dataclasses.replace(fp8, gluon=True, block_m=128, tma_a=False, dispatch_rows=4, combine_rows=4)
    assert not choose_persistent(dataclasses.replace(fp8_cfg, num_experts=32, world=2)).gluon
    # bf16 too
    bf16_gluon = dataclasses.replace(big, gluon=True, num_stages=4, tma_a=False, tma_w2=True, half_tail=False,
                                     dispatch_rows=4, combine_rows=4)  # fmt: skip
    assert choose_persistent(PRODUCTION) == bf16_gluon == persistent_config(PRODUCTION, {})
    assert persistent_config(PRODUCTION, {"gluon": False}) == big
    assert persistent_config(PRODUCTION, {"half_tail": True}) == big, "knobs the Gluon kernel cannot run"
    assert persistent_config(fp8_cfg, {}) == fp8_gluon
    assert persistent_config(fp8_cfg, {"gluon": False}) == fp8
    # knobs the Gluon kernel cannot run pick the Triton kernel, unless gluon is asked for
    assert persistent_config(fp8_cfg, {"block_m": 64}) == dataclasses.replace(fp8, block_m=64)
    with pytest.raises(ValueError, match="gluon needs block_m=128"):
        persistent_launch(fp8_cfg, persistent_config(fp8_cfg, {"gluon": True, "block_m": 64}), 132)
    fp8_small = choose_persistent(MoEConfig(256, 256, 4, 4, 33, precision="fp8"))
    assert (fp8_small.block_m, fp8_small.num_stages, fp8_small.tma_a) == (64, 3, False)
    # the Gluon kernel promotes its fp8 sums per K block unless fast_accum, which reaches its launch
    assert not fp8_gluon.fast_accum
    assert persistent_launch(fp8_cfg, fp8_gluon, 132).constexprs["FAST_ACCUM"] is False
    fast = persistent_config(fp8_cfg, knob_overrides(["fast_accum=1"]))
    assert fast == dataclasses.replace(fp8_gluon, fast_accum=True)
    assert persistent_launch(fp8_cfg, fast, 132).constexprs["FAST_ACCUM"] is True


@pytest.mark.parametrize("hidden", [7168, 8192])
@pytest.mark.parametrize(("precision", "dispatch_rows"), [("fp8", 2), ("bf16", 1)])
def test_gluon_dispatch_items_fit_a_stage_at_large_hidden(precision, dispatch_rows, hidden):
    """With ``tma_a`` (dispatch copies the rows through a stage), at H 7168 and 8192 a token's row is a TMA
    box of 32 chunks of 256 columns (H 7168's 28 padded to a power of two), so four fp8 tokens' rows (two
    bf16) exceed a stage's 16 KB A buffer: such dispatch items are refused, fewer tokens run. By default
    (no row copied) dispatch items take 4 tokens at any H."""
    cfg = MoEConfig(hidden, 2048, 16, 8, 512, precision=precision)
    assert choose_persistent(cfg).dispatch_rows == 4 and gluon_misfit(cfg, choose_persistent(cfg)) is None
    pc = dataclasses.replace(choose_persistent(cfg), tma_a=True, dispatch_rows=dispatch_rows)
    assert pc.gluon and gluon_misfit(cfg, pc) is None
    assert "lower dispatch_rows" in gluon_misfit(cfg, dataclasses.replace(pc, dispatch_rows=2 * dispatch_rows))


@pytest.mark.parametrize(("precision", "hidden", "dispatch_rows"),
                         [("fp8", 4096, 4), ("fp8", 7168, 2), ("bf16", 4096, 2), ("bf16", 8192, 1)])  # fmt: skip
def test_tma_a_knob_fits_the_gluon_dispatch_items_to_a_stage(precision, hidden, dispatch_rows):
    """``--knob tma_a=1`` alone keeps the Gluon kernel: its dispatch items take the most of the default's 4 tokens
    whose rows fit a stage's 16 KB A buffer, not the Triton kernel's config. Tokens set with it are kept (and
    the Gluon kernel is left where they do not fit)."""
    cfg = MoEConfig(hidden, 2048, 16, 8, 512, precision=precision)
    for knobs in ({"tma_a": True}, {"tma_a": True, "gluon": True}):
        pc = persistent_config(cfg, knobs)
        assert pc.gluon and pc.tma_a and pc.dispatch_rows == dispatch_rows and gluon_misfit(cfg, pc) is None
    assert persistent_config(cfg, {"tma_a": True, "dispatch_rows": 1}).dispatch_rows == 1
    if dispatch_rows < 4:
        assert not persistent_config(cfg, {"tma_a": True, "dispatch_rows": 4}).gluon
    assert persistent_config(cfg, {}).dispatch_rows == 4, "the gather copies no row: no stage to fit"


def test_gluon_dispatch_boxes_pad_a_row_to_a_power_of_two_chunks():
    """H 7168's rows are 28 chunks of 256 columns, not a TMA box shape: the dispatch boxes take 32 chunks over
    the same [rows, 28, 256] view (TMA fills the four past the row with zeros and stores none of them)."""
    from tutorials.megamoe.megamoe import meta_bindings

    cfg = MoEConfig(7168, 2048, 16, 8, 512, precision="fp8")
    bound = meta_bindings(cfg, dataclasses.replace(choose_persistent(cfg), tma_a=True, dispatch_rows=2))
    for name, rows in (("pair_desc", 1), ("x_desc", 2)):
        assert list(bound[name].shape[1:]) == [28, 256]
        assert list(bound[name].block_shape) == [rows, 32, 256]


@pytest.mark.parametrize("precision", ["fp8", "bf16"])
@pytest.mark.parametrize("hidden", [1024, 2048, 3072, 4096, 5120, 6144, 7168, 8192])
def test_default_knobs_build_their_launch_and_descriptors(precision, hidden):
    """Whichever kernel ``choose_persistent`` picks for a hidden size, its launch and every descriptor the
    layer binds build on meta tensors (no GPU): a rule of TMA's (power-of-two box dimensions, boxes within
    a stage) that the defaults break fails here, not at a layer's construction on the GPU."""
    from tutorials.megamoe.megamoe import meta_bindings

    cfg = MoEConfig(hidden, 2048, 16, 8, 512, precision=precision)
    assert choose_persistent(cfg).gluon  # every hidden size a multiple of 256
    for pc in (choose_persistent(cfg), choose_persistent(cfg, gluon=False)):
        launch = persistent_launch(cfg, pc, 132)
        assert {key for _, key in launch.params} - {None} <= set(meta_bindings(cfg, pc))


def test_wait_names_are_the_device_table():
    """The kernel passes a wait's index into moe-device.cu's name table; the report prints that name."""
    source = (ROOT / "tutorials" / "megamoe" / "moe-device.cu").read_text()
    table = source[source.index("moe_wait_names[] = {") : source.index("};", source.index("moe_wait_names[] = {"))]
    assert tuple(re.findall(r'"([^"]+)"', table)) == persistent.WAIT_NAMES


def test_layer_argument_checks_of_the_persistent_impl():
    from tutorials.megamoe import MegaMoE

    with pytest.raises(ValueError, match=r"impl='one'; use one of \('launches', 'persistent'\)"):
        MegaMoE(128, 128, 2, 1, 8, torch.empty(0), torch.empty(0), impl="one")  # before anything needs a GPU
    layer = MegaMoE.__new__(MegaMoE)
    layer.closed, layer.cfg, layer.impl = False, MoEConfig(128, 128, 2, 1, 64, 1, "bf16"), "persistent"
    enqueued = []
    layer._bindings = lambda x, logits, y: {"T": x.shape[0]}
    layer.run = lambda bindings, tokens: enqueued.append(tokens)
    y = layer(torch.zeros(0, 128, dtype=torch.bfloat16), torch.zeros(0, 2))  # a rank without tokens
    assert enqueued == [0] and y.shape == (0, 128)
    layer.impl = "launches"
    with pytest.raises(ValueError, match=r"with 1 <= T <= 64"):
        layer(torch.zeros(0, 128, dtype=torch.bfloat16), torch.zeros(0, 2))
    runner = MegaMoE.__new__(MegaMoE)
    runner.impl = "persistent"
    with pytest.raises(ValueError, match="impl='persistent' runs a call as one launch, not by steps"):
        runner.run({}, 64, only=("moe_l2",))


def test_trace_knob_adds_the_trace_buffer_and_binds_it():
    pc = dataclasses.replace(choose_persistent(PRODUCTION), trace=True)
    launch = persistent_launch(PRODUCTION, pc, 132)
    _, local = persistent_buffers(PRODUCTION, pc)
    n_items = schedule(PRODUCTION, pc).starts()["N_ITEMS"]
    assert ("trace", (n_items, len(persistent.TRACE_FIELDS)), "int64") in local
    assert dict(launch.params)["trace_ptr"] == "trace" and launch.constexprs["TRACE"] is True
    assert "trace" not in {n for n, _, _ in persistent_buffers(PRODUCTION, choose_persistent(PRODUCTION))[1]}


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_tma_a_knob_adds_the_sorted_rows_and_binds_their_descriptor(precision):
    """tma_a: a [pair capacity, H] buffer of the operand dtype, its pointer for dispatch and a descriptor of
    [block_m, K step] boxes for L1; without it both parameters are None."""
    cfg = dataclasses.replace(PRODUCTION, precision=precision)
    pc = dataclasses.replace(choose_persistent(cfg, gluon=False), tma_a=True)
    _, local = persistent_buffers(cfg, pc)
    assert ("a_sorted", (cfg.pair_capacity, cfg.hidden), cfg.operand_dtype) in local
    keys = dict(persistent_launch(cfg, pc, 132).params)
    assert (keys["a_sorted"], keys["a_op"]) == ("a_sorted", "a_desc")
    desc = meta_bindings(cfg, pc)["a_desc"]
    assert desc.block_shape == [pc.block_m, pc.block_k] and tuple(desc.shape) == (cfg.pair_capacity, cfg.hidden)
    plain = dict(persistent_launch(cfg, dataclasses.replace(pc, tma_a=False), 132).params)
    assert (plain["a_sorted"], plain["a_op"]) == (None, None)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_gluon_kernel_without_tma_a_gathers_l1s_rows_and_copies_none(precision):
    """The Gluon kernel with tma_a off (its default): L1's loader gathers the token rows itself (GATHER_A), so the layer
    has no a_sorted and binds no descriptor of it or of dispatch's boxes, and a dispatch item, which then only
    places its pairs, may take more tokens than a stage holds rows of."""
    cfg = dataclasses.replace(PRODUCTION, precision=precision)
    pc = dataclasses.replace(choose_persistent(cfg), tma_a=False, dispatch_rows=16)
    launch = persistent_launch(cfg, pc, 132)
    assert launch.name.startswith("moe_persistent_gluon")
    assert launch.constexprs["GATHER_A"] is True and launch.constexprs["DISPATCH_ROWS"] == 16
    params = dict(launch.params)
    assert (params["a_desc"], params["x_desc"], params["pair_desc"]) == (None, None, None)
    assert "a_sorted" not in {name for name, _, _ in persistent_buffers(cfg, pc)[1]}
    assert not {"a_desc", "x_desc", "pair_desc"} & set(meta_bindings(cfg, pc))
    copied = dataclasses.replace(choose_persistent(cfg), tma_a=True, dispatch_rows=2)
    assert persistent_launch(cfg, copied, 132).constexprs["GATHER_A"] is False


def test_trace_summary_per_region():
    """Two route items, the plan, the layout, and two L1 tiles (one waited 3 us); the rest never ran."""
    import numpy as np

    from tutorials.megamoe.trace_persistent import format_summary, item_times, summarize

    cfg = dataclasses.replace(PRODUCTION, max_tokens=64)
    sch = schedule(cfg, choose_persistent(cfg))
    s = sch.starts()
    trace = np.zeros((s["N_ITEMS"], len(persistent.TRACE_FIELDS)), dtype=np.int64)
    base = 1_000_000
    trace[0] = [base, 0, base + 2000, 0]
    trace[1] = [base + 500, 0, base + 1500, 1]
    trace[s["PLAN_START"]] = [base + 2000, 0, base + 4000, 0]
    trace[s["LAYOUT_START"]] = [base + 4000, 0, base + 5000, 1]
    trace[s["L1_START"]] = [base + 5000, base + 8000, base + 10000, 0]
    trace[s["L1_START"] + 1] = [base + 5000, base + 5000, base + 9000, 2]
    out = summarize(trace, sch)
    assert out["span_us"] == 10.0 and out["sms"] == 3
    assert list(out["regions"]) == ["route", "plan", "layout", "l1"]
    route, l1 = out["regions"]["route"], out["regions"]["l1"]
    assert (route["items"], route["first_start_us"], route["last_end_us"], route["busy_us"]) == (2, 0.0, 2.0, 3.0)
    assert (l1["items"], l1["busy_us"], l1["wait_us"], l1["max_item_us"]) == (2, 9.0, 3.0, 5.0)
    assert out["busy_fraction"] == pytest.approx((3 + 2 + 1 + 9) / 30)
    assert len(format_summary(out)) == 2 + 4
    with pytest.raises(ValueError, match="no item"):
        summarize(np.zeros_like(trace), sch)
    # the same call with L1's first item on a full M tile and its second on a 2-pair tail
    rows = {"l1": np.zeros(s["L2_START"] - s["L1_START"], dtype=np.int64)}
    rows["l1"][:2] = [128, 2]
    l1 = summarize(trace, sch, rows, 128)["regions"]["l1"]
    assert (l1["tail_items"], l1["tail_mean_item_us"], l1["tail_mean_rows"], l1["full_mean_item_us"]) == (1, 4.0, 2, 5)
    assert (l1["tail_mean_wait_us"], l1["full_mean_wait_us"]) == (0.0, 3.0)
    assert (l1["half_items"], l1["half_mean_item_us"], l1["half_mean_rows"]) == (1, 4.0, 2)
    rows["l1"][1] = 100  # a tail of more than half a tile
    l1 = summarize(trace, sch, rows, 128)["regions"]["l1"]
    assert (l1["tail_items"], l1["tail_mean_rows"], l1["half_items"]) == (1, 100, 0)
    rows["l1"][:2] = [128, 0]  # the second item past the call's M tiles: neither a tail nor a full tile
    l1 = summarize(trace, sch, rows, 128)["regions"]["l1"]
    assert (l1["tail_items"], l1["full_mean_item_us"], l1["idle_items"]) == (0, 5, 1)
    assert len(format_summary(summarize(trace, sch, rows, 128))) == 2 + 4 + 2
    times = item_times(trace, sch)  # the same rows item by item, from the call's first item
    assert list(times) == ["route", "plan", "layout", "l1"]
    assert times["route"] == [[0.0, 0.0, 2.0, 0], [0.5, 0.0, 1.5, 1]]
    assert times["l1"] == [[5.0, 8.0, 10.0, 0], [5.0, 5.0, 9.0, 2]]
    with pytest.raises(ValueError, match=r"item_times: no item of the trace ran \(was the layer built with trace=True"):
        item_times(np.zeros_like(trace), sch)


def test_trace_summary_sets_apart_the_gemm_items_started_after_dispatch():
    """Dispatch ends at 6 us: the L1 item started at 5 us (waiting 3) is not settled, the one at 7 us is."""
    import numpy as np

    from tutorials.megamoe.trace_persistent import format_summary, summarize

    cfg = dataclasses.replace(PRODUCTION, max_tokens=64)
    s = schedule(cfg, choose_persistent(cfg)).starts()
    trace = np.zeros((s["N_ITEMS"], len(persistent.TRACE_FIELDS)), dtype=np.int64)
    base = 1_000_000
    trace[s["DISPATCH_START"]] = [base, 0, base + 6000, 0]
    trace[s["L1_START"]] = [base + 5000, base + 8000, base + 10000, 1]
    trace[s["L1_START"] + 1] = [base + 7000, base + 7500, base + 9000, 2]
    trace[s["L2_START"]] = [base + 10000, base + 10000, base + 12000, 1]
    out = summarize(trace, schedule(cfg, choose_persistent(cfg)))
    l1, l2 = out["regions"]["l1"], out["regions"]["l2"]
    assert (l1["settled_items"], l1["settled_mean_item_us"], l1["settled_mean_wait_us"]) == (1, 2.0, 0.5)
    assert (l2["settled_items"], l2["settled_mean_item_us"]) == (1, 2.0)
    assert "settled_items" not in out["regions"]["dispatch"]
    assert "  1 started after the last dispatch item: 2.00 us each (0.50 waiting)" in format_summary(out)
    trace[s["DISPATCH_START"]] = 0  # no dispatch item ran: nothing to set apart
    assert "settled_items" not in summarize(trace, schedule(cfg, choose_persistent(cfg)))["regions"]["l1"]


def test_trace_summary_reports_each_column_chunk_l2_end_and_combine_span():
    """Two M tiles, so 32 L2 items, 8 a chunk (4 of the 16 N tiles each): chunk c's last L2 item ends at
    10 + c us and its combine items run from 20 + c to 21 + c us, chunk 3's not at all."""
    import numpy as np

    from tutorials.megamoe.trace_persistent import format_summary, gemm_item_rows, summarize

    pc = choose_persistent(PRODUCTION)
    sch = schedule(PRODUCTION, pc)
    s = sch.starts()
    layout = np.zeros(sch.layout_words, dtype=np.int32)
    layout[1:3] = [128, 60]
    rows = gemm_item_rows(layout, sch, pc.block_m, pc.group_m)
    trace = np.zeros((s["N_ITEMS"], len(persistent.TRACE_FIELDS)), dtype=np.int64)
    base = 1_000_000
    trace[0] = [base, 0, base + 1000, 0]
    blocks = sch.combine // 4
    for c in range(4):
        first = s["L2_START"] + 8 * c
        trace[first : first + 8] = [base + 2000, base + 2000, base + 9000 + 1000 * c, 1]
        trace[first + 3, 2] = base + 10_000 + 1000 * c
        if c < 3:
            trace[s["COMBINE_START"] + c * blocks : s["COMBINE_START"] + (c + 1) * blocks] = [
                base + 20_000 + 1000 * c, 0, base + 20_500 + 1000 * c, 2]  # fmt: skip
            trace[s["COMBINE_START"] + c * blocks + 1, 2] = base + 21_000 + 1000 * c
    out = summarize(trace, sch, rows, pc.block_m)
    assert out["chunks"] == [{"chunk": c, "l2_done_us": 10.0 + c, "combine_first_us": 20.0 + c,
                              "combine_last_us": 21.0 + c} for c in range(3)] + [
        {"chunk": 3, "l2_done_us": 13.0, "combine_first_us": 0.0, "combine_last_us": 0.0}]  # fmt: skip
    line = "combine chunk 1: its L2 tiles done at 11.0 us, its combine items from 21.0 to 22.0 us"
    assert line in format_summary(out)
    assert "chunks" not in summarize(trace, sch)  # without the layout's rows the chunks' L2 items are unknown


def test_gemm_items_rows_follow_the_layout_and_the_tile_order():
    """Experts of 130, 0, 5 and 128 pairs make M tiles of 128, 2, 5 and 128 pairs; L1's items (12 N tiles)
    walk them in groups of 8 M tiles, M fastest inside: pairs 128, 2, 5, 128, then the next N tile."""
    import numpy as np

    from tutorials.megamoe.trace_persistent import gemm_item_rows

    pc = choose_persistent(PRODUCTION)
    sch = schedule(PRODUCTION, pc)
    assert (pc.block_m, pc.group_m, sch.l1 // sch.m_tiles, sch.l2 // sch.m_tiles) == (128, 8, 12, 16)
    layout = np.zeros(sch.layout_words, dtype=np.int32)
    layout[1:5] = [130, 0, 5, 128]
    rows = gemm_item_rows(layout, sch, 128, 8)  # 12 N tiles in L1, 16 in L2
    assert rows["l1"][:8].tolist() == [128, 2, 5, 128] * 2
    assert rows["l1"][4 * 12 - 1] == 128 and not rows["l1"][4 * 12 :].any()
    assert rows["l2"][: 4 * 16].tolist() == [128, 2, 5, 128] * 16 and not rows["l2"][4 * 16 :].any()
    assert len(rows["l2"]) == sch.starts()["COMBINE_START"] - sch.starts()["L2_START"]
    layout[1:11] = [128] * 9 + [3]  # 10 M tiles: a group of 8, then one of 2 (tiles 8 and 9) taking turns
    groups = gemm_item_rows(layout, sch, 128, 8)
    assert (groups["l1"][: 8 * 12] == 128).all() and groups["l1"][8 * 12 : 10 * 12].tolist() == [128, 3] * 12
    # L2 a combine chunk (4 of its 16 N tiles) at a time, each chunk in the same groups
    assert sch.combine_chunks == 4
    for chunk in range(4):
        items = groups["l2"][chunk * 10 * 4 : (chunk + 1) * 10 * 4]
        assert (items[: 8 * 4] == 128).all() and items[8 * 4 :].tolist() == [128, 3] * 4
    assert not groups["l2"][10 * 16 :].any()


# (M tiles, N tiles, GROUP_M, N tiles per chunk): the production L2 (4 chunks of 4), a last group of 2, fewer
# M tiles than a group, one chunk (the plain order), one M tile
ORDER_CASES = [(44, 16, 8, 4), (10, 16, 8, 4), (3, 12, 8, 2), (7, 6, 3, 6), (1, 4, 8, 2)]


def test_kernel_tile_orders_match_the_trace_in_interpreter(tmp_path):
    """``kernels._chunked_tile_of`` (the Gluon kernel's L2 order) and ``_tile_of`` in Triton's interpreter give
    ``trace_persistent.tile_order``'s tiles: every (M tile, N tile) once, chunk by chunk."""
    import json

    import numpy as np

    from tutorials.megamoe.trace_persistent import tile_order

    script = tmp_path / "order.py"
    script.write_text(f"""
import json
import torch, triton, triton.language as tl
from tutorials.megamoe import kernels
@triton.jit
def order(out_ptr, m_tiles, N_TILES: tl.constexpr, CHUNK: tl.constexpr, GROUP_M: tl.constexpr):
    i = tl.program_id(0)
    if CHUNK == N_TILES:
        pid_m, pid_n = kernels._tile_of(i, m_tiles, N_TILES, GROUP_M)
    else:
        pid_m, pid_n = kernels._chunked_tile_of(i, m_tiles, CHUNK, GROUP_M)
    tl.store(out_ptr + 2 * i, pid_m)
    tl.store(out_ptr + 2 * i + 1, pid_n)
res = []
for m, n, g, c in {json.dumps(ORDER_CASES)}:
    out = torch.full((2 * m * n,), -1, dtype=torch.int32)
    order[(m * n,)](out, m, N_TILES=n, CHUNK=c, GROUP_M=g)
    res.append(out.view(m * n, 2).tolist())
print(json.dumps(res))
""")
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=child_env(TRITON_INTERPRET="1"),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for (m, n, g, c), tiles in zip(ORDER_CASES, got, strict=True):
        pid_m, pid_n = tile_order(m, n, g, c)
        assert tiles == np.stack([pid_m, pid_n], axis=1).tolist(), (m, n, g, c)
        assert sorted(map(tuple, tiles)) == [(i, j) for i in range(m) for j in range(n)], (m, n, g, c)
        assert [j // c for _, j in tiles] == [i // (m * c) for i in range(m * n)], "a chunk at a time"


def test_state_check_lets_only_a_peers_plan_flag_run_one_call_ahead():
    from tutorials.megamoe.megamoe import persistent_state_errors

    cfg = dataclasses.replace(PRODUCTION, world=2, num_experts=32)

    def state(plan, comb=(2, 2)):
        return {"sched": torch.zeros(4, dtype=torch.int32), "call_epoch": torch.tensor([2]),
                "plan_flag": torch.tensor(plan), "comb_flag": torch.tensor(comb)}  # fmt: skip

    assert persistent_state_errors(cfg, 0, state([2, 2]), 2) == []
    assert persistent_state_errors(cfg, 0, state([2, 3]), 2) == []  # the peer planned its next call
    assert persistent_state_errors(cfg, 0, state([3, 2]), 2)  # this rank's own flag cannot be ahead
    assert persistent_state_errors(cfg, 0, state([2, 4]), 2)
    assert persistent_state_errors(cfg, 0, state([2, 1]), 2)
    assert persistent_state_errors(cfg, 0, state([2, 2], comb=(2, 3)), 2)


def test_knob_overrides_parse_the_sweeps_strings_and_refuse_others_naming_the_fields():
    from tutorials.megamoe.trace_persistent import _config

    assert knob_overrides(["num_stages=4", "half_tail=1", "tma_w2=false"]) == {
        "num_stages": 4, "half_tail": True, "tma_w2": False}  # fmt: skip
    with pytest.raises(ValueError, match=r"'stages=4': use NAME=VALUE with NAME one of \[.*'num_stages'"):
        knob_overrides(["stages=4"])
    with pytest.raises(ValueError, match="'num_stages': use NAME=VALUE"):
        knob_overrides(["num_stages"])
    assert _config("block_k=128 num_stages=2") == {"block_k": 128, "num_stages": 2}
    with pytest.raises(SystemExit, match="--config 'trace=0': trace is always on here"):
        _config("trace=0")
    with pytest.raises(SystemExit, match="--config 'bogus=1': 'bogus=1': use NAME=VALUE"):
        _config("bogus=1")


def test_benchmark_variants_name_their_layers_and_refuse_what_they_cannot_build():
    """``benchmark --variant LABEL:NAME=VALUE,...``: a persistent layer ``persistent_LABEL`` per string with
    those knobs (none is a variant with --knob's alone), its rows and error named after it; malformed
    strings, repeated labels, the twin's label and variants without the persistent impl are refused naming
    the string."""
    from tutorials.megamoe.benchmark import _err_name, _row_prefix, variants

    got = variants(["gather:tma_a=0,dispatch_rows=16", "plain:"], ["persistent"])
    assert got == {"persistent_gather": {"tma_a": False, "dispatch_rows": 16}, "persistent_plain": {}}
    assert (_row_prefix("persistent_gather"), _err_name("persistent_gather")) == (
        "persistent_gather", "megamoe_persistent_gather")  # fmt: skip
    assert (_row_prefix("persistent"), _err_name("persistent")) == ("persistent", "megamoe_persistent")
    refused = [("tma_a=0", "use LABEL:NAME=VALUE"), ("Big:tma_a=0", "use LABEL"),
               ("triton:tma_a=0", "other than 'triton'"), ("g:stages=4", "'stages=4': use NAME=VALUE")]  # fmt: skip
    for text, why in refused:
        with pytest.raises(SystemExit, match=f"--variant '{text}': .*{why}"):
            variants([text], ["persistent"])
    with pytest.raises(SystemExit, match="label 'g' given twice"):
        variants(["g:tma_a=0", "g:tma_a=1"], ["persistent"])
    with pytest.raises(SystemExit, match="add persistent to --impls"):
        variants(["g:tma_a=0"], ["launches"])


def test_benchmark_rounds_take_turns_and_keep_each_rows_median():
    """``--rounds N``: every row measured N times for rep_ms / N, the rows in turn, each row the median of
    its rounds; one round is one measurement of rep_ms per row."""
    from tutorials.megamoe.benchmark import median_of_rounds

    calls = []
    times = {"a": iter([3.0, 1.0, 2.0]), "b": iter([5.0, 9.0, 7.0])}

    def measure(fn, rep_ms):
        calls.append((fn(), rep_ms))
        return next(times[calls[-1][0]])

    rows = median_of_rounds({"a": lambda: "a", "b": lambda: "b"}, 300, 3, measure)
    assert rows == {"a": 2.0, "b": 7.0}
    assert calls == [("a", 100), ("b", 100)] * 3
    calls.clear()
    times = {"a": iter([4.0]), "b": iter([6.0])}
    assert median_of_rounds({"a": lambda: "a", "b": lambda: "b"}, 300, 1, measure) == {"a": 4.0, "b": 6.0}
    assert calls == [("a", 300), ("b", 300)]



def test_benchmark_refuses_bad_rounds_and_variants_before_it_starts():
    """The command line's own mistakes end the benchmark with their message before NVSHMEM or a GPU is
    touched: no rounds, and a variant without the persistent impl."""
    from tutorials.megamoe.benchmark import main

    with pytest.raises(SystemExit, match=r"--rounds 0: use 1 or more"):
        main(["--impls", "persistent", "--rounds", "0"])
    with pytest.raises(SystemExit, match="--variant adds persistent layers: add persistent to --impls"):
        main(["--variant", "rows4:combine_rows=4"])


def test_fp8_gemms_settle_each_k_step_from_triton_3_7():
    """From Triton 3.7 on ptxas serializes every wgmma when one is left in flight across a loop's back edge,
    so the fp8 GEMMs wait for each K step's last wgmma there; before, the overlap is kept."""
    from triton_raw_ext.triton_version import parse_version, serializes_wgmma_in_flight_across_loops

    versions = ("3.6.0", "3.7.1", "3.9.0+git1a2b3c", "3.10.0", "4.0")
    assert [serializes_wgmma_in_flight_across_loops(parse_version(v)) for v in versions] == [
        False, True, True, True, True]  # fmt: skip
    fp8 = dataclasses.replace(PRODUCTION, precision="fp8")
    launch = persistent_launch(fp8, choose_persistent(fp8, gluon=False), 132)
    assert launch.constexprs["SETTLE_WGMMA"] is serializes_wgmma_in_flight_across_loops()


def test_power_draw_summary_drops_the_ramps_and_names_the_clock_event_reasons():
    """``power_draw.summarize_samples`` keeps the middle three fifths of nvidia-smi's samples (the clock ramps at
    both ends of a replay), reports the SM clock's median and minimum, the power's median and maximum and the
    limit, and names each bit of the clock event reasons seen (an unknown bit in hex)."""
    from tutorials.megamoe.power_draw import summarize_samples

    ramp = ["1980, 150.0, 700.00, 0x0000000000000001"] * 2
    held = [f"{mhz}, {watts}, 700.00, 0x0000000000000004" for mhz, watts in
            ((1710, 688.9), (1695, 698.3), (1740, 690.2), (1425, 689.0), (1755, 691.5), (1710, 689.4))]  # fmt: skip
    summary = summarize_samples([*ramp, *held, *ramp])
    assert summary["samples"] == 6
    assert (summary["sm_mhz_median"], summary["sm_mhz_min"]) == (1710.0, 1425.0)
    assert (summary["power_w_median"], summary["power_w_max"], summary["power_limit_w"]) == (689.8, 698.3, 700.0)
    assert summary["event_reasons"] == ["sw_power_cap"]
    odd = [f"1500, 600.0, 700.00, {bits}" for bits in ("0x5", "0x5", "0x1004", "0x4", "0x4")]
    assert summarize_samples(odd)["event_reasons"] == ["gpu_idle", "sw_power_cap", "0x1000"]
    with pytest.raises(ValueError, match="4 samples of nvidia-smi; replay for longer"):
        summarize_samples(held[:4])


def test_power_draw_without_nvidia_smi_says_what_to_install(monkeypatch):
    """Without nvidia-smi on PATH ``power_draw`` stops before it starts the runtime, naming the tool and where
    it comes from."""
    from tutorials.megamoe import power_draw

    monkeypatch.setattr(power_draw.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit, match="samples the GPU with nvidia-smi: put it on PATH"):
        power_draw.main([])


def test_power_draw_refuses_a_malformed_variant_before_it_samples():
    """A ``--variant`` not of the form LABEL:NAME=VALUE stops ``power_draw`` before it looks for nvidia-smi or
    starts the runtime, with benchmark's message."""
    from tutorials.megamoe import power_draw

    with pytest.raises(SystemExit, match="use LABEL:NAME=VALUE"):
        power_draw.main(["--variant", "cols"])
    with pytest.raises(SystemExit, match="no_such_knob"):
        power_draw.main(["--variant", "cols:no_such_knob=1"])
