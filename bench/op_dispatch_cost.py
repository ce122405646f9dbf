"""Host cost of calling a torch op registered with ``@torch.library.custom_op`` against the same op
registered through ``torch.library.Library`` (how ``tutorials.common.custom_ops`` defines the tutorials'
ops), on the CPU, in one run.

Both ops have the schema of ``triton_raw_ext::allreduce_rmsnorm`` (a tensor written in place, a float,
an int) and the same body (one ``torch.empty_like``), registered for CPU tensors in throwaway
namespaces; the body called as a plain Python function is the floor. Each is called ``--calls`` times
back to back after a warmup, five rounds alternating the three; the JSON holds every round's µs per
call and the medians. Run from the repository root: ``python -m bench.op_dispatch_cost [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from tutorials.common.run_metadata import run_metadata


def body(x: torch.Tensor, residual: torch.Tensor, eps: float, handle: int) -> torch.Tensor:
    return torch.empty_like(x)


def _custom_op() -> Callable[..., torch.Tensor]:
    op = torch.library.custom_op("bench_dispatch_custom::f", mutates_args=("residual",), device_types="cpu")(body)
    op.register_fake(body)
    return torch.ops.bench_dispatch_custom.f


def _library_op(lib: torch.library.Library) -> Callable[..., torch.Tensor]:
    lib.define("f(Tensor x, Tensor(a!) residual, float eps, int handle) -> Tensor")
    lib.impl("f", body, "CPU")
    torch.library.register_fake("bench_dispatch_library::f", body, lib=lib)
    return torch.ops.bench_dispatch_library.f


def us_per_call(fn: Callable[[], object], calls: int) -> float:
    for _ in range(calls // 10):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--out", type=Path, help="folder for op_dispatch_cost.json")
    args = parser.parse_args(argv)
    lib = torch.library.Library("bench_dispatch_library", "DEF")
    x, residual = torch.zeros(16), torch.zeros(16)
    ops = {"python function": body, "custom_op": _custom_op(), "Library": _library_op(lib)}
    rounds: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(5):
        for name, op in ops.items():
            rounds[name].append(us_per_call(lambda op=op: op(x, residual, 1e-6, 0), args.calls))
    medians = {name: statistics.median(v) for name, v in rounds.items()}
    for name, us in medians.items():
        print(f"{name:16} {us:7.2f} us per call")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        result = {**run_metadata(), "calls": args.calls, "rounds_us": rounds, "median_us": medians}
        (args.out / "op_dispatch_cost.json").write_text(json.dumps(result, indent=1))
        print(f"-> {args.out / 'op_dispatch_cost.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
