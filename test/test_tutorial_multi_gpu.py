"""Multi-GPU runs on CPU: the benchmarks' goal verdicts, and the ``multi_gpu`` suite of scripts.gpu.suite.

The suite runs here with fake ``nvidia-smi`` and ``python3`` on PATH (``--no-setup``): the fakes write
the JSON the tutorials would write, built with the tutorials' own goal functions, so the test covers
the suite's world selection, step bookkeeping, exit status and the summary that reads the goals back.
What the GPU runs measure is not tested here.
"""

from __future__ import annotations

import json

import pytest
from conftest import fake_gpu_host, run_suite

from scripts.gpu import suites
from tutorials.allgather_gemm import benchmark as t2_benchmark
from tutorials.allreduce_rmsnorm import benchmark as t1_benchmark
from tutorials.megamoe import benchmark as t3_benchmark

T1_SHAPES = [(t, h) for h in (2048, 8192) for t in (1, 16, 128, 1024, 4096)]  # what the suite passes
T2_SHAPES = [(1024, 1024, 1024), (4096, 1024, 8192), (4096, 8192, 8192), (8192, 8192, 8192), (4096, 8192, 28672)]


def _t1_rows(fused_us: float, nccl_us: dict[tuple[str, int], float]) -> list[dict]:
    """Benchmark rows of tutorial 1 (only the fields the goal reads): fused at ``fused_us`` everywhere,
    nccl+compile at ``nccl_us[(mode, T)]``."""
    rows = []
    for mode in ("graph", "eager"):
        for t, h in T1_SHAPES:
            rows.append({"impl": "fused", "mode": mode, "T": t, "H": h, "p50_us": fused_us})
            rows.append({"impl": "nccl+compile", "mode": mode, "T": t, "H": h, "p50_us": nccl_us[(mode, t)]})
            rows.append({"impl": "flashinfer", "mode": mode, "T": t, "H": h, "skipped": "not importable"})
    return rows


def test_t1_goal_needs_1_3x_up_to_128_tokens_and_parity_above():
    bench = t1_benchmark
    nccl = {(m, t): (13.0 if t <= 128 else 10.0) for m in ("graph", "eager") for t in (1, 16, 128, 1024, 4096)}
    goal = bench.goal_vs_nccl(_t1_rows(10.0, nccl))
    assert goal["met"] == {"eager": True, "graph": True} and len(goal["cases"]) == 2 * len(T1_SHAPES)
    nccl[("eager", 128)] = 12.9  # 1.29x at T=128
    nccl[("graph", 4096)] = 9.9  # slower than NCCL at T=4096
    goal = bench.goal_vs_nccl(_t1_rows(10.0, nccl))
    assert goal["met"] == {"eager": False, "graph": False}
    missed = {(c["mode"], c["T"]) for c in goal["cases"] if not c["met"]}
    assert missed == {("eager", 128), ("graph", 4096)}
    world1 = [r for r in _t1_rows(10.0, nccl) if r["impl"] != "nccl+compile"]
    assert bench.goal_vs_nccl(world1) is None


def _t2_rows(ag: float, alone: float, torch_ms: float | None, torch_name: str = "torch_allgather_matmul") -> list[dict]:
    rows = [{"variant": "ag_gemm", "p50": ag}, {"variant": "gemm_alone", "p50": alone},
            {"variant": "all_gather_alone", "p50": 0.1}]  # fmt: skip
    if torch_ms is not None:
        rows.append({"variant": torch_name, "p50": torch_ms})
    for r in rows:
        r["speed_vs_torch"] = torch_ms / r["p50"] if torch_ms and "all_gather" not in r["variant"] else None
    return rows


def test_t2_goal_against_gemm_alone_at_world_above_one():
    bench = t2_benchmark
    met = bench.goal(_t2_rows(1.04, 1.0, 1.5), world=4)
    assert met["met"] and met["ratio_vs_gemm_alone"] == pytest.approx(1.04)
    assert met["speed_vs_torch"] == pytest.approx(1.5 / 1.04)
    assert not bench.goal(_t2_rows(1.06, 1.0, None), world=8)["met"]  # no NCCL baseline: still judged
    cfgs = [{"variant": "ag_gemm[cfg0]", "p50": 1.2, "speed_vs_torch": None},
            {"variant": "gemm_alone[cfg0]", "p50": 1.0, "speed_vs_torch": None},
            {"variant": "ag_gemm[cfg1]", "p50": 1.1, "speed_vs_torch": None},
            {"variant": "gemm_alone[cfg1]", "p50": 1.08, "speed_vs_torch": None}]  # fmt: skip
    best = bench.goal(cfgs, world=2)  # the fastest AG-GEMM against the GEMM of its own config
    assert best["best_variant"] == "ag_gemm[cfg1]" and best["ratio_vs_gemm_alone"] == pytest.approx(1.1 / 1.08)
    world1 = bench.goal(_t2_rows(0.744, 0.70, 0.715, "torch_matmul"), world=1)
    assert world1["met"] and world1["ratio_best"] == pytest.approx(0.715 / 0.744)
    assert bench.goal(_t2_rows(1.0, 1.0, None), world=1) is None


