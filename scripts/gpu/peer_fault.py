"""Peer fault on one GPU: a PE that dies mid-call ends its peer's wait with a report, not a hang.

It is the ``faults`` suite's step; the suite runner installs the plugin, sets NVLink multicast off and
starts MPS, as for the tutorial suites::

    python3 -m scripts.gpu.suite faults   # runs: python3 -m scripts.gpu.peer_fault OUT_DIR [--tutorials 1 3 2]
                                          #       [--bound-s 5]

For each tutorial, torchrun starts 2 PEs sharing GPU 0 (``TRITON_RAW_SHARED_GPU=1``) with
``TRITON_RAW_WAIT_TIMEOUT_S`` set to the bound. Both PEs make one call of the tutorial's operator and
synchronise; then PE 1 exits, right before the next call, whose signals PE 0 then waits for (Tutorial
1: the row signals; 3: the first barrier word; 2: the ready flag). PE 1 exits with status 0, so
torchrun does not stop PE 0 itself: only the device-side bound can end PE 0's wait, as when the dead
PE is on another host. Checks per tutorial: the job's output holds exactly one report line, naming PE
0 waiting for PE 1 for at least the bound; PE 0's call fails within the bound plus ``SLACK_S``; the
whole job ends before its step limit. Then a small Tutorial 1 check at world 1 must pass on the same
GPU. Every step runs under a limit, the whole run within ``--budget-s``.

Writes ``peer_fault.json`` (the run's metadata, per-step results and output tails) to
OUT_DIR and exits 0 when every check passed. Without a GPU it writes a skipped result and exits 0.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tutorials.common.run_metadata import run_metadata

ROOT = Path(__file__).resolve().parents[2]
SLACK_S = 15.0  # after the bound: the report, the trap, the host seeing the error
STEP_LIMITS_S = {"1": 200.0, "3": 240.0, "2": 200.0, "next_job": 150.0}  # compiles included
# The line <triton_raw/bounded_wait.h> prints when a wait expires.
REPORT = re.compile(
    r"triton_raw_ext: PE (?P<me>\d+) waited (?P<waited_ms>\d+) ms for PE (?P<peer>\d+): (?P<what>.+?) at "
    r"(?P<address>\S+) is (?P<seen>-?\d+), expected >= (?P<expected>-?\d+)"
)
RESULT_TAG = "PEER_FAULT_RESULT "


# ----------------------------------------------------------------------------------------------
# Worker side: one PE under torchrun.
# ----------------------------------------------------------------------------------------------


def _t1_call():  # -> Callable[[], None]: one AllReduceRMSNorm call of 16 rows (collective)
    import torch

    from tutorials.allreduce_rmsnorm import AllReduceRMSNorm
    from tutorials.allreduce_rmsnorm.reference import make_inputs

    op = AllReduceRMSNorm(hidden=2048, dtype=torch.bfloat16, max_tokens=16)
    x, residual, weight = make_inputs(1, op.rank, 16, 2048, torch.bfloat16, op.device)
    return lambda: op(x, residual, weight)


def _t3_call():  # -> Callable[[], None]: one MegaMoE call of 64 tokens, 2 experts (collective)
    import torch

    from triton_raw_ext import runtime
    from tutorials.megamoe.megamoe import MegaMoE, make_inputs, make_weights

    me = runtime.my_pe()
    dev = torch.device("cuda", torch.cuda.current_device())
    w1, w2 = make_weights(128, 128, 2, 17, dev)  # one expert per PE
    layer = MegaMoE(128, 128, 2, 1, 64, w1[me : me + 1], w2[me : me + 1])
    x, logits = make_inputs(64, 128, 2, False, 17 + me, dev)
    return lambda: layer(x, logits)


def _t2_call():  # -> Callable[[], None]: one AllGatherGEMM call, 128 rows per rank (collective)
    import torch

    from tutorials.allgather_gemm import AllGatherGEMM

    op = AllGatherGEMM(128, 256, 256, torch.bfloat16)
    a = torch.randn(128, 256, device=op.device).to(torch.bfloat16)
    b = torch.randn(256, 256, device=op.device).to(torch.bfloat16)
    return lambda: op(a, b)


CALLS = {"1": _t1_call, "3": _t3_call, "2": _t2_call}


def _report(result: dict) -> None:
    print(RESULT_TAG + json.dumps(result), flush=True)
    ctypes.CDLL(None).fflush(None)  # the device's report sits in C's stdout buffer


def worker(tutorial: str) -> int:
    """One PE: a normal call, then PE 1 leaves and PE 0 makes the next call. PE 0's failure is
    re-raised, so that the runtime's hook tells the other PEs and skips the collective teardown."""
    import torch

    from triton_raw_ext import runtime

    runtime.init()  # over torchrun's ranks, every PE on GPU 0 (TRITON_RAW_SHARED_GPU)
    call = CALLS[tutorial]()
    me = runtime.my_pe()
    call()
    torch.cuda.synchronize()
    runtime.host_barrier()  # both PEs are done with the first call
    if me == 1:
        _report({"rank": 1, "left": "before the second call"})
        os._exit(0)
    start = time.monotonic()
    try:
        call()
        torch.cuda.synchronize()
    except Exception as exc:  # the trap: the CUDA error of the failed launch
        _report({"rank": 0, "failed_after_s": round(time.monotonic() - start, 2), "error": str(exc)[:300]})
        raise
    _report({"rank": 0, "failed_after_s": None, "error": "the call completed without PE 1"})
    return 1


