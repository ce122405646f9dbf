"""Host cost of one eager call of each tutorial op, beside the torch op it replaces, in one run (world 1).

Each op is called back to back many times at a shape where the GPU is not the bottleneck; host time
per call is ``perf_counter`` around the loop (no synchronisation inside it) divided by the calls.
GPU time per call is then measured on the same loop enqueued behind a device sleep longer than the
host needs to enqueue it, with events around the loop, so the host's pace does not show in it.

Each op is timed eager (``op(...)``) and through its custom op (``torch.ops.triton_raw_ext.<op>``):

* AllGather-GEMM at 1024^3 beside ``torch.matmul``;
* AllReduce+RMSNorm at T=16, H=4096 beside an eager add + ``F.rms_norm``;
* MegaMoE at T=16, H=1024, E=8, top-2 beside one ``torch._grouped_mm`` (its L1 over the token pairs),
  with ``impl="launches"`` and ``impl="persistent"``.

``--profile`` adds, for each op's eager call, the functions where its host time goes (cProfile, own
µs per call), to read what to cut.

Goals (``goals`` in the JSON): every op's host time per call within 1.5x the torch op's (MegaMoE: the
better of its two impls, both reported); AG-GEMM's torch.matmul time over its own time per call
(host-bound loop, synchronised) >= 0.8.

Usage, from the repository root on the GPU machine: ``python -m bench.host_cost [--calls N] [--profile]
[--out FOLDER]``;
writes ``host_cost.json`` with the run metadata into ``--out`` (default
``bench/results/<date>-1x<GPU>-host-cost/``). Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import json
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tutorials.common.run_metadata import run_metadata
from tutorials.common.timing import SLEEP_CYCLES_PER_US

WARMUP = 20
HOST_GOAL = 1.5  # op host time / torch op host time
AG_GEMM_SPEED_GOAL = 0.8  # torch.matmul time / AG-GEMM time, 1024^3, world 1
PROFILE_TOP = 15


def profile_calls(call: Callable[[], object], calls: int, top: int = PROFILE_TOP) -> list[dict[str, Any]]:
    """Where the host time of ``calls`` calls goes: the ``top`` functions by own time, µs per call each."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        call()
    profiler.disable()
    torch.cuda.synchronize()
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (calls, primitive calls, own s, total s, callers)
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    return [{"function": f"{Path(file).name}:{line}:{name}", "calls_per_call": n / calls,
             "own_us": own / calls * 1e6, "total_us": total / calls * 1e6}
            for (file, line, name), (n, _, own, total, _) in rows]  # fmt: skip


def time_calls(call: Callable[[], object], calls: int, profile: bool = False) -> dict[str, Any]:
    """Host µs per call, wall µs per call (loop then synchronise) and GPU µs per call of ``call``; with
    ``profile``, also :func:`profile_calls` of the same number of calls (measured after the timings)."""
    for _ in range(WARMUP):
        call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
    # GPU time: the loop waits behind a sleep longer than its enqueue, so the events see only the GPU's work
    torch.cuda._sleep(int(2 * host * 1e6 * SLEEP_CYCLES_PER_US) + 10_000)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(calls):
        call()
    end.record()
    torch.cuda.synchronize()
    timings: dict[str, Any] = {
        "host_us": host / calls * 1e6,
        "wall_us": wall / calls * 1e6,
        "gpu_us": begin.elapsed_time(end) / calls * 1e3,
    }
    if profile:
        timings["profile"] = profile_calls(call, calls)
    return timings


def allgather_gemm_rows(calls: int, dev: torch.device, profile: bool) -> list[dict[str, Any]]:
    from tutorials.allgather_gemm import AllGatherGEMM
    from tutorials.allgather_gemm.torch_op import AllGatherGEMMModule

    op = AllGatherGEMM(1024, 1024, 1024, torch.bfloat16)
    a = torch.randn(1024, 1024, dtype=torch.bfloat16, device=dev)
    b = torch.randn(1024, 1024, dtype=torch.bfloat16, device=dev)
    module = AllGatherGEMMModule(op, b)
    rows = [
        {"op": "allgather_gemm", "path": "torch.matmul", **time_calls(lambda: torch.matmul(a, b), calls)},
        {"op": "allgather_gemm", "path": "eager", **time_calls(lambda: op(a, b), calls, profile)},
        {"op": "allgather_gemm", "path": "torch.ops", **time_calls(lambda: module(a), calls)},
    ]
    op.close()
    return rows


def allreduce_rmsnorm_rows(calls: int, dev: torch.device, profile: bool) -> list[dict[str, Any]]:
    from tutorials.allreduce_rmsnorm import AllReduceRMSNorm
    from tutorials.allreduce_rmsnorm.torch_op import AllReduceRMSNormModule

    tokens, hidden, eps = 16, 4096, 1e-6
    op = AllReduceRMSNorm(hidden, torch.bfloat16, tokens)
    x, residual = (torch.randn(tokens, hidden, dtype=torch.bfloat16, device=dev) for _ in range(2))
    weight = torch.ones(hidden, dtype=torch.bfloat16, device=dev)
    out = (torch.empty_like(x), torch.empty_like(x))
    module = AllReduceRMSNormModule(op, weight, eps)

    def torch_ops() -> torch.Tensor:
        r = x + residual
        return torch.nn.functional.rms_norm(r, (hidden,), weight, eps)

    rows = [
        {"op": "allreduce_rmsnorm", "path": "add + F.rms_norm", **time_calls(torch_ops, calls)},
        {
            "op": "allreduce_rmsnorm",
            "path": "eager",
            **time_calls(lambda: op(x, residual, weight, eps, out=out), calls, profile),
        },
        {"op": "allreduce_rmsnorm", "path": "torch.ops", **time_calls(lambda: module(x, out[1]), calls)},
    ]
    op.close()
    return rows


