"""Host cost of one eager call of each tutorial op, beside the torch op it replaces, in one run (world 1).

Each op is called back to back many times at a shape where the GPU is not the bottleneck; host time
per call is ``perf_counter`` around the loop (no synchronisation inside it) divided by the calls. The
paths of an op are timed in rounds, each path once per round in turn, and compared round by round: the
GPU machine's host speed drifts by tens of percent within a run.
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

Usage, from the repository root on the GPU machine: ``python -m bench.host_cost [--calls N] [--rounds R]
[--profile] [--out FOLDER]``;
writes ``host_cost.json`` with the run metadata into ``--out`` (default
``bench/results/<date>-1x<GPU>-host-cost/``). Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import json
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from tutorials.common.run_metadata import run_metadata
from tutorials.common.timing import SLEEP_CYCLES_PER_US

WARMUP = 20
ROUNDS = 7
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


def _host_and_wall_us(call: Callable[[], object], calls: int) -> tuple[float, float]:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
    return host / calls * 1e6, wall / calls * 1e6


def _gpu_us(call: Callable[[], object], calls: int, host_us: float) -> float:
    """GPU µs per call: the loop waits behind a sleep longer than its enqueue, so the events see only the
    GPU's work."""
    torch.cuda._sleep(int(2 * host_us * calls * SLEEP_CYCLES_PER_US) + 10_000)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(calls):
        call()
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end) / calls * 1e3


def time_paths(op: str, paths: dict[str, Callable[[], object]], calls: int, rounds: int,
               profile: Sequence[str] = ()) -> list[dict[str, Any]]:  # fmt: skip
    """A row per path of ``op``: host and wall µs per call of ``calls`` back-to-back calls in each of
    ``rounds`` rounds (``host_rounds_us``, ``wall_rounds_us``) and their medians, and GPU µs per call; for
    the paths in ``profile`` also :func:`profile_calls`. Each round times every path once, in turn, so
    that a drift of the host's speed during the run reaches every path alike."""
    for call in paths.values():
        for _ in range(WARMUP):
            call()
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in paths}
    for _ in range(rounds):
        for name, call in paths.items():
            samples[name].append(_host_and_wall_us(call, calls))
    rows = []
    for name, call in paths.items():
        host, wall = [h for h, _ in samples[name]], [w for _, w in samples[name]]
        row = {"op": op, "path": name, "host_us": statistics.median(host), "wall_us": statistics.median(wall),
               "gpu_us": _gpu_us(call, calls, statistics.median(host)), "host_rounds_us": host,
               "wall_rounds_us": wall}  # fmt: skip
        if name in profile:
            row["profile"] = profile_calls(call, calls)
        rows.append(row)
    return rows


def allgather_gemm_rows(calls: int, rounds: int, dev: torch.device, profile: bool) -> list[dict[str, Any]]:
    from tutorials.allgather_gemm import AllGatherGEMM
    from tutorials.allgather_gemm.torch_op import AllGatherGEMMModule

    op = AllGatherGEMM(1024, 1024, 1024, torch.bfloat16)
    a = torch.randn(1024, 1024, dtype=torch.bfloat16, device=dev)
    b = torch.randn(1024, 1024, dtype=torch.bfloat16, device=dev)
    module = AllGatherGEMMModule(op, b)
    paths = {"torch.matmul": lambda: torch.matmul(a, b), "eager": lambda: op(a, b), "torch.ops": lambda: module(a)}
    rows = time_paths("allgather_gemm", paths, calls, rounds, ["eager"] if profile else [])
    op.close()
    return rows


def allreduce_rmsnorm_rows(calls: int, rounds: int, dev: torch.device, profile: bool) -> list[dict[str, Any]]:
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

    paths = {"add + F.rms_norm": torch_ops, "eager": lambda: op(x, residual, weight, eps, out=out),
             "torch.ops": lambda: module(x, out[1])}  # fmt: skip
    rows = time_paths("allreduce_rmsnorm", paths, calls, rounds, ["eager"] if profile else [])
    op.close()
    return rows


def megamoe_rows(calls: int, rounds: int, dev: torch.device, profile: bool) -> list[dict[str, Any]]:
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
    with (MegaMoE(hidden, inter, experts, top_k, tokens, w1, w2) as layer,
          MegaMoE(hidden, inter, experts, top_k, tokens, w1, w2, impl="persistent") as persistent):  # fmt: skip
        module = MegaMoEModule(layer)
        paths = {"torch._grouped_mm": lambda: torch._grouped_mm(pairs, w1, offs=offs),
                 "eager": lambda: layer(x, logits), "torch.ops": lambda: module(x, logits),
                 "eager persistent": lambda: persistent(x, logits)}  # fmt: skip
        return time_paths("megamoe", paths, calls, rounds, ["eager", "eager persistent"] if profile else [])


def _paired_ratio(top: list[float], bottom: list[float]) -> float:
    """The median over rounds of ``top[i] / bottom[i]``: each ratio of two paths timed in the same round."""
    return statistics.median(t / b for t, b in zip(top, bottom, strict=True))


def goals(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per op: each eager path's host time over its torch op's (``host_ratios``; MegaMoE has two, one per
    impl), and the best of them (``path``, ``host_ratio``; goal <= HOST_GOAL); for AG-GEMM also the
    torch.matmul wall time over its eager call's (goal >= AG_GEMM_SPEED_GOAL). Each op's first row is its
    torch op; a ratio is the median of the rounds' ratios (:func:`time_paths` times both in each round)."""
    verdicts: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r["op"] for r in rows):
        own = [r for r in rows if r["op"] == name]
        baseline = own[0]
        ratios = {r["path"]: _paired_ratio(r["host_rounds_us"], baseline["host_rounds_us"])
                  for r in own if r["path"].startswith("eager")}  # fmt: skip
        best = min(ratios, key=ratios.__getitem__)
        verdicts[name] = {"path": best, "host_ratio": ratios[best], "host_ratios": ratios,
                          "host_goal": f"<= {HOST_GOAL}", "host_met": ratios[best] <= HOST_GOAL}  # fmt: skip
        if name == "allgather_gemm":
            eager = next(r for r in own if r["path"] == "eager")
            speed = _paired_ratio(baseline["wall_rounds_us"], eager["wall_rounds_us"])
            verdicts[name].update(
                speed_vs_matmul=speed, speed_goal=f">= {AG_GEMM_SPEED_GOAL}", speed_met=speed >= AG_GEMM_SPEED_GOAL
            )
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="back-to-back calls per measurement")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="measurements of each path, interleaved")
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
    rows = [row for name in args.ops for row in measure[name](args.calls, args.rounds, dev, args.profile)]
    verdicts = goals(rows)
    gpu = torch.cuda.get_device_name(dev).replace(" ", "")
    out = args.out or Path("bench/results") / f"{datetime.date.today()}-1x{gpu}-host-cost"
    out.mkdir(parents=True, exist_ok=True)
    record = {"benchmark": "host_cost", **run_metadata(), "calls": args.calls, "rounds": args.rounds, "rows": rows,
              "goals": verdicts}  # fmt: skip
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
