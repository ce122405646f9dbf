"""The GPU suites: each a list of steps (name, command, time limit) and, for some, a report read back
from the JSON their steps wrote. ``suite.py`` runs them; nothing here starts a process.

A step's command names its own results folder as ``{dir}``; the runner replaces it. Suites are built
for the number of GPUs the host has (``gpus``) and read their parameters from the environment
(``WORLDS``, ``TUTORIALS``, ``T1_VARIANTS``, ``T2_CONFIGS``, ``VARIANTS``, ``W``, ``SHAPES``, ``T3_KNOBS``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

T1 = "tutorials.allreduce_rmsnorm"
T2 = "tutorials.allgather_gemm"
T3 = "tutorials.megamoe"
TORCHRUN = ("python3", "-m", "torch.distributed.run")
TOOLCHAIN = """
import torch, triton
from triton_raw_ext.toolchain import find_clang
print(torch.cuda.device_count(), torch.cuda.get_device_name(), torch.__version__, triton.__version__,
      find_clang().identity)"""


@dataclass(frozen=True)
class Step:
    """One command of a suite.

    ``timeout_s`` bounds it (less when the suite's budget has less left). ``shared_gpu``: its PEs
    share GPU 0, so it runs with MPS on and ``TRITON_RAW_SHARED_GPU=1``. ``benchmark``: exit status 2
    means "ran, a performance goal was missed" (GOAL_MISSED, reported, not failed). ``required``:
    whether a failure fails the suite.
    """

    name: str
    command: tuple[str, ...]
    timeout_s: int
    shared_gpu: bool = False
    benchmark: bool = False
    required: bool = True
    env: dict[str, str] = field(default_factory=dict)


Report = Callable[[Path, dict[str, dict]], tuple[list[str], dict]]


@dataclass(frozen=True)
class Suite:
    """Steps run in order within ``budget_s`` (setup included), with ``env`` for every step;
    ``report(out, results)`` returns lines to print after the table and what to add to the JSON."""

    name: str
    steps: list[Step]
    budget_s: int
    env: dict[str, str] = field(default_factory=dict)
    report: Report | None = None
    parts: list[tuple[Suite, int]] = field(default_factory=list)  # a suite of suites: (suite, its cap in s)


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _torchrun(world: int, module: str, *args: str, standalone: bool = True) -> tuple[str, ...]:
    """torchrun of ``world`` workers, each running ``python -m module args``."""
    launch = (*TORCHRUN, "--standalone") if standalone else TORCHRUN
    return (*launch, f"--nproc_per_node={world}", "-m", module, *args)


def core(gpus: int) -> Suite:
    """The compiler core: the GPU tests (the core's, Tutorial 3's Gluon arithmetic and its block-scaled dense
    ceiling), elementwise bandwidth vs pure Triton, the NVSHMEM ring at 1, 2 and 4 PEs on GPU 0."""
    return Suite("core", [
        Step("doctor", ("triton-raw", "doctor"), 60, required=False),
        # -o pythonpath=: the checkout's root stays behind the installed plugin on sys.path (setup.sh)
        Step("pytest", ("python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "pythonpath=",
                        "test/test_gpu_core.py", "test/test_tutorial_3_gluon_arithmetic.py",
                        "test/test_tutorial_3_gemm_baselines.py"), 240),
        Step("bandwidth", ("python3", "-m", "bench.elementwise_bandwidth", "--out", "{dir}"), 120),
        Step("ring", ("python3", "-m", "scripts.gpu.nvshmem_ring", "--world", "1", "2", "4", "--steps", "20",
                      "--out", "{dir}"), 400, shared_gpu=True),
    ], budget_s=540)  # fmt: skip


def runtime(gpus: int, cycles: str | None = None, core_timeout_s: str | None = None) -> Suite:
    """triton_raw_ext.runtime with several PEs on GPU 0; on a host with two GPUs or more the
    allocation-skew check runs first, one PE per GPU and without MPS (runtime_suite.stages)."""
    env = {k: v for k, v in (("RUNTIME_SUITE_CYCLES", cycles), ("RUNTIME_SUITE_CORE_TIMEOUT_S", core_timeout_s)) if v}
    script = ("python3", "-m", "scripts.gpu.runtime_suite", "--out", "{dir}")
    if gpus >= 2:
        steps = [Step("alloc_skew", (*script, "--stages", "alloc_skew"), 150),
                 Step("checks", (*script, "--skip", "alloc_skew"), 480, shared_gpu=True, env=env)]  # fmt: skip
    else:
        steps = [Step("checks", script, 480, shared_gpu=True, env=env)]
    return Suite("runtime", steps, budget_s=540)


def _t1_goals(out: Path, results: dict[str, dict]) -> tuple[list[str], dict]:
    """Tutorial 1's world-1 benchmark (CUDA graphs, p50) against torch.compile, with its goals."""
    bench = (_load(out / "bench_w1" / "bench.json") or {}).get("rows", [])
    graph = {(r["impl"], r["T"], r["H"]): r for r in bench if r.get("mode") == "graph" and "p50_us" in r}
    if not graph:
        return [], {}
    lines = [f"{'benchmark (graph, p50)':<24} {'fused us':>9} {'compile us':>10} {'fused TB/s':>10}  goal"]
    for (impl, t, h), r in sorted(graph.items(), key=lambda kv: -kv[0][1]):
        if impl != "fused":
            continue
        base = graph.get(("compile", t, h))
        if t == 4096 and h == 8192:
            goal = ">= 3.6 TB/s: " + ("MET" if r["tbps_p50"] >= 3.6 else "MISSED")
        elif base and t <= 128:
            goal = "<= torch.compile: " + ("MET" if r["p50_us"] <= base["p50_us"] else "MISSED")
        else:
            goal = ""
        base_us = f"{base['p50_us']:10.2f}" if base else f"{'-':>10}"
        lines.append(f"T={t:<5} H={h:<14} {r['p50_us']:9.2f} {base_us} {r['tbps_p50']:10.2f}  {goal}")
    return lines, {}


def t1(gpus: int) -> Suite:
    """Tutorial 1 on one GPU: compile every variant, the shape table and the benchmark at world 1, then
    2 and 4 PEs sharing the GPU; with several GPUs also the check and benchmark one PE per GPU."""
    warm = ("python3", "-m", f"{T1}.aot", "--warm", "2048", "4096", "7168", "8192", "--worlds", "1", "2", "4",
            "--jobs", "12")  # fmt: skip
    twoshot = ("--algorithm", "twoshot", "--tokens", "1", "64", "1024", "4096", "--hidden", "2048", "7168",
               "--graph-tokens", "1024")  # fmt: skip
    shared = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    steps = [
        Step("toolchain", ("python3", "-c", TOOLCHAIN), 60),
        Step("compile", warm, 120),
        Step("correct_w1", ("python3", "-m", f"{T1}.allreduce_rmsnorm", "--graph-tokens", "1", "128", "4096",
                            "--json", "{dir}/correct.json"), 90),
        Step("bench_w1", ("python3", "-m", f"{T1}.benchmark", "--shapes", "4096x8192", "128x8192", "64x8192",
                          "16x8192", "1x8192", "--json", "{dir}/bench.json"), 110),
        Step("correct_w2", _torchrun(2, f"{T1}.allreduce_rmsnorm", "--graph-tokens", "16", "4096",
                                     "--json", "{dir}/correct.json"), 75, shared_gpu=True, env=shared),
        Step("correct_w2_twoshot", _torchrun(2, f"{T1}.allreduce_rmsnorm", *twoshot, "--json", "{dir}/correct.json"),
             45, shared_gpu=True, env=shared),
        Step("correct_w2_twoshot_puts", _torchrun(2, f"{T1}.allreduce_rmsnorm", *twoshot, "--push", "puts",
                                                  "--json", "{dir}/correct.json"), 45, shared_gpu=True, env=shared),
        Step("correct_w4", _torchrun(4, f"{T1}.allreduce_rmsnorm", "--graph-tokens", "16", "4096",
                                     "--json", "{dir}/correct.json"), 90, shared_gpu=True, env=shared),
    ]  # fmt: skip
    if gpus > 1:
        steps += [
            Step(f"correct_w{gpus}_per_gpu", _torchrun(gpus, f"{T1}.allreduce_rmsnorm", "--graph-tokens", "16", "4096",
                                                       "--json", "{dir}/correct.json"), 120),
            Step(f"bench_w{gpus}_per_gpu", _torchrun(gpus, f"{T1}.benchmark", "--json", "{dir}/bench.json"), 150),
        ]  # fmt: skip
    return Suite("t1", steps, budget_s=345 if gpus == 1 else 540, env={"NVSHMEM_SYMMETRIC_SIZE": "4G"},
                 report=_t1_goals)  # fmt: skip


def t1_sweep(gpus: int) -> Suite:
    """Tutorial 1's launch choices side by side at world ``W`` (default 2, one PE per GPU): the graph
    benchmark of the default op, of every variant in ``VARIANTS`` (PUSH:N[:WARPS[:ROWS]]) and of NCCL +
    torch.compile in one run, then each variant's check."""
    variants = os.environ.get("VARIANTS", "").split()
    if not variants:
        raise SystemExit('t1_sweep: set VARIANTS, e.g. VARIANTS="stores:2 puts:2"')
    world = int(os.environ.get("W", "2"))
    shapes = os.environ.get("SHAPES", "1x2048 128x2048 1024x2048 4096x2048 1x8192 128x8192 1024x8192 4096x8192")
    steps = [Step("sweep", _torchrun(world, f"{T1}.benchmark", "--mode", "graph", "--shapes", *shapes.split(),
                                     "--variants", *variants, "--json", "{dir}/sweep.json"), 420)]  # fmt: skip
    for v in variants:
        push, _, tuning = v.partition(":")
        steps.append(Step(f"correct_{v.replace(':', '_')}", _torchrun(
            world, f"{T1}.allreduce_rmsnorm", "--tokens", "1", "128", "1024", "4096", "--hidden", "2048", "8192",
            "--dtypes", "bf16", "--graph-tokens", "4096", "--push", push, "--tuning", tuning,
            "--json", "{dir}/correct.json"), 90))  # fmt: skip

    def table(out: Path, results: dict[str, dict]) -> tuple[list[str], dict]:
        rows = [r for r in (_load(out / "sweep" / "sweep.json") or {}).get("rows", []) if "p50_us" in r]
        impls = list(dict.fromkeys(r["impl"] for r in rows))
        p50 = {(r["H"], r["T"], r["impl"]): r["p50_us"] for r in rows}
        lines = [f"{'H':>5} {'T':>5} " + " ".join(f"{i[:18]:>18}" for i in impls)]
        for h, t in sorted({(r["H"], r["T"]) for r in rows}):
            lines.append(f"{h:5d} {t:5d} " + " ".join(f"{p50.get((h, t, i), float('nan')):18.1f}" for i in impls))
        return lines, {}

    env = {"NVSHMEM_SYMMETRIC_SIZE": "6G", "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "lo"}
    return Suite("t1_sweep", steps, budget_s=540, env=env, report=table)


def t2(gpus: int) -> Suite:
    """Tutorial 2 on one GPU: the five shapes in bf16 and fp16 at world 1, the benchmark of every candidate
    config against torch.matmul, then the five shapes with 2 and 4 PEs sharing the GPU; then the SM push
    path at world 1, 2 and 4 (shared GPU), eager and in CUDA graphs."""
    shared = {"NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "lo",
              "NVSHMEM_SYMMETRIC_SIZE": "3G"}  # 2*world*m*k*2 bytes: 1.9 GB at world 4, k=28672  # fmt: skip
    # The SM push path (capturable): eager, one call captured and replayed with random skew, and the six-call
    # skew check captured as one graph, at two shapes that fit the suite's time (world 1: no push, graphs only).
    small = ("--push", "sm", "--dtypes", "bfloat16", "--shapes", "1024x1024x1024", "4096x1024x8192")
    check = (f"{T2}.allgather_gemm", *small, "--json", "{dir}/correct.json")
    sm_push = []
    for w in (2, 4):
        sm_push += [Step(f"w{w}_sm_{name}", _torchrun(w, *check, *flags), 60 + 20 * w, shared_gpu=True, env=shared)
                    for name, flags in (("eager", ()), ("graph", ("--graph",)),
                                        ("graph_sequence", ("--graph-sequence",)))]  # fmt: skip
    return Suite("t2", [
        Step("w1_correct", ("python3", "-m", f"{T2}.allgather_gemm", "--json", "{dir}/correct.json"), 110),
        Step("bench_w1", ("python3", "-m", f"{T2}.benchmark", "--configs", "all", "--out", "{dir}"), 110),
        Step("w1_sm_graph", ("python3", "-m", *check, "--graph"), 60),
        Step("w2_shared", _torchrun(2, f"{T2}.allgather_gemm", "--json", "{dir}/correct.json"), 150, shared_gpu=True,
             env=shared),
        Step("w4_shared", _torchrun(4, f"{T2}.allgather_gemm", "--json", "{dir}/correct.json"), 180, shared_gpu=True,
             env=shared),
        *sm_push,
    ], budget_s=480)  # fmt: skip


def t3(gpus: int) -> Suite:
    """Tutorial 3 on one GPU: correctness at world 1 (small shapes, the production per-rank load, all 128
    experts local), L1 and L2 as one persistent launch, the benchmark, the same in FP8, then 2 and 4 PEs
    sharing the GPU at small shapes and the production shape (2 PEs also in FP8)."""
    megamoe = ("python3", "-m", f"{T3}.megamoe")
    big = {"NVSHMEM_SYMMETRIC_SIZE": "2G"}
    return Suite("t3", [
        Step("w1_small", (*megamoe, "--cases", "small", "--json", "{dir}/correct.json"), 75),
        Step("w1_production", (*megamoe, "--cases", "equiv", "prod", "--json", "{dir}/correct.json"), 80),
        Step("w1_persistent_gemms", (*megamoe, "--persistent-gemms", "--cases", "small", "prod", "--routing",
                                     "skewed", "random", "--iters", "3", "--json", "{dir}/correct.json"), 80),
        Step("benchmark_w1", ("python3", "-m", f"{T3}.benchmark", "--out", "{dir}"), 55),
        Step("w1_fp8", (*megamoe, "--precision", "fp8", "--cases", "small", "equiv", "--json", "{dir}/correct.json"),
             75),
        Step("benchmark_w1_fp8", ("python3", "-m", f"{T3}.benchmark", "--precision", "fp8", "--out", "{dir}"), 50),
        Step("w2_shared_gpu_mps", _torchrun(2, f"{T3}.megamoe", "--cases", "small", "prod", "--json",
                                            "{dir}/correct.json", standalone=False), 110, shared_gpu=True, env=big),
        Step("w4_shared_gpu_mps", _torchrun(4, f"{T3}.megamoe", "--cases", "small", "prod", "--json",
                                            "{dir}/correct.json", standalone=False), 140, shared_gpu=True, env=big),
        Step("w2_fp8_shared_gpu_mps", _torchrun(2, f"{T3}.megamoe", "--precision", "fp8", "--cases", "small",
                                                "--json", "{dir}/correct.json", standalone=False), 75,
             shared_gpu=True),
    ], budget_s=540)  # fmt: skip


def t3_persistent(gpus: int) -> Suite:
    """Tutorial 3 with ``impl="persistent"`` (one launch per call) on one GPU: correctness at world 1 (small
    shapes, the production per-rank load and H 7168, bf16 and fp8, random, skewed, balanced and crowded routing,
    three calls back to back, the second without tokens), the benchmark of
    both impls side by side at the production load (random and skewed routing, CUDA graphs, torch's
    grouped and dense GEMMs as ceilings; GOAL_MISSED when the persistent graph misses its goal), then 2
    and 4 PEs sharing the GPU, bf16 and fp8, every routing (a rank without tokens in the second call). Knobs
    for a sweep: ``T3_KNOBS="block_m=128 num_stages=3"`` reaches both benchmarks; ``T3_VARIANTS_BF16`` /
    ``T3_VARIANTS_FP8`` (``LABEL:NAME=VALUE,...`` separated by spaces) add persistent layers with those knobs to
    that precision's benchmark, timed beside the defaults in 3 rounds."""
    persistent = ("--impl", "persistent", "--iters", "3")
    megamoe = ("python3", "-m", f"{T3}.megamoe", *persistent)
    knobs = [arg for knob in os.environ.get("T3_KNOBS", "").split() for arg in ("--knob", knob)]
    bench = ("python3", "-m", f"{T3}.benchmark", "--impls", "launches", "persistent", "--routing", "random",
             "skewed", "--ceilings", *knobs, "--out", "{dir}")  # fmt: skip
    variants = {p: os.environ.get(f"T3_VARIANTS_{p.upper()}", "").split() for p in ("bf16", "fp8")}

    def benchmark(precision: str, limit_s: int) -> Step:
        extra = [arg for v in variants[precision] for arg in ("--variant", v)]
        rounds = ("--rounds", "3") if extra else ()
        return Step(f"benchmark_{precision}", (*bench, "--precision", precision, *extra, *rounds),
                    limit_s + 25 * len(variants[precision]), benchmark=True)  # fmt: skip

    every_routing = ("--routing", "random", "skewed", "balanced", "crowded")
    shared = (*persistent, "--cases", "small", *every_routing, "--json", "{dir}/correct.json")
    # on a fresh H100: w1 53 s (bf16) and 45 s (fp8), the benchmarks 31 and 27 s, every routing at world 2 31 s
    # (bf16) and 23 s (fp8), at world 4 25 s (bf16; fp8 34 s in another run)
    return Suite("t3_persistent", [
        Step("w1_bf16", (*megamoe, "--cases", "small", "equiv", "wide", *every_routing, "--json", "{dir}/correct.json"),
             100),
        Step("w1_fp8", (*megamoe, "--precision", "fp8", "--cases", "small", "equiv", "wide", *every_routing, "--json",
                        "{dir}/correct.json"), 100),  # the Gluon kernel at the production load and H 7168
        benchmark("bf16", 55),
        benchmark("fp8", 60),  # Gluon and its Triton twin
        Step("w2_bf16_shared_gpu_mps", _torchrun(2, f"{T3}.megamoe", *shared, standalone=False), 60, shared_gpu=True),
        Step("w2_fp8_shared_gpu_mps", _torchrun(2, f"{T3}.megamoe", *shared, "--precision", "fp8", standalone=False),
             55, shared_gpu=True),
        Step("w4_bf16_shared_gpu_mps", _torchrun(4, f"{T3}.megamoe", *shared, standalone=False), 55, shared_gpu=True),
        Step("w4_fp8_shared_gpu_mps", _torchrun(4, f"{T3}.megamoe", *shared, "--precision", "fp8", standalone=False),
             55, shared_gpu=True),
    ], budget_s=540, report=_t3_persistent_goals)  # fmt: skip


def t3_trace(gpus: int) -> Suite:
    """Where the persistent MegaMoE call spends its time at world 1 (``trace_persistent``: a traced call
    per knob set, region by region), bf16 and fp8, the default knobs and those of ``T3_TRACE_BF16`` /
    ``T3_TRACE_FP8`` (knob sets separated by ``;``), then the persistent impl's check with 2 and 4 PEs
    sharing the GPU."""
    trace = ("python3", "-m", f"{T3}.trace_persistent")
    steps = []
    # Default knob sets: the default kernel at 3 and 2 stages. An item whose stages land no faster than the
    # loader keeps them in flight (experts' last tiles of a few pairs, which stream their weights at a stage
    # every 0.93 us at 4 stages) takes longer in proportion to 4 / stages.
    for precision in ("bf16", "fp8"):
        sets = ["", *os.environ.get(f"T3_TRACE_{precision.upper()}", "num_stages=3;num_stages=2").split(";")]
        configs = [arg for c in sets for arg in ("--config", c.strip())]
        steps.append(Step(f"trace_{precision}", (*trace, "--precision", precision, *configs, "--json",
                                                 f"{{dir}}/trace_{precision}.json"), 45 + 30 * len(sets)))  # fmt: skip
    check = ("--impl", "persistent", "--iters", "3", "--cases", "small", "--json", "{dir}/correct.json")
    steps += [
        Step("w2_bf16_shared_gpu_mps", _torchrun(2, f"{T3}.megamoe", *check, standalone=False), 85, shared_gpu=True),
        Step("w2_fp8_shared_gpu_mps", _torchrun(2, f"{T3}.megamoe", *check, "--precision", "fp8", standalone=False),
             85, shared_gpu=True),
        Step("w4_bf16_shared_gpu_mps", _torchrun(4, f"{T3}.megamoe", *check, standalone=False), 85, shared_gpu=True),
    ]  # fmt: skip
    return Suite("t3_trace", steps, budget_s=540)


# (local experts, top-k, tokens) with the production load's 4096 pairs: the same GEMM FLOPs over 16, 4 and
# 2 experts' weights (fp8 302, 75 and 38 MB; the 50 MB L2 holds only the last)
T3_EXPERT_SPLITS = ((16, 8, 512), (4, 4, 1024), (2, 2, 2048))


def t3_experts(gpus: int) -> Suite:
    """The persistent MegaMoE call traced at world 1 with the production load's pairs (H 4096, I 1536,
    4096 pairs) spread over 16, 4 and 2 local experts, bf16 and fp8: the same FLOPs with fewer weight bytes
    to stream and fewer experts' last tiles to pad, so the GEMM regions' item times show what each costs."""
    steps = []
    for precision in ("fp8", "bf16"):
        for experts, top_k, tokens in T3_EXPERT_SPLITS:
            name = f"trace_{precision}_e{experts}"
            steps.append(Step(name, ("python3", "-m", f"{T3}.trace_persistent", "--precision", precision, "--shape",
                                     "4096", "1536", str(experts), str(top_k), str(tokens), "--json",
                                     f"{{dir}}/{name}.json"), 85))  # fmt: skip
    return Suite("t3_experts", steps, budget_s=540)


def t3_gluon(gpus: int) -> Suite:
    """The persistent fp8 call in Gluon, warp-specialized (the default at world 1), beside Triton's: the
    block-scaled tile on dense matrices of the layer's shapes beside Triton's step and cuBLAS
    (``gemm_ceiling``), the call's L1 and L2 items in both on the state a real call leaves (``gemm_phase``: the
    same h and y_pair checked, then timed, random and skewed routing), the whole call checked at world 1 (the
    small cases run the Triton kernel, the production load the Gluon one), the traced call in both and with
    the knob sets of ``T3_TRACE_GLUON`` (separated by ``;``), and the benchmark beside its Triton twin, the
    launches, torch's grouped GEMMs and the dense ceiling."""
    phase = ("python3", "-m", f"{T3}.gemm_phase")
    sets = ["", "gluon=0", *filter(None, os.environ.get("T3_TRACE_GLUON", "").split(";"))]
    configs = [arg for c in sets for arg in ("--config", c.strip())]
    return Suite("t3_gluon", [
        Step("check", ("python3", "-m", f"{T3}.megamoe", "--impl", "persistent", "--precision", "fp8", "--cases",
                       "small", "equiv", "--json", "{dir}/check.json"), 120),
        Step("benchmark", ("python3", "-m", f"{T3}.benchmark", "--precision", "fp8", "--impls", "launches",
                           "persistent", "--routing", "random", "skewed", "--ceilings", "--rep-ms", "200", "--out",
                           "{dir}"), 150, benchmark=True),
        Step("trace", ("python3", "-m", f"{T3}.trace_persistent", "--precision", "fp8", *configs, "--json",
                       "{dir}/trace_fp8.json"), 30 + 25 * len(sets)),
        Step("phase_random", (*phase, "--json", "{dir}/phase_random.json"), 80),
        Step("phase_skewed", (*phase, "--routing", "skewed", "--json", "{dir}/phase_skewed.json"), 80),
        Step("ceiling", ("python3", "-m", f"{T3}.gemm_ceiling", "--only", "gluon", "prefetch", "plain", "--stages",
                         "3", "4", "--out", "{dir}"), 120),
    ], budget_s=570)  # fmt: skip


def _shares(row: str, dense: dict[str, float], block_scaled: dict[str, float]) -> str:
    """`` (54% of dense, 81% of block-scaled dense)`` for ``row``: the ceilings it has a share of."""
    parts = [*([f"{dense[row]:.0%} of dense"] if row in dense else []),
             *([f"{block_scaled[row]:.0%} of block-scaled dense"] if row in block_scaled else [])]  # fmt: skip
    return f" ({', '.join(parts)})" if parts else ""


def _t3_persistent_goals(out: Path, results: dict[str, dict]) -> tuple[list[str], dict]:
    """Both impls' CUDA-graph rows read back from the benchmarks' JSON, with their share of the dense
    ceiling (and in fp8 of the block-scaled dense ceiling, where it ran) and the persistent call's goal."""
    lines, rows = [], []
    for path in sorted([*(out / "benchmark_bf16").glob("*.json"), *(out / "benchmark_fp8").glob("*.json")]):
        if not (d := _load(path)):
            continue
        routing = d["shape"].get("routing") or ("skewed" if d["shape"]["skewed"] else "random")
        dense, goal = d.get("of_dense_ceiling", {}), d.get("goal")
        blocks = d.get("of_dense_block_scaled", {})
        graphs = {n.removesuffix("_ms"): ms * 1e3 for n, ms in d["times_ms"].items() if n.endswith("_graph_ms")}
        rows.append({"precision": d["precision"], "routing": routing, "graph_us": graphs, "of_dense_ceiling": dense,
                     "of_dense_block_scaled": blocks, "goal": goal})  # fmt: skip
        cells = ", ".join(f"{name} {us:.1f} us{_shares(name, dense, blocks)}" for name, us in graphs.items())
        verdict = f"; goal <= {goal['goal_us']:.0f} us: {'MET' if goal['met'] else 'MISSED'}" if goal else ""
        lines.append(f"T3 {d['precision']} {routing}: {cells}{verdict}")
    return (["world 1, CUDA graphs:", *lines] if lines else ["no benchmark JSON to read"]), {"rows": rows}


def t3_tune(gpus: int) -> Suite:
    """Tutorial 3's grouped-GEMM tile sweeps at the production per-rank load, bf16 and fp8."""
    return Suite("t3_tune", [
        Step("tune_bf16", ("python3", "-m", f"{T3}.tune_gemms", "--out", "{dir}"), 90),
        Step("tune_fp8", ("python3", "-m", f"{T3}.tune_gemms", "--precision", "fp8", "--out", "{dir}"), 80),
    ], budget_s=200)  # fmt: skip


def faults(gpus: int) -> Suite:
    """A PE that dies mid-call ends its peer's bounded wait with a report, for Tutorials 1, 3 and 2 with
    2 PEs sharing GPU 0, and the next job on the GPU runs (peer_fault.py judges each)."""
    return Suite("faults", [
        Step("peer_fault", ("python3", "-m", "scripts.gpu.peer_fault", "{dir}", "--budget-s", "500"), 520,
             shared_gpu=True),
    ], budget_s=540)  # fmt: skip


def nvshmem(gpus: int) -> Suite:
    """triton_raw_ext.nvshmem: every call family at 2 and 4 PEs sharing GPU 0
    (nvshmem_library_suite.py judges each case), then the ring all-gather example at 2 and 4 PEs."""
    return Suite("nvshmem", [
        Step("library", ("env", "OUT={dir}", "python3", "-m", "scripts.gpu.nvshmem_library_suite"), 420,
             shared_gpu=True),
        Step("ring_allgather_w2", _torchrun(2, "examples.ring_allgather"), 60, shared_gpu=True),
        Step("ring_allgather_w4", _torchrun(4, "examples.ring_allgather"), 60, shared_gpu=True),
    ], budget_s=540)  # fmt: skip


def launch_paths(gpus: int) -> Suite:
    """Every host launch path of the three ops on one GPU, after a change to how they launch: the bound and
    flattened launches' and the custom ops' GPU tests, world-1 correctness of each op (MegaMoE both impls,
    bf16 and fp8), AllGather-GEMM's copy-engine path at 2 PEs and its SM push captured at 4 PEs, MegaMoE's
    impls at 2 PEs, the serving blocks (all three ops eager, compiled and captured) at 2 PEs, then the host
    cost of each op beside the torch op it replaces (profiled)."""
    shared = {"NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "lo", "NVSHMEM_SYMMETRIC_SIZE": "3G"}
    ag = ("--dtypes", "bfloat16", "--shapes", "1024x1024x1024", "4096x1024x8192", "--json", "{dir}/correct.json")
    megamoe = ("python3", "-m", f"{T3}.megamoe", "--cases", "small", "--iters", "3", "--json", "{dir}/correct.json")
    return Suite("launch_paths", [
        # -o pythonpath=: the checkout's root stays behind the installed plugin on sys.path (setup.sh)
        Step("pytest", ("python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "pythonpath=",
                        "test/test_tutorial_custom_ops.py", "test/test_bound_launch.py", "test/test_flat_launch.py"),
             75),
        Step("t1_w1", ("python3", "-m", f"{T1}.allreduce_rmsnorm", "--graph-tokens", "1", "128",
                       "--json", "{dir}/correct.json"), 60),
        Step("t2_w1", ("python3", "-m", f"{T2}.allgather_gemm", "--json", "{dir}/correct.json"), 80),
        Step("t2_w2_copy_engine", _torchrun(2, f"{T2}.allgather_gemm", *ag), 60, shared_gpu=True, env=shared),
        Step("t2_w4_sm_graph", _torchrun(4, f"{T2}.allgather_gemm", "--push", "sm", "--graph", *ag), 80,
             shared_gpu=True, env=shared),
        Step("t3_w1_persistent", (*megamoe, "--impl", "persistent"), 60),
        Step("t3_w1_persistent_fp8", (*megamoe, "--impl", "persistent", "--precision", "fp8"), 50),
        Step("t3_w1_launches", megamoe, 60),
        Step("t3_w2_persistent", _torchrun(2, *megamoe[2:], "--impl", "persistent", standalone=False), 70,
             shared_gpu=True),
        Step("t3_w2_launches", _torchrun(2, *megamoe[2:], standalone=False), 70, shared_gpu=True),
        Step("serving_w2", _torchrun(2, "examples.serving_blocks", "--json", "{dir}/serving.json"), 75,
             shared_gpu=True, env=shared),
        Step("host_cost", ("python3", "-m", "bench.host_cost", "--profile", "--out", "{dir}"), 60),
    ], budget_s=540)  # fmt: skip


def serving(gpus: int) -> Suite:
    """The tutorial ops as a serving engine uses them: the custom-op GPU tests (compiled == eager), the host
    cost of each op's eager and ``torch.ops`` call beside the torch op it replaces (with the profile of
    where it goes), and the serving example (``examples.serving_blocks``: the MLP and MoE blocks eager,
    compiled and as CUDA graphs beside torch.distributed collectives) at world 1 and with 2 and 4 PEs
    sharing the GPU (about 35 s each with warm caches; the limits leave room for cold ones)."""
    shared = {"NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "lo"}
    example = "examples.serving_blocks"
    return Suite("serving", [
        # -o pythonpath=: the checkout's root stays behind the installed plugin on sys.path (setup.sh)
        Step("custom_ops", ("python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "pythonpath=",
                            "test/test_tutorial_custom_ops.py"), 75),
        Step("host_cost", ("python3", "-m", "bench.host_cost", "--profile", "--out", "{dir}"), 60),
        Step("w1", ("python3", "-m", example, "--json", "{dir}/serving.json"), 75),
        Step("w2_shared", _torchrun(2, example, "--json", "{dir}/serving.json"), 75, shared_gpu=True, env=shared),
        Step("w4_shared", _torchrun(4, example, "--json", "{dir}/serving.json"), 90, shared_gpu=True, env=shared),
    ], budget_s=400)  # fmt: skip


def every_one_gpu_suite(gpus: int) -> Suite:
    """Every one-GPU suite in one bounded call: each part gets at most its cap (about what it takes on
    an H200 with a cold cache, plus a margin) and what the 540 s budget has left; a step that would
    start with under 30 s left is skipped. The runtime suite runs 5 init/finalize cycles here, not 20."""
    parts = [(core(gpus), 100), (runtime(gpus, cycles="5", core_timeout_s="45"), 110), (t1(gpus), 130),
             (t2(gpus), 100), (t3(gpus), 160)]  # fmt: skip
    return Suite("all", [], budget_s=540, parts=parts)


def tutorials(gpus: int) -> Suite:
    """The three tutorials in one bounded call, with the caps of ``all`` (what changes in a tutorial's
    layout or launch path is checked without the compiler-core and runtime parts)."""
    return Suite("tutorials", [], budget_s=440, parts=[(t1(gpus), 130), (t2(gpus), 150), (t3(gpus), 160)])


T2_SHAPES = ("1024x1024x1024", "4096x1024x8192", "4096x8192x8192", "8192x8192x8192", "4096x8192x28672")
T2_OVERLAP_SHAPES = ("4096x1024x8192", "1024x1024x1024")  # multi_gpu: both push paths vs NCCL all-gather and GEMM
MULTI_GPU_PARTS = ("1", "2", "3", "serving")  # what TUTORIALS may name


def multi_gpu_worlds(gpus: int) -> list[int]:
    """The world sizes of ``WORLDS`` (default: every GPU of the host) that fit the host."""
    return [w for w in map(int, os.environ.get("WORLDS", str(gpus)).split()) if 2 <= w <= gpus]


def multi_gpu(gpus: int) -> Suite:
    """The tutorials one PE per GPU at every world size of ``WORLDS`` that fits (default: all the GPUs; no
    MPS, no shared-GPU mode), with their NCCL baselines timed in the same runs; ``TUTORIALS`` (default
    ``3 serving 2``; ``1`` adds Tutorial 1, which does not fit the 540 s with the others) picks the parts.

    * ``3``: MegaMoE's benchmark at world 1 on GPU 0 (the per-rank load, both impls, events timing), then
      at each world W with 16 experts per rank, bf16 and fp8: both impls checked on every rank and timed
      as CUDA graphs against the grouped-GEMM EP baseline, with the ratio to the world-1 time;
    * ``serving``: examples.serving_blocks (NCCL baselines);
    * ``2``: AllGather-GEMM's check with each push path, and its benchmark at ``T2_OVERLAP_SHAPES`` with
      both push paths against NCCL's all-gather alone and the GEMM alone.

    Steps of one world size take at most 460 s, so one world fits the 540 s budget with the setup;
    ``T1_VARIANTS`` (default puts:8) and ``T2_CONFIGS`` (default or all) are as in the other suites.
    """
    worlds = multi_gpu_worlds(gpus)
    if not worlds:
        raise SystemExit(f"multi_gpu: no world size in WORLDS='{os.environ.get('WORLDS', str(gpus))}' fits the "
                         f"{gpus} GPU(s) nvidia-smi lists; run on a host with >= 2 GPUs or set WORLDS")  # fmt: skip
    wanted = os.environ.get("TUTORIALS", "3 serving 2").split()
    if unknown := set(wanted) - set(MULTI_GPU_PARTS):
        raise SystemExit(f"multi_gpu: TUTORIALS names {sorted(unknown)}; use some of {' '.join(MULTI_GPU_PARTS)}")
    variants = os.environ.get("T1_VARIANTS", "puts:8").split()
    t1_shapes = [f"{t}x{h}" for h in (2048, 8192) for t in (1, 16, 128, 1024, 4096)]
    t3_bench = ("--impls", "launches", "persistent", "--out", "{dir}")
    steps = [Step("toolchain", ("python3", "-c", TOOLCHAIN), 20)]
    if "3" in wanted:  # the same per-rank load at world 1, timed as the world-W runs are, by the same kernels
        # (gluon=0: the world-W persistent call is the Triton kernel, so the ratio to world 1 is the communication's)
        steps += [Step(f"t3_bench_w1_{p}", ("python3", "-m", f"{T3}.benchmark", "--precision", p, "--timing", "events",
                                            *t3_bench, "--knob", "gluon=0"), 50 if p == "bf16" else 45, benchmark=True)
                  for p in ("bf16", "fp8")]  # fmt: skip
    if "1" in wanted:
        steps.append(Step("t1_compile", ("python3", "-m", f"{T1}.aot", "--warm", "2048", "4096", "7168", "8192",
                                         "--worlds", *map(str, worlds), "--jobs", "16"), 120))  # fmt: skip
    for w in worlds:
        if "3" in wanted:
            steps += [Step(f"t3_bench_w{w}_{p}", _torchrun(w, f"{T3}.benchmark", "--experts", str(16 * w),
                                                           "--precision", p, "--world1", f"{{dir}}/../t3_bench_w1_{p}",
                                                           *t3_bench),
                           80 if p == "bf16" else 70, benchmark=True)
                      for p in ("bf16", "fp8")]  # fmt: skip
        if "serving" in wanted:
            steps.append(Step(f"serving_w{w}", _torchrun(w, "examples.serving_blocks", "--json", "{dir}/serving.json"),
                              45))  # fmt: skip
        if "2" in wanted:
            steps += [Step(f"t2_correct_w{w}_{push}", _torchrun(w, f"{T2}.allgather_gemm", "--push", push, "--dtypes",
                                                                "bfloat16", "--shapes", *T2_OVERLAP_SHAPES, "--json",
                                                                "{dir}/correct.json"), 35)
                      for push in ("sm", "copy_engine")]  # fmt: skip
            steps.append(Step(f"t2_bench_w{w}", _torchrun(w, f"{T2}.benchmark", "--shapes", *T2_OVERLAP_SHAPES,
                                                          "--push", "both", "--configs",
                                                          os.environ.get("T2_CONFIGS", "default"), "--out", "{dir}"),
                              80, benchmark=True))  # fmt: skip
        if "1" in wanted:
            steps.append(Step(f"t1_correct_w{w}", _torchrun(w, f"{T1}.allreduce_rmsnorm", "--graph-tokens", "16",
                                                            "4096", "--json", "{dir}/correct.json"), 90))  # fmt: skip
            for v in variants:
                push, _, tuning = v.partition(":")
                steps.append(Step(f"t1_correct_w{w}_{v.replace(':', '_')}", _torchrun(
                    w, f"{T1}.allreduce_rmsnorm", "--graph-tokens", "16", "4096", "--push", push, "--tuning", tuning,
                    "--json", "{dir}/correct.json"), 90))  # fmt: skip
            steps.append(Step(f"t1_bench_w{w}", _torchrun(w, f"{T1}.benchmark", "--shapes", *t1_shapes,
                                                          "--variants", *variants, "--json", "{dir}/bench.json"),
                              150, benchmark=True))  # fmt: skip
    env = {"NVSHMEM_SYMMETRIC_SIZE": "6G",  # T2 at W=8: 3.8 GB for k=28672 (two buffers)
           "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "lo", "NCCL_DEBUG": "WARN"}  # fmt: skip
    return Suite("multi_gpu", steps, budget_s=540, env=env, report=lambda out, results: _goals(out, worlds))


def _goals(out: Path, worlds: list[int]) -> tuple[list[str], dict]:
    """The goal verdicts read back from the benchmarks' JSON."""
    goals, lines = [], []
    for w in worlds:
        if (d := _load(out / f"t1_bench_w{w}" / "bench.json")) and d.get("goal"):
            g = d["goal"]
            for mode, met in g["met"].items():
                cases = [c for c in g["cases"] if c["mode"] == mode]
                small = min((c["speedup"] for c in cases if c["T"] <= 128), default=float("nan"))
                big = min((c["speedup"] for c in cases if c["T"] > 128), default=float("nan"))
                goals.append({"tutorial": 1, "world": w, "mode": mode, "met": met, "min_speedup_T_le_128": small,
                              "min_speedup_T_gt_128": big})  # fmt: skip
                lines.append(f"T1 w{w} {mode:5}: vs nccl+compile min {small:.2f}x at T<=128 (goal 1.3), "
                             f"min {big:.2f}x above (goal 1.0) -> {'MET' if met else 'NOT MET'}")  # fmt: skip
        for p in sorted((out / f"t2_bench_w{w}").glob("*.json")):
            if (d := _load(p)) and d.get("goal"):
                g = d["goal"]
                shape = "x".join(map(str, d["shape"]))
                goals.append({"tutorial": 2, "world": w, "shape": shape, **g})
                vs = f"{g['speed_vs_torch']:.2f}x" if g.get("speed_vs_torch") else "no"
                lines.append(f"T2 w{w} {shape:>16}: AG-GEMM {g['ratio_vs_gemm_alone']:.3f}x GEMM alone (goal <= 1.05), "
                             f"{vs} torch all_gather+matmul -> {'MET' if g['met'] else 'NOT MET'}")  # fmt: skip
                for variant, ratio in g.get("vs_overlap_bound", {}).items():
                    lines.append(f"T2 w{w} {shape:>16}: {variant} {ratio:.3f}x max(NCCL all-gather, GEMM alone) "
                                 f"(goal <= {g['overlap_target']}) -> "
                                 f"{'MET' if ratio <= g['overlap_target'] else 'NOT MET'}")  # fmt: skip
        for p in sorted(out.glob(f"t3_bench_w{w}_*/*.json")):
            if d := _load(p):
                goal, ratio = d.get("goal"), d.get("vs_world1", {})
                base_us = d["times_ms"][f"{d['baseline']}_ms"] * 1e3
                graphs = {n.removesuffix("_ms"): ms * 1e3 for n, ms in d["times_ms"].items() if n.endswith("_graph_ms")}
                goals.append({"tutorial": 3, "world": w, "precision": d["precision"], "graph_us": graphs,
                              "baseline": d["baseline"], "baseline_us": base_us, "errors": d["errors"],
                              "goal": goal, "vs_world1": ratio})  # fmt: skip
                for row, us in graphs.items():
                    r = ratio.get("rows", {}).get(row)
                    vs1 = (f", {r['ratio']:.3f}x world 1 ({r['world1_us']:.1f} us; goal <= {ratio['goal_ratio']})"
                           if r else ", no world-1 time")  # fmt: skip
                    lines.append(f"T3 w{w} {d['precision']}: {row} {us:.1f} us, {base_us / us:.2f}x faster than "
                                 f"{d['baseline']} ({base_us:.1f} us){vs1}")  # fmt: skip
                if goal:
                    lines.append(f"T3 w{w} {d['precision']}: goal {goal['row']} <= {goal['goal_us']:.0f} us -> "
                                 f"{'MET' if goal['met'] else 'NOT MET'}")  # fmt: skip
                lines += [f"T3 w{w} {d['precision']}: FAIL {e}" for e in d["errors"]]
        if d := _load(out / f"serving_w{w}" / "serving.json"):
            goals.append({"serving": True, "world": w, "ok": d["ok"], "rows": d["rows"]})
            lines += [f"serving w{w} {r['block']} {r['variant']}: {r['us_per_call']:.1f} us/call, "
                      f"rel err {r['rel_err']:.1e}" + (f" ({r['note']})" if r["note"] else "") for r in d["rows"]]
    lines = ["goals:", *lines] if lines else ["no benchmark JSON to read goals from"]
    return lines, {"worlds": worlds, "goals": goals}


SUITES: dict[str, Callable[[int], Suite]] = {
    "core": core, "runtime": runtime, "t1": t1, "t1_sweep": t1_sweep, "t2": t2, "t3": t3, "t3_tune": t3_tune,
    "t3_persistent": t3_persistent, "t3_trace": t3_trace, "t3_experts": t3_experts, "t3_gluon": t3_gluon,
    "faults": faults,
    "nvshmem": nvshmem, "multi_gpu": multi_gpu, "serving": serving, "launch_paths": launch_paths,
    "all": every_one_gpu_suite, "tutorials": tutorials,
}  # fmt: skip