def test_t2_each_push_path_against_the_perfect_overlap_of_nccl_all_gather_and_gemm():
    rows = [{"variant": "ag_gemm/sm", "p50": 1.05}, {"variant": "ag_gemm/copy_engine", "p50": 1.30},
            {"variant": "gemm_alone", "p50": 0.8}, {"variant": "nccl_all_gather", "p50": 1.0},
            {"variant": "all_gather_alone", "p50": 0.7}]  # fmt: skip
    for r in rows:
        r["speed_vs_torch"] = None
    verdict = t2_benchmark.goal(rows, world=8)
    assert verdict["vs_overlap_bound"] == {"ag_gemm/sm": pytest.approx(1.05), "ag_gemm/copy_engine": pytest.approx(1.3)}
    assert not verdict["overlap_met"] and not verdict["met"]  # 1.05 / 0.8 > 1.05x the GEMM alone
    rows[1]["p50"], rows[3]["p50"] = 1.09, 0.5  # the GEMM alone is now the larger of the two
    verdict = t2_benchmark.goal(rows, world=8)
    assert verdict["vs_overlap_bound"]["ag_gemm/copy_engine"] == pytest.approx(1.09 / 0.8)
    assert not verdict["overlap_met"]
    assert "vs_overlap_bound" not in t2_benchmark.goal(rows[:3], world=2)  # shared GPU: no NCCL row


def test_t3_benchmark_helpers():
    rows = ("megamoe_eager", "persistent_eager", "persistent_graph", "torch_ep_grouped", "torch_reference_bf16",
            "dense_gemms")  # fmt: skip
    assert all(t3_benchmark.counts_flops(row) for row in rows) and not t3_benchmark.counts_flops("route_alone")


def test_t3_report_names_both_ceilings_and_a_row_that_could_not_run(tmp_path, capsys):
    """The printed rows carry each row's share of the dense and of the block-scaled dense ceiling; a ceiling
    torch cannot run here is printed with torch's reason, and the JSON keeps it."""
    import argparse

    result = {
        "shape": {**_t3_shape(1), "experts": 16}, "rel_errs_vs_fp32": {"megamoe_persistent": 4e-3},
        "times_ms": {"persistent_graph_ms": 0.22, "dense_gemms_ms": 0.118},
        "tflops_per_gpu": {}, "of_dense_ceiling": {"persistent_graph": 0.536},
        "of_dense_block_scaled": {"persistent_graph": 0.8},
        "unavailable_rows": {"dense_gemms_block_scaled": "scaled_gemm needs CUDA 12.9"},
        "roofline": {"roofline_ms": 0.12}, "speedup_of": "persistent_graph", "baseline": "torch_reference_bf16",
        "speedup_vs_baseline": 9.0, "errors": [],
    }  # fmt: skip
    t3_benchmark._report(result, "random", argparse.Namespace(precision="fp8", out=tmp_path))
    printed = capsys.readouterr().out
    assert "persistent_graph_ms" in printed and " 53.6% of dense,  80.0% of block-scaled dense" in printed
    assert "dense_gemms_block_scaled: not timed (scaled_gemm needs CUDA 12.9)" in printed
    (written,) = tmp_path.glob("tutorial3_megamoe_E16_w1_random_fp8_*.json")
    assert json.loads(written.read_text())["unavailable_rows"] == result["unavailable_rows"]


def _t3_shape(world: int, skewed: bool = False) -> dict:
    return {"hidden": 4096, "intermediate": 1536, "local_experts": 16, "top_k": 8, "tokens": 512, "world": world,
            "skewed": skewed}  # fmt: skip


