"""Ping-pong of raw NVSHMEM put-with-signal between PEs on different GPUs (one step of the hang probe).

Run under torchrun, one PE per GPU (scripts/gpu/multi_gpu_hang_probe.sh does)::

    python3 -m torch.distributed.run --standalone --nproc_per_node=2 scripts/gpu/hang_probe_worker.py \
        --iters 2000 --grid 1

Each of ``--iters`` launches of a tiny Triton kernel, queued back to back with no host sync between
them, has every program p of every PE write a row of ints that encodes (iteration, PE, p), push it to
the next PE with signal word p set to the iteration number (``--variant t1``: a non-blocking put,
nvshmem_quiet, then the signal; ``--variant test``: ``nvshmemx_putmem_signal_block``), then
wait until its own signal word p reaches the iteration number, and compare the row that arrived from
the previous PE with what that PE must have sent (mismatches are counted on the GPU). Received rows
alternate between two slots by iteration parity, so a PE one iteration ahead never overwrites a row
still being read. At world 2 the next and the previous PE are the same peer: a ping-pong.

``--variant t1`` calls Tutorial 1's own raw functions (allreduce-device.cu: put_row, complete_puts
and signal_set, and wait_ge, where thread 0 spins then __syncthreads); ``--variant test`` the test
kernels' (test/kernels/shmem-device.cu: put_signal_block, and wait_signal, where every thread spins). ``--barrier`` adds
``runtime.barrier_all()`` (nvshmemx_barrier_all_on_stream) after every launch, ``--sync-every N`` a
host ``torch.cuda.synchronize()`` every N launches. The kernel is compiled and loaded before any PE
communicates (``triton_raw_ext.preload``, then ``runtime.host_barrier``), and does not specialise on
the iteration or the PE, so no module is loaded while a peer waits.

While the launches run, a monitor thread copies the kernel's progress counters (per program: the
iteration it entered, whose put returned, whose wait returned) and the signal words to the host on a
side stream every ``--report-s`` seconds. When they stop changing for ``--stall-s`` seconds it prints
where each PE's programs wait and what their signal words hold, a line ``PROBE_HANG {json}``, and ends
the process with exit status 3 (instead of waiting for the step's timeout). At the end every PE
checks the data and prints ``PROBE_RESULT {json}``; exit status 0 when everything arrived intact, 1
when not.

``--compile-only`` (no torchrun, no NVSHMEM init) compiles the kernels for the given grids into
Triton's cache, so the timed steps do not include the compile. ``--warm-t3 --t3-world 2`` does the
same for the kernels Tutorial 3's check builds for its ``--t3-cases`` at that world size (what
``MegaMoE._preload`` compiles before it loads them), in bf16.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[2]
for _extra in (ROOT / "test", ROOT / "tutorials" / "01-allreduce-rmsnorm"):
    if str(_extra) not in sys.path:
        sys.path.insert(0, str(_extra))

from arn_kernels import (  # noqa: E402  Tutorial 1's raw functions (allreduce-device.cu)
    complete_puts,
    put_row,
    signal_set,
    wait_ge,
)
from kernels.raw_kernels import put_signal_block, wait_signal  # noqa: E402  test/kernels/shmem-device.cu

HANG_EXIT_CODE = 3
PATTERN_PES = tl.constexpr(8)  # rows encode the sending PE in 3 bits: worlds up to 8
# The bound of wait_ge in the t1 variant: far above --stall-s, so that the monitor reports a stall first;
# it only keeps a lost peer from holding the GPU for ever.
T1_WAIT_MS = tl.constexpr(600_000)


@triton.jit
def _expected(it, src, p, n, offs, BLOCK: tl.constexpr):
    """The row program p of PE src sends at iteration it (int32)."""
    return ((it * PATTERN_PES + src) * n + p) * BLOCK + offs


@triton.jit(do_not_specialize=["it", "me", "right", "left"])
def pingpong_t1_kernel(send, recv, sig, prog, err, it, me, right, left, BLOCK: tl.constexpr):
    """One iteration with Tutorial 1's raw functions. ``send`` [grid, BLOCK] int32 and ``recv``
    [2, grid, BLOCK] int32 and ``sig`` [grid] int64 are symmetric; ``prog`` [3, grid] int64 and
    ``err`` [1] int32 are local."""
    p = tl.program_id(0)
    n = tl.num_programs(0)
    offs = tl.arange(0, BLOCK)
    tl.store(prog + p, it)  # entered
    row = send + p * BLOCK
    tl.store(row + offs, _expected(it, me, p, n, offs, BLOCK))
    tl.debug_barrier()  # the block's stores are visible to the whole block, which reads them in the put
    slot = recv + ((it % 2) * n + p) * BLOCK
    put_row(slot, row, BLOCK * 4, right)
    complete_puts()
    signal_set(sig + p, it.to(tl.int64), right)
    tl.store(prog + n + p, it)  # put returned
    wait_ge(sig + p, it.to(tl.int64), me, left, T1_WAIT_MS)
    tl.store(prog + 2 * n + p, it)  # wait returned
    got = tl.load(slot + offs, volatile=True)
    bad = tl.sum((got != _expected(it, left, p, n, offs, BLOCK)).to(tl.int32), axis=0)
    if bad > 0:
        tl.atomic_add(err, bad)


@triton.jit(do_not_specialize=["it", "me", "right", "left"])
def pingpong_test_kernel(send, recv, sig, prog, err, it, me, right, left, BLOCK: tl.constexpr):
    """The same iteration with the test kernels' raw functions (every thread waits)."""
    p = tl.program_id(0)
    n = tl.num_programs(0)
    offs = tl.arange(0, BLOCK)
    tl.store(prog + p, it)
    row = send + p * BLOCK
    tl.store(row + offs, _expected(it, me, p, n, offs, BLOCK))
    tl.debug_barrier()
    slot = recv + ((it % 2) * n + p) * BLOCK
    put_signal_block(slot, row, BLOCK * 4, sig + p, it.to(tl.int64), right)
    tl.store(prog + n + p, it)
    wait_signal(sig + p, it.to(tl.int64))
    tl.store(prog + 2 * n + p, it)
    got = tl.load(slot + offs, volatile=True)
    bad = tl.sum((got != _expected(it, left, p, n, offs, BLOCK)).to(tl.int32), axis=0)
    if bad > 0:
        tl.atomic_add(err, bad)


