"""Benchmark of AllReduceRMSNorm against what a user would run instead, in the same process.

Implementations (each where it can run):
  * ``fused``: this tutorial's op (one kernel per call), as constructed by default;
  * ``fused[PUSH:TUNING]``: the op with ``push=PUSH`` and the launch tuning TUNING
    (``N[:WARPS[:ROWS]]``, allreduce_rmsnorm.parse_tuning), one per ``--variants`` entry, to compare launch
    choices side by side;
  * ``compile``: at world 1, ``torch.compile``d residual add + RMSNorm alone (the all-reduce of one
    rank is the identity);
  * ``nccl+compile``: at world > 1 with one GPU per rank, ``torch.distributed.all_reduce`` (NCCL)
    followed by the compiled residual + RMSNorm;
  * ``flashinfer``: FlashInfer's ``trtllm_allreduce_fusion`` when it imports (world > 1, one GPU
    per rank); skipped with the reason otherwise.

Timing: each repeat first synchronises the ranks (a barrier when world > 1), then times on the GPU
with CUDA events either one eager call (``--mode eager``: launch cost included) or one replay of a
CUDA graph of ``--inner`` calls divided by ``--inner`` (``--mode graph``, default: kernel time
without launch gaps). Every rank's time of a repeat is gathered and the rank maximum kept; p50, p90
and p99 are over repeats. Effective TB/s counts the bytes the op must move per rank: read x,
residual and weight, write norm_out and residual_out (plan.effective_bytes). Results go to
``--json`` (default ``$OUT/bench_t1_<date>.json`` or ``bench/results/``); where ``nccl+compile`` ran,
its ``goal`` holds the multi-GPU goal's verdict per mode (:func:`goal_vs_nccl`), else null.

Usage, from the repository root: ``python -m tutorials.allreduce_rmsnorm.benchmark --shapes 4096x8192
128x8192`` (world 1) or the same under ``torchrun --nproc_per_node=N -m``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..common.ranks import every_rank
from ..common.run_metadata import run_metadata
from ..common.timing import percentile, rank_max
from .allreduce_rmsnorm import DTYPE_NAMES, AllReduceRMSNorm, parse_tuning
from .plan import Push, Tuning, effective_bytes
from .reference import make_inputs

REPO = Path(__file__).resolve().parents[2]
EPS = 1e-6
# The multi-GPU goal (one GPU per rank): no slower than NCCL all_reduce + torch.compile at any T, and at least
# GOAL_SMALL_T_SPEEDUP times faster at T <= GOAL_SMALL_T.
GOAL_SMALL_T = 128
GOAL_SMALL_T_SPEEDUP = 1.3


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float):
    """Residual add + RMSNorm with the op's numerics (fp32 math, one rounding per output)."""
    r = x.float() + residual.float()
    norm = r * torch.rsqrt(r.square().mean(-1, keepdim=True) + eps) * weight.float()
    return norm.to(x.dtype), r.to(x.dtype)


