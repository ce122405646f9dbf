"""scripts/gpu/multi_gpu_hang_probe.sh and its worker on CPU.

The probe runs here with fake ``nvidia-smi`` and ``python3`` on PATH and a setup.sh that only defines
the real ``timeout_with_stacks``: the fakes act out passing, failing, stalled and timed-out steps, so
the test covers the skip on hosts with fewer than 2 GPUs, the step bookkeeping (PASS / FAIL / HANG),
the follow-ups after a hung ping-pong and the JSON summary. The worker's kernels are compiled ahead of
time for sm_90. What the GPU runs show is not tested here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import aot, fake_gpu_host, requires_nvshmem

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "scripts" / "gpu" / "multi_gpu_hang_probe.sh"
STEPS = ["warm_pp", "warm_t1", "warm_t3", "alloc_skew", "alloc_skew_raw_control", "pp_g1", "pp_gsms",
         "pp_gsms_barrier", "t1", "t1_novmm", "t1_blocking", "t3", "t3_novmm", "t3_blocking"]  # fmt: skip

FAKE_PYTHON = """#!{real}
# Fake python3: the probe's steps, acted out. The summary (python3 -) runs on the real interpreter.
import json, os, sys, time
args = sys.argv[1:]
if args[:1] == ["-"]:
    os.execv({real!r}, [{real!r}, *args])
if args[:3] != ["-m", "torch.distributed.run", "--standalone"]:  # the warm steps
    print("warm", " ".join(args)[:100])
    sys.exit(0)
assert args[3] == "--nproc_per_node=2", args
script, opts = os.path.basename(args[4]), args[5:]
blocking, novmm = os.environ.get("CUDA_LAUNCH_BLOCKING") == "1", os.environ.get("NVSHMEM_DISABLE_CUDA_VMM") == "1"
if script == "hang_probe_worker.py":
    if "--barrier" in opts and not (blocking or novmm or "--sync-every" in opts or "--variant" in opts):
        for rank in (0, 1):  # a stalled ping-pong: each PE reports, one ends with 3, torchrun with 1
            print("PROBE_HANG " + json.dumps({{"rank": rank, "stalled_s": 15.0, "entered": [7, 7],
                  "wait_returned": [6, 6], "signal": [6, 6], "reading": "programs wait for a signal"}}))
        sys.exit(1)
    ok = "--variant" not in opts  # the test kernels' variant delivers wrong data
    for rank in (0, 1):
        print("PROBE_RESULT " + json.dumps({{"rank": rank, "ok": ok, "us_per_iter": 9.5, "preloaded_kernel_used": True,
              "errors": [] if ok else ["3 elements of received rows were wrong"]}}))
    sys.exit(0 if ok else 1)
if script == "alloc_skew_worker.py":  # the control hangs, runtime.zeros does not
    if "--raw-malloc" in opts:
        time.sleep(60)
    sys.exit(0)
if script == "allreduce.py":
    if novmm:
        sys.exit(1)
    if not blocking:
        time.sleep(60)  # hangs: timeout_with_stacks stops it
    sys.exit(0)