KERNELS = {"t1": pingpong_t1_kernel, "test": pingpong_test_kernel}


def expected_rows(it: int, src: int, grid: int, block: int):  # -> torch.Tensor [grid, block] int32 on cuda
    import torch

    p = torch.arange(grid, device="cuda", dtype=torch.int64)[:, None]
    offs = torch.arange(block, device="cuda", dtype=torch.int64)[None, :]
    return (((it * PATTERN_PES.value + src) * grid + p) * block + offs).to(torch.int32)


def describe(prog: list[int], sig: list[int], grid: int, err: int) -> dict:
    """What a progress snapshot says: how far the programs got and where they wait."""
    entered, put, waited = prog[:grid], prog[grid : 2 * grid], prog[2 * grid :]
    waiting = [p for p in range(grid) if waited[p] < entered[p]]
    seen = [p for p in waiting if sig[p] >= entered[p]]  # the signal is there, the wait did not return
    behind = [p for p in range(grid) if entered[p] < max(entered)]
    d = {
        "entered": [min(entered), max(entered)],
        "put_returned": [min(put), max(put)],
        "wait_returned": [min(waited), max(waited)],
        "signal": [min(sig), max(sig)],
        "programs_waiting": len(waiting),
        "programs_behind": len(behind),
        "waiting_with_signal_present": len(seen),
        "gpu_mismatches": err,
        "examples": [
            {"program": p, "waits_for": entered[p], "put_returned": put[p], "signal_holds": sig[p]}
            for p in (seen or waiting)[:4]
        ],
    }
    if seen:
        d["reading"] = "a signal word holds the awaited value but its wait has not returned"
    elif waiting and all(put[p] == entered[p] for p in waiting):
        d["reading"] = "programs wait for a signal the peer has not (visibly) set; their own puts returned"
    elif any(put[p] < entered[p] for p in range(grid)):
        d["reading"] = "a program is inside its put (put-with-signal did not return)"
    elif behind:
        d["reading"] = "some programs have not started this iteration (not resident or not launched)"
    else:
        d["reading"] = "no program of the running kernel is waiting (host or another kernel)"
    return d


