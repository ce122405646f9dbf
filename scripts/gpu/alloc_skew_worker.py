"""Symmetric allocations while a PE's stream barrier is still running (one step of the hang probe).

Run under torchrun, one PE per GPU (scripts/gpu/multi_gpu_hang_probe.sh does)::

    python3 -m torch.distributed.run --standalone --nproc_per_node=2 scripts/gpu/alloc_skew_worker.py --rounds 200

Each of ``--rounds`` rounds makes one small symmetric tensor with ``runtime.zeros`` (nvshmem_malloc, a
zero fill, then ``nvshmemx_barrier_all_on_stream`` on the current stream), with the last PE's stream
first held back by ``--sleep-us`` of GPU sleep. So the other PEs' stream barriers are still waiting
for the last PE when their hosts start the next allocation, whose nvshmem_malloc runs a barrier of
the same team on NVSHMEM's internal stream. ``runtime.empty`` waits for the GPU before nvshmem_malloc
(runtime/csrc/triton_raw_nvshmem_host.cu, trx_malloc says why), so this must finish.

``--raw-malloc`` is the control: the same rounds calling NVSHMEM's ``nvshmem_malloc`` directly (no wait
for the GPU first) followed by ``runtime.barrier_all()``: the two barriers overlap, and the job is
expected to hang in a later barrier (the probe's step limit ends it).

Prints ``PROBE_RESULT {json}`` per PE when every round finished; exit status 0.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time

import torch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--sleep-us", type=float, default=50.0, help="GPU sleep on the last PE's stream per round")
    parser.add_argument("--raw-malloc", action="store_true", help="control: nvshmem_malloc without the GPU wait")
    args = parser.parse_args(argv)

    from triton_raw_ext import runtime

    runtime.init()
    me, n = runtime.my_pe(), runtime.n_pes()
    clock_hz = torch.cuda.get_device_properties(torch.cuda.current_device()).clock_rate * 1e3
    sleep_cycles = int(args.sleep_us * 1e-6 * clock_hz)
    nvshmem_malloc = None
    if args.raw_malloc:
        session = runtime.lifecycle.current()
        nvshmem_malloc = ctypes.CDLL(session.lib.trx_host_library_path().decode()).nvshmem_malloc
        nvshmem_malloc.restype, nvshmem_malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    kept = []
    start = time.perf_counter()
    for i in range(args.rounds):
        if me == n - 1:
            torch.cuda._sleep(sleep_cycles)
        if nvshmem_malloc is None:
            kept.append(runtime.zeros(16, torch.int32))
        else:
            kept.append(nvshmem_malloc(64))
            runtime.barrier_all()
        if i % 50 == 0:
            print(f"rank {me}: round {i} queued ({time.perf_counter() - start:.2f} s)", flush=True)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    result = {"rank": me, "world": n, "rounds": args.rounds, "sleep_us": args.sleep_us,
              "raw_malloc": args.raw_malloc, "seconds": round(seconds, 3), "ok": True}  # fmt: skip
    print(f"PROBE_RESULT {json.dumps(result)}", flush=True)
    if nvshmem_malloc is None:
        del kept
        runtime.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
