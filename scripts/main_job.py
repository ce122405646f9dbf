"""The main job: run the tutorials on GPUs, or, without a GPU, compile them ahead of time for sm_90.

``python3 -m scripts.main_job`` (repository root) picks the mode from what it sees (``--aot`` /
``--gpu`` force one). AOT mode compiles every kernel of each tutorial's ``aot`` module
(``tutorials.TUTORIALS``, in order) for ``GPUTarget("cuda", 90, 32)`` with the options the tutorial
launches it with (``tutorials.common.aot.compile_tutorial``), and reports time, PTX and cubin size,
shared memory and the NVSHMEM symbols linked. GPU mode runs each tutorial's ``run_gpu.sh`` with a time
limit. A JSON report (with the run's metadata) goes to ``--out``; the exit status is 1
if anything failed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from tutorials import TUTORIALS
from tutorials.common.run_metadata import run_metadata

ROOT = Path(__file__).resolve().parents[1]


def gpu_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def run_aot() -> tuple[bool, dict]:
    from triton_raw_ext.toolchain import find_clang
    from tutorials.common.aot import compile_tutorial, print_rows

    rows = [row for tutorial in TUTORIALS for row in compile_tutorial(tutorial)]
    print_rows(rows)
    ok = bool(rows) and all(r["ok"] for r in rows)
    clang = find_clang().identity
    print(f"\n{sum(r['ok'] for r in rows)}/{len(rows)} kernels compiled to sm_90 cubin without a GPU (clang {clang})")
    return ok, {"mode": "aot", "target": "cuda sm_90", "clang": clang, "kernels": rows}


def run_gpu(timeout_s: float) -> tuple[bool, dict]:
    results = []
    for tutorial in TUTORIALS:
        script = ROOT / "tutorials" / tutorial / "run_gpu.sh"
        start = time.perf_counter()
        try:
            proc = subprocess.run(["bash", str(script)], cwd=ROOT, timeout=timeout_s)
            status = "PASS" if proc.returncode == 0 else f"FAIL (exit {proc.returncode})"
        except subprocess.TimeoutExpired:
            status = f"FAIL (over {timeout_s:.0f} s)"
        results.append({"tutorial": tutorial, "status": status, "seconds": round(time.perf_counter() - start, 1)})
    for r in results:
        print(f"{r['tutorial']:<24} {r['status']:<24} {r['seconds']:>8.1f} s")
    return all(r["status"] == "PASS" for r in results), {"mode": "gpu", "gpus": gpu_count(), "tutorials": results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--aot", action="store_true", help="compile ahead of time for sm_90, even with a GPU")
    mode.add_argument("--gpu", action="store_true", help="run the tutorials on the GPU(s)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per tutorial in GPU mode")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "main_job")
    args = parser.parse_args()
    use_gpu = args.gpu or (not args.aot and gpu_count() > 0)
    ok, report = run_gpu(args.timeout) if use_gpu else run_aot()
    report.update(run_metadata())
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"main_job-{report['mode']}.json"
    path.write_text(json.dumps(report, indent=1))
    print(f"report: {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