class Monitor(threading.Thread):
    """Copies the progress counters and signal words to the host on a side stream; declares a hang."""

    def __init__(self, me: int, device: int, prog, sig, err, grid: int, report_s: float, stall_s: float) -> None:
        import torch

        super().__init__(name="hang-probe-monitor", daemon=True)
        self.me, self.device, self.grid = me, device, grid
        self.report_s, self.stall_s = report_s, stall_s
        self.sources = {"prog": prog, "sig": sig, "err": err}
        self.host = {k: torch.empty(v.shape, dtype=v.dtype, pin_memory=True) for k, v in self.sources.items()}
        self.side = torch.cuda.Stream(device=device)
        self.finished = threading.Event()
        self.enqueued = 0  # launches the host has queued so far (set by the launch loop)

    def snapshot(self) -> dict:
        import torch

        with torch.cuda.device(self.device), torch.cuda.stream(self.side):
            for k, v in self.sources.items():
                self.host[k].copy_(v, non_blocking=True)
        self.side.synchronize()
        return describe(self.host["prog"].tolist(), self.host["sig"].tolist(), self.grid, int(self.host["err"][0]))

    def run(self) -> None:
        import torch

        torch.cuda.set_device(self.device)
        last, since = None, time.monotonic()
        while not self.finished.wait(self.report_s):
            print(f"rank {self.me}: monitor: copying the GPU counters", flush=True)
            snap = self.snapshot()
            key = (snap["entered"], snap["put_returned"], snap["wait_returned"], snap["signal"])
            now = time.monotonic()
            if key != last:
                last, since = key, now
            stalled = now - since
            snap["host_enqueued"] = self.enqueued
            print(f"rank {self.me}: GPU progress (no change for {stalled:.0f} s): {json.dumps(snap)}", flush=True)
            if stalled >= self.stall_s and not self.finished.is_set():
                record = {"rank": self.me, "stalled_s": round(stalled, 1), **snap}
                print(f"PROBE_HANG {json.dumps(record)}", flush=True)
                sys.stderr.flush()
                os._exit(HANG_EXIT_CODE)


def resolve_grid(spec: str) -> int:
    if spec == "sms":
        import torch

        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return int(spec)


def compile_only(args: argparse.Namespace) -> int:
    import torch

    for variant in args.variants:
        for spec in args.grids:
            grid = resolve_grid(spec)
            start = time.perf_counter()
            KERNELS[variant].warmup(torch.int32, torch.int32, torch.int64, torch.int64, torch.int32, 2, 2, 2, 2,
                                    grid=(grid,), BLOCK=args.block, num_warps=args.warps)  # fmt: skip
            print(f"compiled {variant} grid {grid}: {time.perf_counter() - start:.1f} s", flush=True)
    return 0


T3_DIR = ROOT / "tutorials" / "03-megamoe"


def t3_warm_jobs(world: int, case_names: list[str]) -> list[tuple[str, object, list, dict]]:
    """(name, JITFunction, warmup args, warmup kwargs) of every kernel MegaMoE preloads for the bf16
    check cases ``case_names`` at ``world`` PEs, as ``MegaMoE._preload`` passes them (one entry per
    distinct specialisation)."""
    if str(T3_DIR) not in sys.path:
        sys.path.insert(0, str(T3_DIR))
    from megamoe import _SIGNATURE_DTYPES, CASES
    from moe_config import MoEConfig, choose_tiles
    from moe_launch import barrier_launch, launches

    jobs, seen = [], set()
    for name in case_names:
        for h, i, e, k, t_max in CASES[name]:
            if e % world:
                continue  # megamoe.py skips these cases too
            cfg = MoEConfig(h, i, e, k, t_max, world, "bf16")
            tiles = choose_tiles(t_max * world * k / e, h, i)
            for launch in [*launches(cfg, tiles, t_max), *([barrier_launch(cfg)] if world > 1 else [])]:
                args = [_SIGNATURE_DTYPES.get(sig, 2) for _, _, sig in launch.params]
                kwargs = dict(launch.constexprs, grid=launch.grid, num_warps=launch.num_warps,
                              num_stages=launch.num_stages)  # fmt: skip
                key = (launch.name, tuple(sorted(launch.constexprs.items())), launch.num_warps, launch.num_stages)
                if key not in seen:
                    seen.add(key)
                    jobs.append((f"{launch.name} {h}x{i} E{e} k{k}", launch.fn, args, kwargs))
    return jobs


