"""Timing helpers of the benchmark: per-repeat device-event timing (needs a GPU; not CPU-tested).

Each timed repeat: (world > 1) a CPU barrier so the ranks start together, an L2 flush, a device
sleep that lets the host enqueue the whole operation before the start event fires (so Python and
launch overhead is not timed), then events around the operation. The host time of each enqueue is
measured too: when it exceeds the sleep, the GPU waited for the host and the device time includes
that wait, which the benchmark reports (``host_enqueue`` against ``host_lead_us``). The per-repeat
times of all ranks are reduced with a max per repeat (the collective is as slow as its slowest rank);
the summaries come from ``tutorials/common/timing.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

L2_FLUSH_BYTES = 256 * 1024 * 1024
SLEEP_CYCLES_PER_US = 2_000  # torch.cuda._sleep counts SM clock cycles: about 2 GHz on the H200
# 1 ms: AG-GEMM's host work per call (pushes and flag writes on a side stream, descriptors, the launch)
# takes 0.3-0.8 ms; a shorter lead times it as device time (bench/results/2026-11-29-2xH200-t2-host-lead/).
DEFAULT_HOST_LEAD_US = 1000.0


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