def test_t3_graph_time_over_the_world_1_time_of_the_same_per_rank_load(tmp_path):
    def world1(name: str, precision: str, skewed: bool, persistent_ms: float) -> None:
        doc = {"shape": _t3_shape(1, skewed), "precision": precision, "timing": {"method": "events"},
               "times_ms": {"megamoe_graph_ms": 0.36, "persistent_graph_ms": persistent_ms}}  # fmt: skip
        (tmp_path / f"tutorial3_megamoe_E16_w1_{name}.json").write_text(json.dumps(doc))

    world1("random_bf16", "bf16", False, 0.30)
    world1("random_fp8", "fp8", False, 0.20)
    world1("skewed_bf16", "bf16", True, 0.50)
    result = {"shape": _t3_shape(4), "precision": "bf16"}
    v = t3_benchmark.vs_world1(result, {"megamoe_graph_ms": 0.396, "persistent_graph_ms": 0.36,
                                        "torch_ep_grouped_ms": 2.0}, tmp_path)  # fmt: skip
    assert v["world1_json"].endswith("random_bf16.json") and set(v["rows"]) == {"megamoe_graph", "persistent_graph"}
    assert v["rows"]["megamoe_graph"]["ratio"] == pytest.approx(1.1) and v["rows"]["persistent_graph"]["ratio"] == (
        pytest.approx(1.2))  # fmt: skip
    assert v["met"] is False  # 1.2 > 1.15
    fp8 = t3_benchmark.vs_world1({**result, "precision": "fp8"}, {"persistent_graph_ms": 0.22}, tmp_path)
    assert fp8["met"] is True and fp8["rows"]["persistent_graph"]["world1_us"] == pytest.approx(200.0)
    other = {"shape": {**_t3_shape(4), "tokens": 256}, "precision": "bf16"}
    assert t3_benchmark.vs_world1(other, {"persistent_graph_ms": 0.1}, tmp_path)["met"] is None


FAKE_PYTHON = """#!{real}
# Fake python3 for the suite test: tutorial steps write planned JSON and exit with planned codes.
import json, os, pathlib, sys
args = sys.argv[1:]
if args[:2] == ["-m", "tutorials.common.run_metadata"]:  # the runner's versions: the real interpreter
    os.execv({real!r}, [{real!r}, *args])
if args[:1] == ["-c"] or args[1].endswith(".aot"):
    print("fake", " ".join(args)[:80])
    sys.exit(0)
if args[:2] == ["-m", "torch.distributed.run"]:
    assert args[2] == "--standalone" and args[4] == "-m", args
    world, module, opts = int(args[3].split("=")[1]), args[5], args[6:]
else:
    world, module, opts = 1, args[1], args[2:]
key = module.removeprefix("tutorials.")
precision = opts[opts.index("--precision") + 1] if "--precision" in opts else "bf16"
plans = json.loads(pathlib.Path(os.environ["FAKE_PLAN"]).read_text())
plan = plans.get(f"{{key}}@{{world}}") or plans[key]
for flag in ("--json", "--out"):
    if flag in opts:
        target = pathlib.Path(opts[opts.index(flag) + 1])
        for name, doc in plan["files"].items():
            path = target if flag == "--json" else target / name.format(world=world, precision=precision)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc).replace("PRECISION", precision))
print(key, "world", world, "rc", plan["rc"], " ".join(opts))
if plan["rc"] == 2 and world > 1:  # torchrun's report when a worker exits 2 ("ran, a goal was not met"): it exits 1
    print("  exitcode  : 2 (pid: 100)\\n  exitcode  : -15 (pid: 101)")
    sys.exit(1)
sys.exit(plan["rc"])
"""


def _plan() -> dict:
    """What each fake tutorial step writes and returns: T2's benchmark misses one goal (rc 2), T3's
    fp8 ratio to world 1 misses its goal (rc 2), everything else passes."""
    t2 = t2_benchmark
    t2_files = {}
    for n, shape in enumerate(T2_SHAPES[:2]):
        rows = _t2_rows(1.0 + 0.06 * n, 1.0, 1.3)  # the second shape misses 1.05x
        rows.append({"variant": "nccl_all_gather", "p50": 0.5, "speed_vs_torch": None})
        t2_files[f"tutorial2_ag_gemm_w{{world}}_{'x'.join(map(str, shape))}.json"] = {
            "world": 2, "shape": list(shape), "rows": rows, "goal": t2.goal(rows, 2)}  # fmt: skip
    t3 = {"baseline": "torch_ep_grouped", "precision": "PRECISION", "errors": [],
          "times_ms": {"megamoe_graph_ms": 0.4, "persistent_graph_ms": 0.25, "torch_ep_grouped_ms": 1.0},
          "goal": {"row": "persistent_graph", "us": 250.0, "goal_us": 230.0, "met": False},
          "vs_world1": {"goal_ratio": 1.15, "met": False,
                        "rows": {"persistent_graph": {"us": 250.0, "world1_us": 200.0, "ratio": 1.25}}}}  # fmt: skip
    serving = {"ok": True, "rows": [{"block": "moe", "variant": "collectives eager", "us_per_call": 80.0,
                                     "rel_err": 0.0, "note": "cpu:gloo,cuda:nccl"}]}  # fmt: skip
    return {
        "allgather_gemm.allgather_gemm": {"rc": 0, "files": {"-": []}},
        "allgather_gemm.benchmark": {"rc": 2, "files": t2_files},
        "megamoe.benchmark@1": {"rc": 0, "files": {"tutorial3_megamoe_E16_w1_random_{precision}.json": {}}},
        "megamoe.benchmark": {"rc": 2, "files": {"tutorial3_megamoe_E16_w{world}_random_{precision}.json": t3}},
        "examples.serving_blocks": {"rc": 0, "files": {"-": serving}},
    }


