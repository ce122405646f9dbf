"""NVSHMEM ring through a raw CUDA function, at world size 1 and with N PEs sharing one GPU.

Usage: ``python -m scripts.gpu.nvshmem_ring --world 1 2 --steps 20 --out DIR`` (repository root).
For each world size it starts that many processes (gloo for torch.distributed,
``TRITON_RAW_SHARED_GPU=1`` so all PEs sit on GPU 0), each running
``examples.kernels.raw_kernels.ring_kernel`` for ``--steps`` steps: PE p sends a block to PE p+1
with put-with-signal, waits for its own signal, checks what arrived from p-1, the value
nvshmem_int_p delivered, and that nvshmem_ptr reaches the peer. Every process has a timeout.
Writes JSON (the run's metadata, per-world results and step latency medians).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from tutorials.common.run_metadata import run_metadata

ROOT = Path(__file__).resolve().parents[2]


def worker(steps: int, block: int) -> dict:
    import torch
    import torch.distributed as dist

    from examples.kernels.raw_kernels import ring_kernel
    from triton_raw_ext import runtime

    dist.init_process_group("gloo")
    runtime.init()
    me, n = runtime.my_pe(), runtime.n_pes()
    prev = (me - 1) % n
    buf = runtime.zeros((2 * block,), torch.int32)
    slot = runtime.zeros((1,), torch.int32)
    sig = runtime.zeros((1,), torch.int64)
    out = torch.empty((block + 1,), device="cuda", dtype=torch.int32)
    ramp = torch.arange(block, device="cuda", dtype=torch.int32)
    times, errors = [], []
    for step in range(1, steps + 1):
        buf[:block] = ramp + 1000 * me + 100_000 * step
        out.fill_(-1)
        slot.fill_(-1)
        runtime.barrier_all()
        torch.cuda.synchronize()
        start = time.perf_counter()
        ring_kernel[(1,)](buf, slot, sig, out, step, BLOCK=block)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        want = ramp + 1000 * prev + 100_000 * step
        if not torch.equal(out[:block], want):
            errors.append(f"step {step}: block from PE {prev} wrong")
        if out[block].item() != 1:
            errors.append(f"step {step}: nvshmem_ptr to the peer is NULL")
        if slot.item() != prev:
            errors.append(f"step {step}: nvshmem_int_p delivered {slot.item()}, expected {prev}")
        if sig.item() != step:
            errors.append(f"step {step}: signal is {sig.item()}, expected {step}")
    runtime.barrier_all()
    torch.cuda.synchronize()
    runtime.finalize()
    dist.destroy_process_group()
    return {"pe": me, "n_pes": n, "errors": errors[:5], "step_s_median": sorted(times)[len(times) // 2]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(world: int, steps: int, block: int, timeout_s: float) -> dict:
    port = free_port()
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TRITON_RAW_SHARED_GPU": "1"}
        cmd = [sys.executable, "-m", __spec__.name, "--worker", "--steps", str(steps), "--block", str(block)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline = time.time() + timeout_s
    ranks = []
    for rank, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            return {"world": world, "ok": False, "error": f"timed out after {timeout_s} s (rank {rank})"}
        if p.returncode != 0:
            for q in procs:
                q.kill()
            return {"world": world, "ok": False, "error": f"rank {rank} exit {p.returncode}: {err[-2000:]}"}
        ranks.append(json.loads(out.strip().splitlines()[-1]))
    ok = all(not r["errors"] for r in ranks)
    return {"world": world, "ok": ok, "ranks": ranks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--world", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.steps, args.block)))
        return
    results = [run_world(w, args.steps, args.block, args.timeout) for w in args.world]
    record = {
        "benchmark": "nvshmem_ring",
        **run_metadata(),
        "note": "several PEs share one GPU (shared-GPU mode): correctness only, timings say nothing "
                "about multi-GPU performance",
        "results": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"nvshmem_ring-{datetime.date.today()}.json"
    path.write_text(json.dumps(record, indent=1))
    for r in results:
        print(f"world {r['world']}: {'PASS' if r['ok'] else 'FAIL'} {r.get('error', '')[:300]}")
    print(f"-> {path}")
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
