"""GPU suite for triton_raw_ext.runtime: several NVSHMEM PEs sharing one GPU (shared-GPU mode).

Run through the suite runner, which installs the package, sets the NVLink-multicast-off variables
and starts MPS (PEs sharing one GPU need it):

    python3 -m scripts.gpu.suite runtime

For world sizes 1, 2 and 4 it runs PEs as subprocesses (gloo + TRITON_RAW_SHARED_GPU=1) that check:
init, put/get and put-with-signal + wait from kernels (raw NVSHMEM), barrier, peer() views, peer()
errors, symmetric tensors freed once. Then host on-stream put/get from a load_host helper at world 1:
NVSHMEM refuses host-initiated on-stream calls when PEs share a GPU in its default "limited MPG" mode,
and its full mode (each PE's MPS share set to 100/PEs) hung or faulted on the H200 (docs/runtime.md).
Then 20 init/finalize cycles in fresh processes, that a rank raising mid-run ends its peers with an
error in bounded time, and allocations while a peer's stream barrier still runs (2 PEs; one PE per
GPU on a host with two or more GPUs, where NVSHMEM's barriers run on the device, and there first,
without MPS: the runner runs ``--stages alloc_skew`` and ``--skip alloc_skew`` as two steps; else
sharing the GPU). Every subprocess has a timeout, so the suite cannot hang. Prints a PASS/FAIL table
as it goes and writes JSON (the run's metadata, per-check results and timings) to ``--out``
after every stage. Exit status: 0 when every check passed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tutorials.common.run_metadata import run_metadata

WORLD_SIZES = (1, 2, 4)
CYCLES = int(os.environ.get("RUNTIME_SUITE_CYCLES", "20"))
CORE_TIMEOUT_S = float(os.environ.get("RUNTIME_SUITE_CORE_TIMEOUT_S", "300"))  # includes the helpers' nvcc builds
CYCLE_TIMEOUT_S = 120.0
RAISE_BOUND_S = 90.0
PEER_FAILED_EXIT_CODE = 86  # triton_raw_ext.runtime.PEER_FAILED_EXIT_CODE (not imported here)
ALLOC_SKEW_ROUNDS = 200
ALLOC_SKEW_SLEEP_US = 50.0  # the last PE's stream is held back this long before each allocation
ALLOC_SKEW_TIMEOUT_S = 120.0

SUITE_HELPER_CU = r"""
#include <nvshmem.h>
#include <nvshmemx.h>
#include <stdint.h>
extern "C" {
void suite_put(void *dest, const void *src, size_t bytes, int pe, void *stream) {
    nvshmemx_putmem_on_stream(dest, src, bytes, pe, (cudaStream_t)stream);
}
void suite_get(void *dest, const void *src, size_t bytes, int pe, void *stream) {
    nvshmemx_getmem_on_stream(dest, src, bytes, pe, (cudaStream_t)stream);
}
}
"""


# ----------------------------------------------------------------------------------------------
# Worker side: one PE. Prints one line "RESULT <json>" with its sub-check results.
# ----------------------------------------------------------------------------------------------


def _suite_helper():  # -> ctypes.CDLL
    import ctypes

    from triton_raw_ext.runtime import load_host

    src = Path(tempfile.gettempdir()) / "triton_raw_suite" / "triton_raw_suite_helper.cu"
    src.parent.mkdir(parents=True, exist_ok=True)
    if not src.is_file() or src.read_text() != SUITE_HELPER_CU:
        tmp = src.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(SUITE_HELPER_CU)
        os.replace(tmp, src)
    lib = load_host(src)
    vp, sz, i32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    lib.suite_put.argtypes = [vp, vp, sz, i32, vp]
    lib.suite_get.argtypes = [vp, vp, sz, i32, vp]
    return lib


def _timed(results: dict, name: str, fn) -> None:
    start = time.perf_counter()
    print(f"check {name}: started", file=sys.stderr, flush=True)  # a hang shows where in stderr_tail
    try:
        fn()
        results[name] = {"ok": True, "seconds": round(time.perf_counter() - start, 4)}
    except Exception as exc:  # a failed sub-check is reported, the others still run
        results[name] = {"ok": False, "seconds": round(time.perf_counter() - start, 4), "error": repr(exc)[:500]}
    print(f"check {name}: {'ok' if results[name]['ok'] else 'FAILED'}", file=sys.stderr, flush=True)


def worker_core() -> dict:
    import torch

    from triton_raw_ext import runtime
    from triton_raw_ext.errors import RawRuntimeError

    results: dict = {}
    keep: list = []  # a symmetric tensor still referenced at finalize()
    _timed(results, "init", runtime.init)
    if not results["init"]["ok"]:
        return results
    me, n = runtime.my_pe(), runtime.n_pes()
    right, left = (me + 1) % n, (me - 1) % n

    def identity() -> None:
        assert me == int(os.environ.get("RANK", "0")), (me, os.environ.get("RANK"))
        assert n == int(os.environ.get("WORLD_SIZE", "1")), n

    def peer_views() -> None:
        buf = runtime.zeros(1024, torch.int32)
        runtime.peer(buf, right).fill_(me + 1)  # store into the right neighbour's copy
        runtime.barrier_all()
        torch.cuda.synchronize()
        assert torch.all(buf == left + 1).item(), buf[:4].tolist()
        assert runtime.peer(buf, me).data_ptr() == buf.data_ptr()
        view = runtime.peer(buf[8:16], right)  # a slice maps to the same slice on the peer
        assert view.shape == (8,) and torch.all(view == me + 1).item()
        runtime.barrier_all()
        torch.cuda.synchronize()

    def put_get() -> None:
        """Put to and get from the next PE from a kernel (raw NVSHMEM, examples/kernels/shmem-device.cu)."""
        from examples.kernels.raw_kernels import put_get_kernel

        block = 1024
        buf = runtime.zeros(2 * block, torch.int32)
        buf[:block] = torch.arange(block, device="cuda", dtype=torch.int32) + 1000 * me
        got = torch.full((block,), -1, device="cuda", dtype=torch.int32)
        runtime.barrier_all()
        put_get_kernel[(1,)](buf, got, BLOCK=block)
        runtime.barrier_all()
        torch.cuda.synchronize()
        ramp = torch.arange(block, device="cuda", dtype=torch.int32)
        assert torch.equal(buf[block:], ramp + 1000 * left), buf[block : block + 4].tolist()
        assert torch.equal(got, ramp + 1000 * right), got[:4].tolist()

    def signal_wait() -> None:
        """Put-with-signal and wait from a kernel (raw NVSHMEM, examples/kernels/shmem-device.cu)."""
        from examples.kernels.raw_kernels import ring_kernel

        block = 256
        buf = runtime.zeros(2 * block, torch.int32)
        slot = runtime.zeros(1, torch.int32)
        sig = runtime.zeros(1, torch.int64)
        out = torch.full((block + 1,), -1, device="cuda", dtype=torch.int32)
        buf[:block] = torch.arange(block, device="cuda", dtype=torch.int32) + 1000 * me
        runtime.barrier_all()
        ring_kernel[(1,)](buf, slot, sig, out, 42, BLOCK=block)
        torch.cuda.synchronize()
        expect = torch.arange(block, device="cuda", dtype=torch.int32) + 1000 * left
        assert sig.item() == 42 and torch.equal(out[:block], expect), out[:4].tolist()
        assert slot.item() == left and out[block].item() == 1
        runtime.barrier_all()
        torch.cuda.synchronize()

    def barrier() -> None:
        flags = runtime.zeros(n, torch.int32)
        for rnd in range(1, 6):
            for pe in range(n):
                runtime.peer(flags, pe)[me] = rnd
            runtime.barrier_all()
            torch.cuda.synchronize()
            assert torch.all(flags == rnd).item(), (rnd, flags.tolist())
            runtime.barrier_all()
            torch.cuda.synchronize()

    def peer_errors() -> None:
        plain = torch.zeros(4, device="cuda")
        try:
            runtime.peer(plain, 0)
            raise AssertionError("peer() accepted a non-symmetric tensor")
        except RawRuntimeError as exc:
            assert "not on the symmetric heap" in str(exc)
        sym = runtime.empty(4)
        try:
            runtime.peer(sym, n)
            raise AssertionError("peer() accepted PE n")
        except RawRuntimeError as exc:
            assert "does not exist" in str(exc)

    def freed_once() -> None:
        import gc

        gc.collect()
        base = runtime.heap_stats()
        t = runtime.empty((16, 16), torch.bfloat16)
        view = runtime.peer(t, right)
        del t
        gc.collect()
        assert runtime.heap_stats()["live"] == base["live"] + 1  # the peer view keeps it alive
        del view
        gc.collect()
        after = runtime.heap_stats()
        assert after["freed"] == base["freed"] + 1 and after["live"] == base["live"], (base, after)
        keep.append(runtime.empty(8))  # freed by finalize, and not again when collected later

    for name, fn in (
        ("identity", identity),
        ("peer_views", peer_views),
        ("put_get", put_get),
        ("signal_wait", signal_wait),
        ("barrier", barrier),
        ("peer_errors", peer_errors),
        ("freed_once", freed_once),
    ):
        _timed(results, name, fn)
    runtime.barrier_all()
    torch.cuda.synchronize()
    before = runtime.heap_stats()
    _timed(results, "finalize", runtime.finalize)

    def freed_at_finalize_once() -> None:
        import gc

        after_finalize = runtime.heap_stats()
        assert before["live"] >= 1 and after_finalize["live"] == 0, (before, after_finalize)
        assert after_finalize["freed"] == before["freed"] + before["live"], (before, after_finalize)
        keep.clear()  # drop the last tensor: must not free again
        gc.collect()
        assert runtime.heap_stats() == after_finalize

    _timed(results, "freed_at_finalize_once", freed_at_finalize_once)
    return results


def worker_host_stream() -> dict:
    """Host-initiated on-stream put and get (a host .cu helper built by load_host) with the next PE."""
    import torch

    from triton_raw_ext import runtime

    results: dict = {}
    _timed(results, "init", runtime.init)
    if not results["init"]["ok"]:
        return results
    me, n = runtime.my_pe(), runtime.n_pes()
    right, left = (me + 1) % n, (me - 1) % n
    stream = torch.cuda.current_stream()
    helper = _suite_helper()

    def host_put_get() -> None:
        dst = runtime.zeros(4096, torch.float32)
        src = runtime.empty(4096, torch.float32)
        src.copy_(torch.arange(4096, device="cuda", dtype=torch.float32) + 1000 * me)
        runtime.barrier_all()
        helper.suite_put(dst.data_ptr(), src.data_ptr(), dst.numel() * 4, right, stream.cuda_stream)
        runtime.quiet()
        runtime.barrier_all()
        torch.cuda.synchronize()
        expect = torch.arange(4096, device="cuda", dtype=torch.float32) + 1000 * left
        assert torch.equal(dst, expect), dst[:4].tolist()
        got = torch.empty(4096, device="cuda", dtype=torch.float32)
        helper.suite_get(got.data_ptr(), src.data_ptr(), got.numel() * 4, right, stream.cuda_stream)
        torch.cuda.synchronize()
        assert torch.equal(got, torch.arange(4096, device="cuda", dtype=torch.float32) + 1000 * right)
        runtime.barrier_all()
        torch.cuda.synchronize()

    _timed(results, "host_put_get", host_put_get)
    _timed(results, "finalize", runtime.finalize)
    return results


def worker_cycle() -> dict:
    import torch

    from triton_raw_ext import runtime

    results: dict = {}

    def cycle() -> None:
        runtime.init()
        t = runtime.zeros(1024, torch.float32)
        runtime.peer(t, (runtime.my_pe() + 1) % runtime.n_pes()).fill_(1.0)
        runtime.barrier_all()
        torch.cuda.synchronize()
        assert t.sum().item() == 1024.0
        runtime.finalize()
        runtime.finalize()  # idempotent
        assert not runtime.is_initialized()

    _timed(results, "cycle", cycle)
    return results


def worker_raise() -> dict:
    import torch

    from triton_raw_ext import runtime

    runtime.init()
    runtime.zeros(16)
    if runtime.my_pe() == 1:
        raise RuntimeError("rank 1 fails on purpose mid-run")
    time.sleep(2.0)
    runtime.barrier_all()  # never matched by PE 1: only the watchdog can end this process
    torch.cuda.synchronize()
    return {"unexpected": {"ok": False, "error": "the barrier completed without PE 1"}}


def worker_alloc_skew() -> dict:
    """ALLOC_SKEW_ROUNDS ``runtime.zeros()`` with the last PE's stream held back before each, so the
    other PEs start every nvshmem_malloc while their previous stream barrier still waits for that PE.
    Two barriers of one team running at once on a PE can lose a sync-counter update and hang a later
    barrier; ``empty()`` waits for the GPU before nvshmem_malloc (trx_malloc in the host helper), so
    every round must complete."""
    import torch

    from triton_raw_ext import runtime

    results: dict = {}
    _timed(results, "init", runtime.init)
    if not results["init"]["ok"]:
        return results
    me, n = runtime.my_pe(), runtime.n_pes()

    def rounds() -> None:
        clock_hz = torch.cuda.get_device_properties(torch.cuda.current_device()).clock_rate * 1e3
        sleep_cycles = int(ALLOC_SKEW_SLEEP_US * 1e-6 * clock_hz)
        kept = []
        for _ in range(ALLOC_SKEW_ROUNDS):
            if me == n - 1:
                torch.cuda._sleep(sleep_cycles)
            kept.append(runtime.zeros(16, torch.int32))
        torch.cuda.synchronize()
        assert torch.cat(kept).count_nonzero().item() == 0
        kept.clear()  # every PE drops them at the same point: the frees are collective

    _timed(results, "rounds", rounds)
    _timed(results, "finalize", runtime.finalize)
    return results


WORKERS = {"core": worker_core, "host_stream": worker_host_stream, "cycle": worker_cycle, "raise": worker_raise,
           "alloc_skew": worker_alloc_skew}


# ----------------------------------------------------------------------------------------------
# Orchestrator side.
# ----------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(rank: int, world: int, port: int, shared_gpu: bool = True) -> dict[str, str]:
    """The environment of PE ``rank``: torchrun's variables, every PE on GPU 0 (``shared_gpu``) or
    PE ``rank`` on GPU ``rank`` over the loopback interface."""
    env = dict(
        os.environ,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        TRITON_RAW_FINALIZE_TIMEOUT_S="60",
    )
    if shared_gpu:
        env["TRITON_RAW_SHARED_GPU"] = "1"
    else:
        env.pop("TRITON_RAW_SHARED_GPU", None)
        env.setdefault("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo")  # one host
    return env


def run_world(kind: str, world: int, timeout_s: float, shared_gpu: bool = True) -> tuple[list[dict], float]:
    """Run ``world`` PEs of worker ``kind``; returns per-rank {rc, stdout, stderr, result} and wall time."""
    port = _free_port()
    procs = []
    start = time.monotonic()
    for rank in range(world):
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", __spec__.name, "--worker", kind],
                env=worker_env(rank, world, port, shared_gpu),
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
    ranks = []
    for proc in procs:
        remaining = max(start + timeout_s - time.monotonic(), 0.1)
        try:
            out, err = proc.communicate(timeout=remaining)
            rc: int | str = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            rc = "timeout"
        result = {}
        for line in out.splitlines():
            if line.startswith("RESULT "):
                result = json.loads(line[len("RESULT ") :])
        ranks.append({"rc": rc, "result": result, "stderr_tail": err[-3000:]})
    for proc in procs:  # a timeout above leaves the others to end too
        if proc.poll() is None:
            proc.kill()
    return ranks, time.monotonic() - start


def check_core(
    world: int, kind: str = "core", timeout_s: float = CORE_TIMEOUT_S, shared_gpu: bool = True
) -> list[dict]:
    ranks, wall = run_world(kind, world, timeout_s, shared_gpu)
    prefix = f"world{world}" if kind == "core" else f"world{world}-{kind}"
    prefix += "" if shared_gpu else "-one_pe_per_gpu"
    names = sorted({name for r in ranks for name in r["result"]}) or ["init"]
    checks = []
    for name in names:
        per_rank = [r["result"].get(name, {"ok": False, "error": "not reached"}) for r in ranks]
        ok = all(p.get("ok") for p in per_rank) and all(r["rc"] == 0 for r in ranks)
        errors = [f"PE {i}: {p.get('error')}" for i, p in enumerate(per_rank) if not p.get("ok")]
        errors += [f"PE {i}: exit {r['rc']}: {r['stderr_tail'][-600:]}" for i, r in enumerate(ranks) if r["rc"] != 0]
        checks.append(
            {
                "check": f"{prefix}/{name}",
                "ok": ok,
                "seconds": max((p.get("seconds", 0.0) for p in per_rank), default=0.0),
                "detail": "; ".join(errors)[:2000],
            }
        )
    checks.append(
        {"check": f"{prefix}/wall", "ok": all(r["rc"] == 0 for r in ranks), "seconds": round(wall, 2), "detail": ""}
    )
    return checks


def check_cycles(world: int) -> dict:
    timings, failures = [], []
    for i in range(CYCLES):
        ranks, wall = run_world("cycle", world, CYCLE_TIMEOUT_S)
        timings.append(round(wall, 2))
        bad = [
            (j, r["rc"], r["result"].get("cycle", {}).get("error"), r["stderr_tail"][-400:])
            for j, r in enumerate(ranks)
            if r["rc"] != 0 or not r["result"].get("cycle", {}).get("ok")
        ]
        if bad:
            failures.append(f"cycle {i}: {bad}")
    return {
        "check": f"cycles/{CYCLES}x_world{world}_fresh_processes",
        "ok": not failures,
        "seconds": round(sum(timings), 2),
        "detail": "; ".join(failures)[:2000],
        "cycle_seconds": timings,
    }


def check_raise(world: int) -> dict:
    ranks, wall = run_world("raise", world, RAISE_BOUND_S + 30)
    from_raiser = ranks[1]
    others = [r for i, r in enumerate(ranks) if i != 1]
    ok = (
        from_raiser["rc"] == 1
        and "fails on purpose" in from_raiser["stderr_tail"]
        and all(r["rc"] == PEER_FAILED_EXIT_CODE for r in others)
        and wall < RAISE_BOUND_S
    )
    detail = "; ".join(f"PE {i}: exit {r['rc']}: {r['stderr_tail'][-300:]}" for i, r in enumerate(ranks))
    return {
        "check": f"raise/world{world}_rank1_raises_others_end",
        "ok": ok,
        "seconds": round(wall, 2),
        "detail": detail[:2000],
    }


@dataclass(frozen=True)
class Stage:
    """A step of the suite: what it checks and the call that runs it."""

    name: str
    run: Callable[[], list[dict]]


def stages(gpus: int) -> list[Stage]:
    """The suite's steps in order for a host with ``gpus`` GPUs: the one that needs no MPS (one PE per
    GPU) first."""
    one_pe_per_gpu = gpus >= 2
    alloc_skew = Stage(
        "alloc_skew",
        lambda: check_core(2, "alloc_skew", ALLOC_SKEW_TIMEOUT_S, shared_gpu=not one_pe_per_gpu),
    )
    steps = [Stage(f"world{w}", lambda w=w: check_core(w)) for w in WORLD_SIZES]
    steps += [Stage("world1-host_stream", lambda: check_core(1, "host_stream")),
              Stage("cycles", lambda: [check_cycles(2)]), Stage("raise", lambda: [check_raise(2)])]  # fmt: skip
    return [alloc_skew, *steps] if one_pe_per_gpu else [*steps, alloc_skew]


def _environment() -> dict:
    """What the checks depend on besides the run's metadata: how many GPUs CUDA shows (asked in a child
    process, so that this one, which starts the PEs, does not initialise CUDA) and nvcc's release."""
    info: dict = {}
    probe = "import json, torch; print(json.dumps({'gpus': torch.cuda.device_count()}))"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
        )
        info.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        info["probe_error"] = repr(exc)
    try:
        nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, timeout=30).stdout
        info["nvcc"] = next((line for line in nvcc.splitlines() if "release" in line), "unknown")
    except (OSError, subprocess.SubprocessError):
        info["nvcc"] = "not found"
    return info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "bench" / "results")
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--stages", nargs="+", help="run only these stages (names as in stages())")
    choice.add_argument("--skip", nargs="+", default=[], help="run every stage but these")
    args = parser.parse_args()
    started = datetime.datetime.now(datetime.timezone.utc)
    report: dict = {**run_metadata(), "environment": _environment()}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"runtime_suite-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    checks: list[dict] = []
    report["checks"], report["passed"] = checks, False
    chosen = [s for s in stages(report["environment"].get("gpus", 1))
              if (args.stages is None or s.name in args.stages) and s.name not in args.skip]  # fmt: skip
    print(f"{'check':<40}  result  seconds", flush=True)
    for stage in chosen:  # printed and saved per stage
        for c in stage.run():
            checks.append(c)
            print(f"{c['check']:<40}  {'PASS' if c['ok'] else 'FAIL':<6}  {c['seconds']:>7}", flush=True)
            if not c["ok"] and c["detail"]:
                print(f"    {c['detail'][:800]}", flush=True)
        report["passed"] = all(c["ok"] for c in checks) and len(checks) > 0
        path.write_text(json.dumps(report, indent=2))
    report["seconds"] = round((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds(), 1)
    path.write_text(json.dumps(report, indent=2))
    print(f"{'ALL PASS' if report['passed'] else 'SOME CHECKS FAILED'} in {report['seconds']} s")
    print(f"wrote {path}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        outcome = WORKERS[sys.argv[2]]()
        print("RESULT " + json.dumps(outcome), flush=True)
        sys.exit(0 if all(v.get("ok") for v in outcome.values()) else 1)
    sys.exit(main())
