"""Bandwidth of an elementwise raw CUDA function against the same operation in pure Triton.

Both kernels read x and write x + 1 (fp32) over ``--gib`` GiB of input; timed in one run with
CUDA events (triton.testing.do_bench, median) after warmup, alternating the two variants so that
clock drift affects both. Writes JSON (the run's metadata, medians, ratio) to --out.
Goal: raw >= 0.98x the bandwidth of pure Triton. Run from the repository root:
``python -m bench.elementwise_bandwidth``.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import torch
import triton

from examples.kernels.raw_kernels import elementwise_kernel, triton_add_one_kernel
from tutorials.common.run_metadata import run_metadata


def measure(kernel, x: torch.Tensor, y: torch.Tensor, block: int) -> float:
    n = x.numel()
    grid = (triton.cdiv(n, block),)
    return triton.testing.do_bench(
        lambda: kernel[grid](x, y, n, BLOCK=block), warmup=100, rep=500, return_mode="median"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=float, default=2.0, help="input size in GiB (output is the same)")
    parser.add_argument("--block", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the median is reported")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()

    n = int(args.gib * (1 << 30)) // 4
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    results: dict[str, list[float]] = {"raw": [], "triton": []}
    for _ in range(args.rounds):
        for name, kernel in (("raw", elementwise_kernel), ("triton", triton_add_one_kernel)):
            y.fill_(float("nan"))
            results[name].append(measure(kernel, x, y, args.block))
            torch.testing.assert_close(y, x + 1.0, rtol=0, atol=0)
    moved = 2 * n * 4
    median = {k: sorted(v)[len(v) // 2] for k, v in results.items()}
    tbps = {k: moved / (ms * 1e-3) / 1e12 for k, ms in median.items()}
    record = {
        "benchmark": "elementwise_bandwidth",
        **run_metadata(),
        "elements": n,
        "bytes_moved": moved,
        "block": args.block,
        "ms_samples": results,
        "ms_median": median,
        "tb_per_s": tbps,
        "raw_over_triton_bandwidth": tbps["raw"] / tbps["triton"],
        "goal": ">= 0.98",
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"elementwise_bandwidth-{datetime.date.today()}.json"
    path.write_text(json.dumps(record, indent=1))
    ratio = record["raw_over_triton_bandwidth"]
    print(f"raw {tbps['raw']:.3f} TB/s  triton {tbps['triton']:.3f} TB/s  ratio {ratio:.4f}  -> {path}")


if __name__ == "__main__":
    main()