def test_multi_gpu_suite_runs_worlds_that_fit_and_summarises(tmp_path):
    bin_dir = fake_gpu_host(tmp_path, gpus=2, fake_python=FAKE_PYTHON)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_plan()))
    out = tmp_path / "out"
    done = run_suite(["multi_gpu", "--out", str(out)], bin_dir, FAKE_PLAN=str(plan), WORLDS="2 4",
                     FAKE_MPS_LOG=str(tmp_path / "mps.log"))  # fmt: skip
    log = done.stdout + done.stderr
    assert done.returncode == 0, log  # goals missed are reported, not failed
    summary = json.loads((out / "multi_gpu.json").read_text())
    results = {s["step"]: s["result"] for s in summary["steps"]}
    assert results == {
        "toolchain": "PASS", "t3_bench_w1_bf16": "PASS", "t3_bench_w1_fp8": "PASS",
        "t3_bench_w2_bf16": "GOAL_MISSED", "t3_bench_w2_fp8": "GOAL_MISSED", "serving_w2": "PASS",
        "t2_correct_w2_sm": "PASS", "t2_correct_w2_copy_engine": "PASS", "t2_bench_w2": "GOAL_MISSED",
    }, log  # fmt: skip
    assert all((out / f"{name}.log").is_file() for name in results)
    assert summary["gpus"] == ["NVIDIA H200, 580.159.04"] * 2 and summary["env"]["NVSHMEM_DISABLE_NVLS"] == "1"
    assert not (tmp_path / "mps.log").exists()  # one PE per GPU: no MPS
    # the world-2 MegaMoE runs: 16 experts per rank, both impls, against the world-1 JSON of their precision
    assert ("megamoe.benchmark world 2 rc 2 --experts 32 --precision fp8 --world1 "
            f"{out}/t3_bench_w2_fp8/../t3_bench_w1_fp8 --impls launches persistent") in log
    assert "megamoe.benchmark world 1 rc 0 --precision bf16 --timing events --impls launches persistent" in log
    goals = summary["goals"]
    met = {g["shape"]: (g["met"], g["overlap_met"]) for g in goals if g.get("tutorial") == 2}
    assert met == {"1024x1024x1024": (True, True), "4096x1024x8192": (False, True)}
    t3 = sorted((g["precision"], g["graph_us"]["persistent_graph"]) for g in goals if g.get("tutorial") == 3)
    assert t3 == [("bf16", 250.0), ("fp8", 250.0)]
    assert ("T3 w2 fp8: persistent_graph 250.0 us, 4.00x faster than torch_ep_grouped (1000.0 us), 1.250x world 1 "
            "(200.0 us; goal <= 1.15)") in log  # fmt: skip
    assert "T3 w2 fp8: goal persistent_graph <= 230 us -> NOT MET" in log
    assert "T2 w2   4096x1024x8192: ag_gemm 1.060x max(NCCL all-gather, GEMM alone) (goal <= 1.1) -> MET" in log
    assert "serving w2 moe collectives eager: 80.0 us/call, rel err 0.0e+00 (cpu:gloo,cuda:nccl)" in log
    assert summary["worlds"] == [2] and summary["command"].startswith("python3 -m scripts.gpu.suite multi_gpu")


def test_multi_gpu_one_world_fits_the_budget_and_tutorial_1_is_asked_for(monkeypatch):
    monkeypatch.delenv("WORLDS", raising=False)
    monkeypatch.delenv("TUTORIALS", raising=False)
    suite = suites.multi_gpu(4)  # default: every GPU of the host, one world
    assert {s.name for s in suite.steps if "_w4" in s.name} and not any("_w2" in s.name for s in suite.steps)
    assert sum(s.timeout_s for s in suite.steps) <= 460 and suite.budget_s == 540  # 80 s left for the setup
    monkeypatch.setenv("TUTORIALS", "1")
    assert [s.name for s in suite.steps if s.name.startswith("t1")] == []
    assert [s.name for s in suites.multi_gpu(4).steps][1:] == ["t1_compile", "t1_correct_w4", "t1_correct_w4_puts_8",
                                                                "t1_bench_w4"]  # fmt: skip
    monkeypatch.setenv("TUTORIALS", "4")
    with pytest.raises(SystemExit, match="use some of 1 2 3 serving"):
        suites.multi_gpu(4)


def test_multi_gpu_suite_refuses_a_host_with_one_gpu(tmp_path):
    bin_dir = fake_gpu_host(tmp_path, gpus=1)
    done = run_suite(["multi_gpu", "--out", str(tmp_path / "out")], bin_dir, timeout=60)
    assert done.returncode == 1 and "run on a host with >= 2 GPUs or set WORLDS" in done.stderr
