"""Timing helpers of the benchmark: per-repeat device-event timing and summaries (pure parts CPU-tested).

Each timed repeat: (world > 1) a CPU barrier so the ranks start together, an L2 flush, a short
device sleep that lets the host enqueue the whole operation before the start event fires (so
Python launch overhead is not timed), then events around the operation. The per-repeat times of
all ranks are reduced with a max per repeat (the collective is as slow as its slowest rank); the
summaries come from :mod:`triton_raw_ext.timing`.
"""

from __future__ import annotations

from collections.abc import Callable

L2_FLUSH_BYTES = 256 * 1024 * 1024
HOST_LEAD_CYCLES = 200_000  # ~0.1 ms at the H200's clock: covers one Triton launch from Python


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
