"""Summaries of benchmark timings for the tutorials' ``benchmark.py`` (pure Python, no GPU).

A collective operation is as slow as its slowest rank, so per-repeat times are reduced across ranks
with :func:`rank_max` before they are summarised with :func:`percentile` / :func:`summarize`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


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