# ----------------------------------------------------------------------------------------------
# Orchestrator side.
# ----------------------------------------------------------------------------------------------


def _run(command: list[str], env: dict[str, str], limit_s: float) -> dict:
    """Run ``command`` in its own session under ``limit_s``; a run past it is killed with its children."""
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=limit_s)
        rc: int | str = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        rc = "timeout"
    return {"rc": rc, "seconds": round(time.monotonic() - start, 1), "limit_s": limit_s, "output": out}


def check_fault(tutorial: str, bound_s: float, limit_s: float, env: dict[str, str]) -> dict:
    """Run the fault of ``tutorial`` under torchrun and judge it (see the module docstring)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", __spec__.name,
               "--worker", tutorial]  # fmt: skip
    run = _run(command, env, limit_s)
    out = run.pop("output")
    reports = [m.groupdict() for m in REPORT.finditer(out)]
    results = [json.loads(line[len(RESULT_TAG) :]) for line in out.splitlines() if line.startswith(RESULT_TAG)]
    pe0 = next((r for r in results if r.get("rank") == 0), {})
    failures = []
    if run["rc"] == "timeout":
        failures.append(f"the job did not end within {limit_s:.0f} s")
    if len(reports) != 1:
        failures.append(f"{len(reports)} report lines, expected 1")
    elif (reports[0]["me"], reports[0]["peer"]) != ("0", "1") or int(reports[0]["waited_ms"]) < bound_s * 1000:
        failures.append(f"the report does not say PE 0 waited >= {bound_s} s for PE 1: {reports[0]}")
    waited = pe0.get("failed_after_s")
    if waited is None or not bound_s <= waited <= bound_s + SLACK_S:
        failures.append(f"PE 0's call failed after {waited} s, expected {bound_s} to {bound_s + SLACK_S} s")
    return {"step": f"tutorial{tutorial}_peer_fault", "ok": not failures, "failures": failures, **run,
            "report": reports, "pe_results": results, "output_tail": out[-4000:]}  # fmt: skip


def check_next_job(limit_s: float, env: dict[str, str]) -> dict:
    """A small Tutorial 1 correctness check at world 1, after the faults, on the same GPU."""
    command = [sys.executable, "-m", "tutorials.allreduce_rmsnorm.allreduce_rmsnorm", "--tokens", "1", "16",
               "--hidden", "2048", "--dtypes", "bf16"]  # fmt: skip
    world_one = {k: v for k, v in env.items() if k not in ("TRITON_RAW_SHARED_GPU", "WORLD_SIZE")}
    run = _run(command, world_one, limit_s)
    out = run.pop("output")
    ok = run["rc"] == 0 and "2/2 PASS" in out
    return {"step": "next_job_t1_world1", "ok": ok, "failures": [] if ok else ["the world-1 check did not pass"],
            **run, "output_tail": out[-3000:]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="folder for peer_fault.json")
    parser.add_argument("--tutorials", nargs="+", default=["1", "3", "2"], choices=sorted(CALLS))
    parser.add_argument("--bound-s", type=float, default=5.0, help="TRITON_RAW_WAIT_TIMEOUT_S of the faulting jobs")
    parser.add_argument("--budget-s", type=float, default=560.0, help="the whole run, setup included")
    args = parser.parse_args(argv)
    began = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "peer_fault.json"
    doc: dict = {
        **run_metadata(),
        "bound_s": args.bound_s,
        "steps": [],
    }
    import torch

    if not torch.cuda.is_available():
        doc.update(skipped="no CUDA GPU visible", passed=True)
        path.write_text(json.dumps(doc, indent=1))
        print(f"peer_fault: SKIP (no CUDA GPU visible); wrote {path}")
        return 0
    env = {**os.environ, "TRITON_RAW_SHARED_GPU": "1", "TRITON_RAW_WAIT_TIMEOUT_S": str(args.bound_s),
           "TRITON_RAW_FINALIZE_TIMEOUT_S": "15", "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "lo"}  # fmt: skip
    for name in [*args.tutorials, "next_job"]:
        left = args.budget_s - (time.monotonic() - began) - 15
        limit = min(STEP_LIMITS_S[name], left)
        if limit < 30:
            step = {"step": name, "ok": False, "failures": ["skipped: no time left in --budget-s"]}
        elif name == "next_job":
            step = check_next_job(limit, env)
        else:
            step = check_fault(name, args.bound_s, limit, env)
        doc["steps"].append(step)
        print(f"{step['step']:<28} {'PASS' if step['ok'] else 'FAIL'}  {step.get('seconds', 0):>6} s  "
              f"{'; '.join(step['failures'])}", flush=True)  # fmt: skip
        path.write_text(json.dumps(doc, indent=1))
    doc["passed"] = all(s["ok"] for s in doc["steps"])
    doc["seconds"] = round(time.monotonic() - began, 1)
    path.write_text(json.dumps(doc, indent=1))
    print(f"peer_fault: {'PASS' if doc['passed'] else 'FAIL'} in {doc['seconds']} s; wrote {path}")
    return 0 if doc["passed"] else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        sys.exit(worker(sys.argv[2]))
    sys.exit(main())