def goal_vs_nccl(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The multi-GPU goal's verdict from the benchmark rows; None when ``nccl+compile`` was not timed.

    For every (mode, T, H) with both the fused op and ``nccl+compile`` timed: speedup = baseline p50 /
    fused p50, met when >= GOAL_SMALL_T_SPEEDUP at T <= GOAL_SMALL_T and >= 1 otherwise. ``met`` per
    mode is whether every case of that mode met its target.
    """
    base = {(r["mode"], r["T"], r["H"]): r["p50_us"] for r in rows if r["impl"] == "nccl+compile" and "p50_us" in r}
    cases = []
    for r in rows:
        key = (r["mode"], r["T"], r["H"])
        if r["impl"] != "fused" or "p50_us" not in r or key not in base:
            continue
        target = GOAL_SMALL_T_SPEEDUP if r["T"] <= GOAL_SMALL_T else 1.0
        speedup = base[key] / r["p50_us"]
        cases.append({"mode": r["mode"], "T": r["T"], "H": r["H"], "fused_p50_us": r["p50_us"],
                      "baseline_p50_us": base[key], "speedup": speedup, "target": target, "met": speedup >= target})
    if not cases:
        return None
    modes = sorted({c["mode"] for c in cases})
    return {"baseline": "nccl+compile", "cases": cases,
            "met": {m: all(c["met"] for c in cases if c["mode"] == m) for m in modes}}


class Timer:
    """Times ``fn`` per repeat (eager or graph), rank maximum per repeat; see the module docstring."""

    def __init__(self, world: int, mode: str, inner: int, warmup: int, repeats: int) -> None:
        self.world, self.mode, self.inner, self.warmup, self.repeats = world, mode, inner, warmup, repeats

    def _barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            torch.cuda.synchronize()
            dist.barrier()

    def run(self, fn: Callable[[], Any]) -> list[float]:
        """Per-repeat latency of one call in microseconds (rank max)."""
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        step = fn
        calls = 1
        if self.mode == "graph":
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(self.inner):
                    fn()
            step, calls = graph.replay, self.inner
            step()
            torch.cuda.synchronize()
        times = []
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(self.repeats):
            self._barrier()
            start.record()
            step()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) * 1e3 / calls)
        if self.world > 1:
            times = rank_max(every_rank(times))
        return times


def _baselines(world: int, shared_gpu: bool, x, residual, weight, compiled) -> dict[str, Callable | str]:
    """Each baseline's callable, or the reason it cannot run here."""
    out: dict[str, Callable | str] = {}
    if world == 1:
        out["compile"] = lambda: compiled(x, residual, weight, EPS)
        return out
    if shared_gpu:
        out["nccl+compile"] = "NCCL refuses several ranks on one GPU (shared-GPU mode)"
        out["flashinfer"] = "needs one GPU per rank"
        return out
    import torch.distributed as dist

    buf = (
        x.clone()
    )  # reduced in place each call, like a GEMM output; values may overflow, time does not change

    def nccl_compile():
        dist.all_reduce(buf)
        return compiled(buf, residual, weight, EPS)

    out["nccl+compile"] = nccl_compile
    try:
        import flashinfer.comm  # noqa: F401

        out["flashinfer"] = "importable, but its workspace setup is not wired into this benchmark yet"
    except Exception as exc:  # any import failure means "not available here"
        out["flashinfer"] = f"not importable: {type(exc).__name__}: {exc}"[:120]
    return out


def _variant(text: str) -> tuple[str, Push, Tuning]:
    """``PUSH:N[:WARPS[:ROWS]]`` of ``--variants`` as (text, Push, Tuning)."""
    push, _, tuning = text.partition(":")
    try:
        if push not in ("puts", "stores"):
            raise ValueError(f"PUSH must be puts or stores, got {push!r}")
        return text, Push[push.upper()], parse_tuning(tuning)
    except ValueError as exc:
        raise SystemExit(f"--variants {text!r}: {exc}") from exc


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--shapes", nargs="+", default=["4096x8192", "128x8192", "64x8192", "16x8192", "1x8192"], help="TxH"
    )
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    parser.add_argument("--mode", choices=["graph", "eager"], nargs="+", default=["graph", "eager"])
    parser.add_argument("--inner", type=int, default=20, help="calls per graph replay")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument(
        "--variants", nargs="*", default=[], metavar="PUSH:N[:WARPS[:ROWS]]",
        help="also time the op with push PUSH (puts or stores), N programs per SM, warps and row batch, "
        "e.g. puts:1 stores:2:4:2",
    )  # fmt: skip
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    variants = [_variant(v) for v in args.variants]
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if variants and world == 1:
        print("--variants ignored at world 1: they change only how rows reach peers and the waiting kernels' launch")
    shared_gpu = os.environ.get("TRITON_RAW_SHARED_GPU", "") not in ("", "0")
    if world > 1:
        from triton_raw_ext import runtime

        runtime.init()
    else:
        torch.cuda.set_device(0)
    rank = int(os.environ.get("RANK", "0"))
    dtype = {v: k for k, v in DTYPE_NAMES.items()}[args.dtype]
    shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes]
    # One static graph per shape; with fullgraph=True, dynamo's default limit of 8 graphs per function
    # would raise at the 9th shape (the multi-GPU goal's table has 10).
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, len(shapes))
    compiled = torch.compile(add_rmsnorm, dynamic=False, fullgraph=True)
    rows = []
    ops: dict[tuple[int, str], AllReduceRMSNorm] = {}
    for tokens, hidden in shapes:
        max_tokens = max(t for t, h in shapes if h == hidden)
        if (hidden, "fused") not in ops:
            ops[hidden, "fused"] = AllReduceRMSNorm(hidden, dtype, max_tokens)
            for text, push, tuning in variants if world > 1 else []:
                ops[hidden, f"fused[{text}]"] = AllReduceRMSNorm(hidden, dtype, max_tokens, tuning=tuning, push=push)
        op = ops[hidden, "fused"]
        x, residual, weight = make_inputs(0, rank, tokens, hidden, dtype, op.device)
        outs = (torch.empty_like(x), torch.empty_like(x))
        impls: dict[str, Callable | str] = {
            name: lambda f=fused, x=x, r=residual, w=weight, o=outs: f(x, r, w, EPS, o)
            for (h, name), fused in ops.items()
            if h == hidden
        }
        impls.update(_baselines(world, shared_gpu, x, residual, weight, compiled))
        nbytes = effective_bytes(tokens, hidden, x.element_size())
        for mode in args.mode:
            timer = Timer(world, mode, args.inner, args.warmup, args.repeats)
            for name, impl in impls.items():
                row: dict[str, Any] = {
                    "impl": name,
                    "mode": mode,
                    "T": tokens,
                    "H": hidden,
                    "dtype": args.dtype,
                    "world": world,
                    "bytes": nbytes,
                }
                if isinstance(impl, str):
                    row["skipped"] = impl
                else:
                    us = timer.run(impl)
                    p50 = percentile(us, 50)
                    row.update(
                        p50_us=p50,
                        p90_us=percentile(us, 90),
                        p99_us=percentile(us, 99),
                        mean_us=statistics.fmean(us),
                        tbps_p50=nbytes / (p50 * 1e-6) / 1e12,
                    )
                    if name.startswith("fused"):
                        fused = ops[hidden, name]
                        row.update(algo=fused.algorithm_for(tokens).name.lower(), push=fused.push.name.lower())
                rows.append(row)
    if rank == 0:
        width = max(13, *(len(r["impl"]) for r in rows))
        print(
            f"{'impl':>{width}} {'mode':>5} {'T':>5} {'H':>5} {'p50 us':>8} "
            f"{'p90 us':>8} {'p99 us':>8} {'TB/s':>6}"
        )
        for r in rows:
            if "skipped" in r:
                print(f"{r['impl']:>{width}} {r['mode']:>5} {r['T']:5d} {r['H']:5d}  skipped: {r['skipped']}")
            else:
                print(
                    f"{r['impl']:>{width}} {r['mode']:>5} {r['T']:5d} {r['H']:5d} {r['p50_us']:8.2f} "
                    f"{r['p90_us']:8.2f} {r['p99_us']:8.2f} {r['tbps_p50']:6.2f}"
                )
        goal = goal_vs_nccl(rows)
        if goal is not None:
            print(f"goal vs nccl+compile (>= {GOAL_SMALL_T_SPEEDUP}x at T <= {GOAL_SMALL_T}, >= 1x elsewhere):")
            for c in goal["cases"]:
                print(f"  {c['mode']:>5} T={c['T']:<5} H={c['H']:<5} {c['speedup']:5.2f}x  "
                      f"{'met' if c['met'] else 'NOT MET'}")
            print("  " + ", ".join(f"{m}: {'MET' if ok else 'NOT MET'}" for m, ok in goal["met"].items()))
        meta = {
            **run_metadata(), "world": world, "shared_gpu": shared_gpu, "warmup": args.warmup, "repeats": args.repeats,
            "inner": args.inner, "eps": EPS, "variants": args.variants if world > 1 else [],
        }  # fmt: skip
        out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else REPO / "bench" / "results"
        path = args.json or out_dir / f"bench_t1_w{world}_{datetime.date.today().isoformat()}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"meta": meta, "rows": rows, "goal": goal}, indent=1))
        print(f"wrote {path}")
    if world > 1:
        from triton_raw_ext import runtime

        torch.cuda.synchronize()
        runtime.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
