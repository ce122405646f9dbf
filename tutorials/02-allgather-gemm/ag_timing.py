"""Timing helpers of the benchmark: per-repeat device-event timing and summaries (pure parts CPU-tested).

Each timed repeat: (world > 1) a CPU barrier so the ranks start together, an L2 flush, a short
device sleep that lets the host enqueue the whole operation before the start event fires (so
Python launch overhead is not timed), then events around the operation. The per-repeat times of
all ranks are reduced with a max per repeat (the collective is as slow as its slowest rank).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

L2_FLUSH_BYTES = 256 * 1024 * 1024
HOST_LEAD_CYCLES = 200_000  # ~0.1 ms at the H200's clock: covers one Triton launch from Python


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation between order statistics."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(times_ms: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/mean/min of a list of times in milliseconds."""
    return {"p50": percentile(times_ms, 50), "p90": percentile(times_ms, 90), "p99": percentile(times_ms, 99),
            "mean": sum(times_ms) / len(times_ms), "min": min(times_ms), "n": len(times_ms)}


def rank_max(per_rank: Sequence[Sequence[float]]) -> list[float]:
    """Element-wise max over ranks of equally long per-repeat time lists."""
    lengths = {len(t) for t in per_rank}
    if len(lengths) != 1:
        raise ValueError(f"ranks timed different numbers of repeats: {sorted(lengths)}")
    return [max(column) for column in zip(*per_rank, strict=True)]


def time_repeats(fn: Callable[[], object], repeats: int, barrier: Callable[[], None] | None = None) -> list[float]:
    """Device time in ms of each of ``repeats`` calls of ``fn`` on the current stream (see module doc)."""
    import torch

    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in events:
        torch.cuda.synchronize()
        if barrier is not None:
            barrier()
        flush.zero_()
        torch.cuda._sleep(HOST_LEAD_CYCLES)
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]