def _warm_t3_job(world: int, case_names: list[str], index: int) -> str:
    """Compile job ``index`` of :func:`t3_warm_jobs` (in a pool process)."""
    name, fn, wargs, kwargs = t3_warm_jobs(world, case_names)[index]
    t0 = time.perf_counter()
    fn.warmup(*wargs, **kwargs)
    return f"compiled T3 {name} (world {world}): {time.perf_counter() - t0:.1f} s"


def warm_t3(args: argparse.Namespace) -> int:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    start = time.perf_counter()
    count = len(t3_warm_jobs(args.t3_world, args.t3_cases))
    spawn = multiprocessing.get_context("spawn")  # each process starts CUDA itself (the target query)
    with ProcessPoolExecutor(max_workers=max(1, args.jobs), mp_context=spawn) as pool:
        futures = [pool.submit(_warm_t3_job, args.t3_world, args.t3_cases, i) for i in range(count)]
        for future in futures:
            print(future.result(), flush=True)
    print(f"{count} T3 kernels in {time.perf_counter() - start:.1f} s", flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    import torch

    from triton_raw_ext import runtime
    from triton_raw_ext.preload import preload

    t_start = time.perf_counter()
    runtime.init()  # device = LOCAL_RANK (TRITON_RAW_SHARED_GPU unset)
    me, n = runtime.my_pe(), runtime.n_pes()
    right, left = (me + 1) % n, (me - 1) % n
    device = torch.cuda.current_device()
    grid, block = resolve_grid(args.grid), args.block
    if n > PATTERN_PES.value or (args.iters + 1) * PATTERN_PES.value * grid * block >= 2**31:
        raise SystemExit(f"rows would overflow int32: n={n}, iters={args.iters}, grid={grid}, block={block}")
    fn = KERNELS[args.variant]
    print(f"rank {me}/{n}: GPU {device} ({torch.cuda.get_device_name(device)}), variant {args.variant}, grid {grid}, "
          f"block {block}, iters {args.iters}, barrier {args.barrier}, sync_every {args.sync_every}, "
          f"CUDA_LAUNCH_BLOCKING={os.environ.get('CUDA_LAUNCH_BLOCKING', '')} "
          f"NVSHMEM_DISABLE_CUDA_VMM={os.environ.get('NVSHMEM_DISABLE_CUDA_VMM', '')}", flush=True)  # fmt: skip
    send = runtime.zeros((grid * block,), torch.int32)
    recv = runtime.zeros((2 * grid * block,), torch.int32)
    sig = runtime.zeros((grid,), torch.int64)
    prog = torch.zeros((3 * grid,), dtype=torch.int64, device="cuda")
    err = torch.zeros((1,), dtype=torch.int32, device="cuda")
    t_load = time.perf_counter()
    kernel = preload(fn, torch.int32, torch.int32, torch.int64, torch.int64, torch.int32, 2, 2, 2, 2,
                     grid=(grid,), BLOCK=block, num_warps=args.warps)  # fmt: skip
    load_s = time.perf_counter() - t_load
    runtime.host_barrier()  # every PE has its kernel loaded before any PE launches it
    runtime.barrier_all()  # and every PE's buffers are zero
    torch.cuda.synchronize()
    print(f"rank {me}: init + alloc + preload {time.perf_counter() - t_start:.1f} s (preload {load_s:.1f} s); "
          f"starting {args.iters} iterations", flush=True)  # fmt: skip

    monitor = Monitor(me, device, prog, sig, err, grid, args.report_s, args.stall_s)
    monitor.start()
    start = time.perf_counter()
    same_kernel = True
    for it in range(1, args.iters + 1):
        launched = fn[(grid,)](send, recv, sig, prog, err, it, me, right, left, BLOCK=block, num_warps=args.warps)
        same_kernel = same_kernel and launched is kernel
        monitor.enqueued = it
        if args.barrier:
            runtime.barrier_all()
        if args.sync_every and it % args.sync_every == 0:
            torch.cuda.synchronize()
        if it % args.progress == 0 or it == args.iters:
            print(f"rank {me}: enqueued {it}/{args.iters} ({time.perf_counter() - start:.2f} s)", flush=True)
    print(f"rank {me}: all enqueued; torch.cuda.synchronize()", flush=True)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    monitor.finished.set()
    print(f"rank {me}: GPU done: {args.iters} iterations in {seconds:.2f} s "
          f"({seconds / args.iters * 1e6:.1f} us per iteration)", flush=True)  # fmt: skip

    errors = []
    if int(err.item()):
        errors.append(f"{int(err.item())} elements of received rows were wrong (counted on the GPU)")
    if not torch.all(prog == args.iters).item():
        errors.append(f"progress counters not all {args.iters}: {describe(prog.tolist(), sig.tolist(), grid, 0)}")
    if not torch.all(sig == args.iters).item():
        errors.append(f"signal words {sig.min().item()}..{sig.max().item()}, expected {args.iters}")
    rows = recv.view(2, grid, block)
    for it in range(max(1, args.iters - 1), args.iters + 1):
        if not torch.equal(rows[it % 2], expected_rows(it, left, grid, block)):
            errors.append(f"slot {it % 2} does not hold PE {left}'s rows of iteration {it}")
    result = {
        "rank": me, "world": n, "variant": args.variant, "grid": grid, "block": block, "iters": args.iters,
        "barrier": args.barrier, "sync_every": args.sync_every, "seconds": round(seconds, 4),
        "us_per_iter": round(seconds / args.iters * 1e6, 2), "preloaded_kernel_used": same_kernel,
        "ok": not errors, "errors": errors[:5],
    }  # fmt: skip
    print(f"PROBE_RESULT {json.dumps(result)}", flush=True)
    runtime.barrier_all()
    torch.cuda.synchronize()
    runtime.finalize()
    return 0 if not errors else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--grid", default="1", help="programs per launch: a number, or 'sms' (the GPU's SM count)")
    parser.add_argument("--block", type=int, default=256, help="int32 elements per row (a power of 2)")
    parser.add_argument("--warps", type=int, default=4)
    parser.add_argument("--variant", choices=sorted(KERNELS), default="t1")
    parser.add_argument("--barrier", action="store_true", help="runtime.barrier_all() after every launch")
    parser.add_argument("--sync-every", type=int, default=0, help="torch.cuda.synchronize() every N launches")
    parser.add_argument("--progress", type=int, default=500, help="print host progress every N launches")
    parser.add_argument("--report-s", type=float, default=3.0, help="print GPU progress this often while running")
    parser.add_argument("--stall-s", type=float, default=10.0, help="declare a hang after no GPU progress this long")
    parser.add_argument("--compile-only", action="store_true", help="compile for --grids and --variants, then exit")
    parser.add_argument("--grids", nargs="+", default=["1", "sms"])
    parser.add_argument("--variants", nargs="+", choices=sorted(KERNELS), default=sorted(KERNELS))
    parser.add_argument("--warm-t3", action="store_true", help="compile Tutorial 3's check kernels, then exit")
    parser.add_argument("--t3-world", type=int, default=2)
    parser.add_argument("--t3-cases", nargs="+", default=["small"])
    parser.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1), help="--warm-t3 processes")
    args = parser.parse_args(argv)
    if args.block & (args.block - 1):
        parser.error("--block must be a power of 2")
    if args.warm_t3:
        return warm_t3(args)
    return compile_only(args) if args.compile_only else run(args)


if __name__ == "__main__":
    sys.exit(main())
