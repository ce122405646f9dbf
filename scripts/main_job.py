"""The main job: run the tutorials on GPUs, or, without a GPU, compile them ahead of time for sm_90.

``python3 -m scripts.main_job`` (repository root) picks the mode from what it sees (``--aot`` /
``--gpu`` force one). AOT mode imports each tutorial's ``aot`` module (``tutorials.TUTORIALS``, in
order), compiles every kernel its ``kernels()`` lists for ``GPUTarget("cuda", 90, 32)`` (with
``options_for(name)`` when the tutorial defines it), and reports time, PTX and cubin size, shared
memory and the NVSHMEM symbols linked. GPU mode runs each tutorial's ``run_gpu.sh`` with a time
limit. A JSON report goes to ``--out``; the exit status is 1
if anything failed.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

from tutorials import TUTORIALS

ROOT = Path(__file__).resolve().parents[1]


def gpu_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def compile_tutorial(tutorial: str) -> list[dict]:
    """AOT-compile every kernel of one tutorial; one row per kernel (errors become rows too)."""
    import triton
    from triton.backends.compiler import GPUTarget

    target = GPUTarget("cuda", 90, 32)
    try:
        aot = importlib.import_module(f"tutorials.{tutorial}.aot")
        sources = aot.kernels()
    except Exception as e:  # noqa: BLE001 - reported as a failed row, the job goes on
        return [{"tutorial": tutorial, "kernel": "<aot.py>", "ok": False, "error": f"{type(e).__name__}: {e}"}]
    rows = []
    for name, src in sources:
        options = aot.options_for(name) if hasattr(aot, "options_for") else None
        start = time.perf_counter()
        try:
            c = triton.compile(src, target=target, options=options)
        except Exception as e:  # noqa: BLE001
            rows.append({"tutorial": tutorial, "kernel": name, "ok": False,
                         "error": "".join(traceback.format_exception_only(e)).strip()[-2000:]})
            continue
        meta = c.metadata._asdict()
        rows.append({
            "tutorial": tutorial, "kernel": name, "ok": c.asm["cubin"][:4] == b"\x7fELF",
            "seconds": round(time.perf_counter() - start, 3), "ptx_kb": round(len(c.asm["ptx"]) / 1024, 1),
            "cubin_kb": round(len(c.asm["cubin"]) / 1024, 1), "shared_bytes": meta.get("shared"),
            "num_warps": meta.get("num_warps"), "nvshmem": meta.get("raw_nvshmem", []),
        })  # fmt: skip
    return rows


def run_aot() -> tuple[bool, dict]:
    rows = [row for tutorial in TUTORIALS for row in compile_tutorial(tutorial)]
    print(f"{'tutorial':<24} {'kernel':<40} {'ok':<4} {'s':>6} {'ptx KB':>8} {'cubin KB':>9} {'smem':>7} nvshmem")
    for r in rows:
        if r["ok"]:
            print(f"{r['tutorial']:<24} {r['kernel']:<40} {'yes':<4} {r['seconds']:>6.2f} {r['ptx_kb']:>8} "
                  f"{r['cubin_kb']:>9} {r['shared_bytes']:>7} {len(r['nvshmem'])} symbols")
        else:
            print(f"{r['tutorial']:<24} {r['kernel']:<40} FAIL  {r['error'].splitlines()[-1][:200]}")
    from triton_raw_ext.toolchain import find_clang

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
    report["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    report["command"] = " ".join([sys.executable, *sys.argv])
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"main_job-{report['mode']}.json"
    path.write_text(json.dumps(report, indent=1))
    print(f"report: {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