assert script == "megamoe.py", script
sys.exit(0)
"""


def _probe(tmp_path: Path, gpus: int) -> tuple[Path, dict]:
    """A copy of the probe with a setup.sh that only sources stacks.sh (no install, no clang),
    and PATH with the fakes first."""
    probe, bin_dir = fake_gpu_host(tmp_path, PROBE.name, gpus, fake_python=FAKE_PYTHON)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_LAUNCH_BLOCKING", "NVSHMEM_DISABLE_CUDA_VMM")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", OUT=str(tmp_path / "out"),
               TRITON_RAW_SHARED_GPU="1")  # fmt: skip
    return probe, env


def _run(probe: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(probe)], env=env,
                          capture_output=True, text=True, timeout=240)  # fmt: skip


@pytest.mark.parametrize("gpus", [0, 1])
def test_probe_skips_below_two_gpus_and_still_writes_the_summary(tmp_path, gpus):
    probe, env = _probe(tmp_path, gpus)
    done = _run(probe, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"the probe needs 2 GPUs (one PE per GPU), nvidia-smi lists {gpus}" in done.stderr
    summary = json.loads((tmp_path / "out" / "hang_probe.json").read_text())
    assert summary["skipped"].startswith("skipped: the probe needs 2 GPUs")
    assert [(s["step"], s["result"]) for s in summary["steps"]] == [(n, "SKIP(<2 GPUs)") for n in STEPS]
    assert "warm_pp" in done.stdout and "SKIP(<2 GPUs)" in done.stdout


@pytest.mark.skipif(shutil.which("timeout") is None, reason="needs coreutils timeout")
def test_probe_records_pass_fail_and_hang_and_follows_up_a_hung_ping_pong(tmp_path):
    probe, env = _probe(tmp_path, 2)
    env["MAX_STEP_S"] = "6"  # the hung T1 step is stopped after ~1 s
    done = _run(probe, env)
    log = done.stdout + done.stderr
    assert done.returncode == 1, log
    summary = json.loads((tmp_path / "out" / "hang_probe.json").read_text())
    results = {s["step"]: s["result"] for s in summary["steps"]}
    assert results == {
        **dict.fromkeys(STEPS, "PASS"), "alloc_skew_raw_control": "HANG(6s)", "pp_gsms_barrier": "HANG(stall)",
        "t1": "HANG(6s)",
        "t1_novmm": "FAIL(rc=1)", "pp_gsms_barrier_sync1": "PASS", "pp_gsms_barrier_test": "FAIL(rc=1)",
        "pp_gsms_barrier_novmm": "PASS", "pp_gsms_barrier_blocking": "PASS",
    }, log  # fmt: skip
    steps = {s["step"]: s for s in summary["steps"]}
    assert steps["t1_novmm"]["env"] == "NVSHMEM_DISABLE_CUDA_VMM=1"
    assert steps["t3_blocking"]["env"] == "CUDA_LAUNCH_BLOCKING=1" and steps["t3"]["env"] == ""
    assert "megamoe.py --cases small --routing random" in steps["t3"]["command"]
    assert "--dtypes bf16 --hidden 2048 --tokens 1 16 128 1024 4096" in steps["t1"]["command"]
    assert "--grid sms --barrier" in steps["pp_gsms_barrier"]["command"]
    assert [h["rank"] for h in steps["pp_gsms_barrier"]["hang"]] == [0, 1]
    assert [r["ok"] for r in steps["pp_g1"]["ranks"]] == [True, True]
    assert steps["pp_gsms_barrier_test"]["ranks"][0]["errors"] == ["3 elements of received rows were wrong"]
    assert all((tmp_path / "out" / f"{name}.log").is_file() for name in results)
    assert "timeout_with_stacks: still running" in (tmp_path / "out" / "t1.log").read_text()
    assert summary["gpus"] == ["NVIDIA H200, 580.159.04"] * 2 and summary["command"].endswith("multi_gpu_hang_probe.sh")
    assert summary["env"]["NVSHMEM_DISABLE_NVLS"] == "1" and summary["env"]["TRITON_RAW_SHARED_GPU"] == ""
    assert summary["env"]["NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"] == "lo"
    assert re.search(r"pp_gsms_barrier +HANG\(stall\)", log) and "rank 1: programs wait for a signal" in log


@pytest.mark.skipif(shutil.which("timeout") is None, reason="needs coreutils timeout")
def test_a_hung_control_step_does_not_fail_the_probe(tmp_path):
    probe, env = _probe(tmp_path, 2)
    env.update(MAX_STEP_S="8", PROBE_STEPS="alloc_skew alloc_skew_raw_control")
    done = _run(probe, env)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((tmp_path / "out" / "hang_probe.json").read_text())
    results = [(s["step"], s["result"]) for s in summary["steps"]]
    assert results == [("alloc_skew", "PASS"), ("alloc_skew_raw_control", "HANG(8s)")]
    assert "--rounds 200 --raw-malloc" in summary["steps"][1]["command"]


def test_probe_skips_steps_when_the_budget_is_spent(tmp_path):
    probe, env = _probe(tmp_path, 2)
    env["PROBE_BUDGET_S"] = "20"
    done = _run(probe, env)
    assert done.returncode == 1, done.stdout + done.stderr
    summary = json.loads((tmp_path / "out" / "hang_probe.json").read_text())
    assert [(s["step"], s["result"]) for s in summary["steps"]] == [(n, "SKIP(budget)") for n in STEPS]


def test_describe_reads_a_progress_snapshot():
    worker = _worker()
    # two programs: program 0 finished iteration 5, program 1 waits in iteration 5 with its signal at 4
    d = worker.describe([5, 5, 5, 5, 5, 4], [5, 4], 2, 0)
    assert d["programs_waiting"] == 1 and d["examples"] == [
        {"program": 1, "waits_for": 5, "put_returned": 5, "signal_holds": 4}
    ]
    assert d["reading"].startswith("programs wait for a signal the peer has not")
    d = worker.describe([5, 5, 5, 5, 5, 4], [5, 5], 2, 0)  # the signal is there, the wait did not return
    assert d["waiting_with_signal_present"] == 1 and d["reading"].startswith("a signal word holds")
    d = worker.describe([5, 4, 5, 4, 5, 4], [5, 4], 2, 0)  # program 1 not in iteration 5 yet
    assert d["programs_behind"] == 1 and d["reading"].startswith("some programs have not started")


def _worker():
    sys.path.insert(0, str(ROOT / "scripts" / "gpu"))
    try:
        import hang_probe_worker
    finally:
        sys.path.pop(0)
    return hang_probe_worker


@requires_nvshmem
@pytest.mark.parametrize("variant", ["t1", "test"])
def test_ping_pong_kernels_compile_for_sm90(variant):
    worker = _worker()
    sig = {"send": "*i32", "recv": "*i32", "sig": "*i64", "prog": "*i64", "err": "*i32", "it": "i32", "me": "i32",
           "right": "i32", "left": "i32", "BLOCK": "constexpr"}  # fmt: skip
    c = aot(worker.KERNELS[variant], sig, {"BLOCK": 256}, num_warps=4)
    expected = {
        "t1": {"nvshmemx_putmem_nbi_block", "nvshmem_quiet", "nvshmemx_signal_op"},  # the wait is bounded_wait.h's
        "test": {"nvshmemx_putmem_signal_block", "nvshmem_signal_wait_until"},
    }
    assert set(c.metadata.raw_nvshmem) == expected[variant]
    externs = set(re.findall(r"\.extern \.func[^(]*\((?:[^)]*)\)\s*(\w+)", c.asm["ptx"]))
    assert not {s for s in externs if "nvshmem" in s}, externs


def test_t3_warm_jobs_match_the_kernels_parameters():
    worker = _worker()
    jobs = worker.t3_warm_jobs(2, ["small"])
    assert {name.split()[0] for name, *_ in jobs} >= {"moe_route", "moe_dispatch", "moe_combine", "moe_reduce"}
    for name, fn, args, kwargs in jobs:
        constexprs = {k for k in kwargs if k not in ("grid", "num_warps", "num_stages")}
        assert len(args) + len(constexprs) == len(fn.arg_names), name
        assert set(fn.arg_names[len(args) :]) == constexprs, name  # runtime parameters first, then constexprs
