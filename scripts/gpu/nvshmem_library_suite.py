"""GPU suite for triton_raw_ext.nvshmem: every call family at 2 and 4 PEs sharing one GPU, under torchrun.

Run from the repository root with the package importable (``source scripts/gpu/setup.sh`` does it)::

    python3 -m scripts.gpu.nvshmem_library_suite [--worlds 2 4] [--families query rma ...]

Without a CUDA GPU it writes a JSON result saying so and exits 0. Otherwise it starts MPS (unless it
runs; stopped again at the end), builds the library's `.cu` files and the objects of the collectives
the checks call in parallel processes (so the PEs do not each wait for ptxas), then for each world
size runs ``torchrun --standalone --nproc-per-node=N`` with ``TRITON_RAW_SHARED_GPU=1`` (every PE on
GPU 0, gloo). Each PE runs the checks of scripts.gpu.nvshmem_library_checks and writes its
results after every case, so a run stopped at its time limit still shows where each PE was. Writes
``nvshmem_library_suite.json`` (date, GPU, versions, command, per-world and per-case results,
timings) to $OUT, else bench/results/<UTC stamp>-nvshmem-library/, after every world. Exit status 0
when every case passed at every world size.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tutorials.common.run_metadata import run_metadata

ROOT = Path(__file__).resolve().parents[2]
SAFE_ENV = {"NVSHMEM_DISABLE_NVLS": "1", "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
FAMILY_NAMES = ("query", "rma", "signal", "wait", "fence_quiet", "barrier_sync", "broadcast", "alltoall", "fcollect",
                "reduce_and", "reduce_or", "reduce_xor", "reduce_min", "reduce_max", "reduce_sum", "reduce_prod",
                "atomics")  # nvshmem_library_checks.FAMILIES, without importing torch here  # fmt: skip
RESULT_FILE = "nvshmem_library_suite.json"
KERNEL_SHARDS = 8  # processes sharing one family's check kernels at least (the largest have ~130)


# ----------------------------------------------------------------------------------------------
# Worker: one PE, started by torchrun.
# ----------------------------------------------------------------------------------------------


def worker(families: list[str], results: Path) -> None:
    import torch

    from triton_raw_ext import runtime

    from . import nvshmem_library_checks as checks

    runtime.init()
    pes = checks.Pes(runtime.my_pe(), runtime.n_pes())
    report: dict = {"pe": pes.me, "n_pes": pes.n, "families": {}}
    path = results / f"pe{pes.me}.json"
    for family in families:
        report["running"] = family
        path.write_text(json.dumps(report))
        start = time.perf_counter()
        cases = {}
        for label, error in checks.FAMILIES[family](pes):
            cases[label] = error
            report["families"][family] = {"cases": cases, "seconds": round(time.perf_counter() - start, 2)}
            path.write_text(json.dumps(report))
    report["running"] = None
    path.write_text(json.dumps(report))
    checks.synced()
    runtime.finalize()
    torch.cuda.synchronize()


# ----------------------------------------------------------------------------------------------
# Orchestrator.
# ----------------------------------------------------------------------------------------------


def _build(job: tuple[str, str, int]) -> tuple[str, float, str | None]:
    """Build one library `.cu` (``("family", name, arch)``) or collective object (``("object", symbol, arch)``)."""
    kind, name, arch = job
    start = time.perf_counter()
    try:
        if kind == "family":
            import triton_raw_ext.nvshmem as shm

            call = next(c for c in shm.CALLS if c.family == name)
            getattr(shm, call.name).per_program.library(arch)
        else:
            from triton_raw_ext.nvshmem_objects import collective_object, register_limit

            collective_object(arch, name, register_limit(4))
        error = None
    except Exception as exc:  # noqa: BLE001 - reported; the PEs then meet it again
        error = f"{type(exc).__name__}: {exc}"[:1000]
    return f"{kind} {name}", round(time.perf_counter() - start, 2), error


def _compile_checks(job: tuple[str, int, int]) -> tuple[str, float, str | None]:
    """Compile shard ``shard`` of ``shards`` of one family's check kernels into Triton's cache."""
    from . import nvshmem_library_checks as checks

    family, shard, shards = job
    os.environ.update(SAFE_ENV, TRITON_RAW_SHARED_GPU="1")
    start = time.perf_counter()
    with checks.CompileOnly(shard, shards):
        errors = [f"{label}: {error}" for label, error in checks.FAMILIES[family](checks.Pes(0, 2)) if error]
    return f"kernels {family} {shard}/{shards}", round(time.perf_counter() - start, 2), "; ".join(errors)[:1000] or None


def prebuild(families: list[str], arch: int) -> dict:
    """The library's `.cu` files, the collectives' objects, then the check kernels, in parallel processes
    (spawned: this process has started CUDA), so the PEs find everything in the caches instead of each
    compiling the same kernels one after another."""
    import triton_raw_ext.nvshmem as shm
    from triton_raw_ext.toolchain import usable_nvlink

    from .nvshmem_library_checks import collectives_used

    start = time.perf_counter()
    workers = max(1, (os.cpu_count() or 2) - 1)
    built: dict = {}
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        sources = [("family", f, arch) for f in dict.fromkeys(c.family for c in shm.CALLS)]
        results = list(pool.map(_build, sources))
        objects = [("object", s, arch) for s in collectives_used(families)] if usable_nvlink(arch) else []
        # The kernels of the families that call no collective compile beside the objects; the others after.
        needs_objects = [f for f in families if collectives_used([f])]
        shards = max(KERNEL_SHARDS, workers // len(families))
        kernels = [(f, i, shards) for f in families for i in range(shards)]
        first = [pool.submit(_build, job) for job in objects]
        first += [pool.submit(_compile_checks, job) for job in kernels if job[0] not in needs_objects]
        results += [future.result() for future in first]
        results += list(pool.map(_compile_checks, [job for job in kernels if job[0] in needs_objects]))
    for label, seconds, error in results:
        built[label] = {"seconds": seconds, "error": error}
    return {"seconds": round(time.perf_counter() - start, 1), "workers": workers, "nvlink": bool(usable_nvlink(arch)),
            "built": built}


def run_world(world: int, families: list[str], timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"nvshmem-library-w{world}-") as tmp:
        env = dict(os.environ, **SAFE_ENV, TRITON_RAW_SHARED_GPU="1", TRITON_RAW_FINALIZE_TIMEOUT_S="60")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}",
               "-m", __spec__.name, "--worker", "--results", tmp, "--families", *families]
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
            status, output = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            status = "timeout"
            output = (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(errors="replace")
        pes = [json.loads(p.read_text()) for p in sorted(Path(tmp).glob("pe*.json"))]
    record = {"world": world, "exit": status, "seconds": round(time.monotonic() - start, 1), "families": {}}
    for family in families:
        per_pe = [pe["families"].get(family) for pe in pes]
        labels = list(dict.fromkeys(label for entry in per_pe if entry for label in entry["cases"]))
        cases = {}
        for label in labels:
            errors = [(pe["pe"], "not reached" if entry is None else entry["cases"].get(label, "not reached"))
                      for pe, entry in zip(pes, per_pe, strict=True)]
            cases[label] = "; ".join(f"PE {pe}: {error}" for pe, error in errors if error) or None
        ran = len(pes) == world and all(per_pe) and all(pe.get("running") is None for pe in pes)
        stopped = [f"PE {pe['pe']} in {pe['running']}" for pe in pes if pe.get("running")]
        record["families"][family] = {
            "ok": ran and status == 0 and bool(cases) and not any(cases.values()),
            "cases": cases,
            "seconds": max((entry["seconds"] for entry in per_pe if entry), default=0.0),
            "stopped": stopped,
        }
    if status != 0:
        record["output_tail"] = output[-4000:]
    return record


def _mps(action: str) -> str:
    try:
        if action == "start":
            if subprocess.run(["pgrep", "-x", "nvidia-cuda-mps"], capture_output=True).returncode == 0:
                return "already running"
            proc = subprocess.run(["nvidia-cuda-mps-control", "-d"], capture_output=True, text=True, timeout=30)
            return "started" if proc.returncode == 0 else f"failed: {proc.stderr.strip()}"
        proc = subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", capture_output=True, text=True, timeout=30)
        return "stopped" if proc.returncode == 0 else f"stop failed: {proc.stderr.strip()}"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unavailable: {exc}"


def _gpu() -> tuple[str | None, int | None, str | None]:
    """(GPU name, compute capability, None) or (None, None, why there is none)."""
    try:
        import torch
    except ImportError as exc:
        return None, None, f"torch is not importable: {exc}"
    if not torch.cuda.is_available():
        return None, None, "no CUDA GPU visible (torch.cuda.is_available() is False)"
    major, minor = torch.cuda.get_device_capability(0)
    return torch.cuda.get_device_name(0), major * 10 + minor, None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--families", nargs="+", default=list(FAMILY_NAMES), choices=FAMILY_NAMES)
    parser.add_argument("--timeout", type=float, default=420.0, help="seconds per world size")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.families, args.results)
        return 0
    started = datetime.datetime.now(datetime.timezone.utc)
    out = Path(os.environ.get("OUT") or ROOT / "bench" / "results" / f"{started:%Y%m%dT%H%M%SZ}-nvshmem-library")
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULT_FILE
    gpu, arch, missing = _gpu()
    report: dict = {**run_metadata(), "worlds": [], "passed": False}
    if missing is not None:
        report |= {"skipped": missing, "passed": None}
        path.write_text(json.dumps(report, indent=1))
        print(f"SKIPPED: {missing}\nwrote {path}")
        return 0
    os.environ.update(SAFE_ENV)
    report["gpu"], report["mps"] = gpu, _mps("start")
    try:
        report["prebuild"] = prebuild(args.families, arch)
        failed_builds = {k: v["error"] for k, v in report["prebuild"]["built"].items() if v["error"]}
        print(f"prebuilt in {report['prebuild']['seconds']} s ({len(report['prebuild']['built'])} items, "
              f"{len(failed_builds)} failed)", flush=True)
        for world in args.worlds:
            record = run_world(world, args.families, args.timeout)
            report["worlds"].append(record)
            for family, result in record["families"].items():
                bad = {label: error for label, error in result["cases"].items() if error}
                print(f"world {world} {family:<14} {'PASS' if result['ok'] else 'FAIL'} {len(result['cases']):>4} "
                      f"cases {result['seconds']:>7} s {'; '.join(result['stopped'])}", flush=True)
                for label, error in list(bad.items())[:5]:
                    print(f"    {label}: {error[:300]}", flush=True)
            if record["exit"] != 0:
                print(f"world {world}: torchrun exit {record['exit']}\n{record.get('output_tail', '')[-1500:]}")
            report["passed"] = all(f["ok"] for w in report["worlds"] for f in w["families"].values()) and \
                not failed_builds
            path.write_text(json.dumps(report, indent=1))
    finally:
        if report["mps"] == "started":
            report["mps_stop"] = _mps("stop")
        report["seconds"] = round((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds(), 1)
        path.write_text(json.dumps(report, indent=1))
    print(f"{'ALL PASS' if report['passed'] else 'SOME CASES FAILED'} in {report['seconds']} s\nwrote {path}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
