"""Timing of the tutorials' benchmark repeats, and the summaries of those times.

A collective operation is as slow as its slowest rank, so per-repeat times are reduced across ranks
with :func:`rank_max` before they are summarised with :func:`percentile` / :func:`summarize` (pure
Python, no GPU).

:func:`time_repeats` (needs a GPU; not CPU-tested) times each repeat: (world > 1) a CPU barrier so
the ranks start together, an L2 flush, a device sleep that lets the host enqueue the whole operation
before the start event fires (so Python and launch overhead is not timed), then events around the
operation. The host time of each enqueue is measured too: when it exceeds the sleep, the GPU waited
for the host and the device time includes that wait, which a benchmark reports (``host_enqueue``
against ``host_lead_us``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

L2_FLUSH_BYTES = 256 * 1024 * 1024
SLEEP_CYCLES_PER_US = 2_000  # torch.cuda._sleep counts SM clock cycles: about 2 GHz on the H200
# 1 ms: AG-GEMM's host work per call (pushes and flag writes on a side stream, descriptors, the launch)
# takes 0.3-0.8 ms; a shorter lead times it as device time (bench/results/2026-11-29-2xH200-t2-host-lead/).
DEFAULT_HOST_LEAD_US = 1000.0


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


def time_repeats(
    fn: Callable[[], object], repeats: int, barrier: Callable[[], None] | None = None,
    host_lead_us: float = DEFAULT_HOST_LEAD_US,
) -> tuple[list[float], list[float]]:  # fmt: skip
    """(device ms, host enqueue ms) of each of ``repeats`` calls of ``fn`` on the current stream."""
    import torch

    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    host_ms = []
    for start, end in events:
        torch.cuda.synchronize()
        if barrier is not None:
            barrier()
        flush.zero_()
        torch.cuda._sleep(int(host_lead_us * SLEEP_CYCLES_PER_US))
        start.record()
        t0 = time.perf_counter()
        fn()
        host_ms.append((time.perf_counter() - t0) * 1e3)
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events], host_ms