def megamoe_rows(calls: int, dev: torch.device, profile: bool) -> list[dict[str, Any]]:
    from triton_raw_ext import runtime
    from tutorials.megamoe import MegaMoE
    from tutorials.megamoe.megamoe import make_inputs, make_weights
    from tutorials.megamoe.torch_op import MegaMoEModule

    tokens, hidden, inter, experts, top_k = 16, 1024, 512, 8, 2
    runtime.init()
    w1, w2 = make_weights(hidden, inter, experts, 0, dev)
    x, logits = make_inputs(tokens, hidden, experts, False, 1, dev)
    # the grouped GEMM a torch MoE runs for L1: every (token, expert) pair's row, grouped by expert
    pairs = x.repeat_interleave(top_k, 0)
    offs = torch.linspace(0, tokens * top_k, experts + 1, device=dev)[1:].to(torch.int32)
    with MegaMoE(hidden, inter, experts, top_k, tokens, w1, w2) as layer:
        module = MegaMoEModule(layer)
        rows = [
            {
                "op": "megamoe",
                "path": "torch._grouped_mm",
                **time_calls(lambda: torch._grouped_mm(pairs, w1, offs=offs), calls),
            },
            {"op": "megamoe", "path": "eager", **time_calls(lambda: layer(x, logits), calls, profile)},
            {"op": "megamoe", "path": "torch.ops", **time_calls(lambda: module(x, logits), calls)},
        ]
    with MegaMoE(hidden, inter, experts, top_k, tokens, w1, w2, impl="persistent") as layer:
        rows.append({"op": "megamoe", "path": "eager persistent",
                     **time_calls(lambda: layer(x, logits), calls, profile)})  # fmt: skip
    return rows


def goals(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per op: each eager path's host time over its torch op's (``host_ratios``; MegaMoE has two, one per
    impl), and the best of them (``path``, ``host_ratio``; goal <= HOST_GOAL); for AG-GEMM also the
    torch.matmul wall time over its eager call's (goal >= AG_GEMM_SPEED_GOAL). Each op's first row is its
    torch op."""
    verdicts: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r["op"] for r in rows):
        own = [r for r in rows if r["op"] == name]
        baseline = own[0]
        ratios = {r["path"]: r["host_us"] / baseline["host_us"] for r in own if r["path"].startswith("eager")}
        best = min(ratios, key=ratios.__getitem__)
        verdicts[name] = {"path": best, "host_ratio": ratios[best], "host_ratios": ratios,
                          "host_goal": f"<= {HOST_GOAL}", "host_met": ratios[best] <= HOST_GOAL}  # fmt: skip
        if name == "allgather_gemm":
            eager = next(r for r in own if r["path"] == "eager")
            speed = baseline["wall_us"] / eager["wall_us"]
            verdicts[name].update(
                speed_vs_matmul=speed, speed_goal=f">= {AG_GEMM_SPEED_GOAL}", speed_met=speed >= AG_GEMM_SPEED_GOAL
            )
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="back-to-back calls per measurement")
    parser.add_argument(
        "--ops",
        nargs="+",
        default=["allgather_gemm", "allreduce_rmsnorm", "megamoe"],
        choices=["allgather_gemm", "allreduce_rmsnorm", "megamoe"],
    )
    parser.add_argument("--out", type=Path, help="folder of host_cost.json")
    parser.add_argument("--profile", action="store_true", help="also record where each op's eager host time goes")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("host_cost: no CUDA GPU visible; nothing measured")
        return 0
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    measure = {
        "allgather_gemm": allgather_gemm_rows,
        "allreduce_rmsnorm": allreduce_rmsnorm_rows,
        "megamoe": megamoe_rows,
    }
    rows = [row for name in args.ops for row in measure[name](args.calls, dev, args.profile)]
    verdicts = goals(rows)
    gpu = torch.cuda.get_device_name(dev).replace(" ", "")
    out = args.out or Path("bench/results") / f"{datetime.date.today()}-1x{gpu}-host-cost"
    out.mkdir(parents=True, exist_ok=True)
    record = {"benchmark": "host_cost", **run_metadata(), "calls": args.calls, "rows": rows, "goals": verdicts}
    (out / "host_cost.json").write_text(json.dumps(record, indent=1))
    print(f"{'op':18} {'path':18} {'host us':>8} {'wall us':>8} {'gpu us':>8}")
    for r in rows:
        print(f"{r['op']:18} {r['path']:18} {r['host_us']:8.1f} {r['wall_us']:8.1f} {r['gpu_us']:8.1f}")
    for r in rows:
        for entry in r.get("profile", [])[:5]:
            print(f"  {r['op']} {r['path']}: {entry['own_us']:6.2f} us own in {entry['function']}")
    for name, v in verdicts.items():
        print(f"{name}: {json.dumps(v)}")
    print(f"-> {out / 'host_cost.json'}")
    if "megamoe" in args.ops:
        from triton_raw_ext import runtime

        runtime.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
