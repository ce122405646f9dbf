"""What raw functions add to a kernel's AOT compile time (CPU only; no GPU needed).

Each sample is a fresh Python process that compiles one kernel with ``triton.compile`` for
``GPUTarget("cuda", 90, 32)``, with the Triton cache and the plugin cache in folders this script
controls. Cases (kernels in ``bench/kernels``):

- ``a_plain``: a plain Triton kernel (the plugin is not imported); Triton cache empty.
- ``b_raw``: the same kernel plus one raw elementwise function; its compiled `.cu` already in the
  plugin cache, Triton cache empty.
- ``c_nvshmem_warm``: plus a raw function using NVSHMEM; plugin caches warm (both `.cu` files and
  the NVSHMEM subset), Triton cache empty.
- ``d_nvshmem_cold``: the ``c`` kernel with every cache empty: the first compile ever.

The reported time is ``triton.compile`` alone (imports excluded; the kernel module's import time
is recorded as ``import_s``). Overheads are medians against ``a_plain`` and are checked against
the goals below; a miss is reported, never raised. Results go to
``bench/results/compile_overhead-<date>.json``.

Usage: ``python bench/compile_overhead.py [--samples N] [--output PATH]``
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "kernels"
RESULTS = HERE / "results"

# case -> (kernel module, kernel, signature attribute, what it measures)
CASES = {
    "a_plain": ("overhead_plain", "plain_kernel", "SIGNATURE", "plain Triton kernel, Triton cache empty"),
    "b_raw": (
        "overhead_raw", "raw_kernel", "RAW_SIGNATURE",
        "+ one raw elementwise function (.cu in the plugin cache), Triton cache empty",
    ),
    "c_nvshmem_warm": (
        "overhead_raw", "nvshmem_kernel", "NVSHMEM_SIGNATURE",
        "+ a raw function using NVSHMEM, plugin caches warm (incl. NVSHMEM subset), Triton cache empty",
    ),
    "d_nvshmem_cold": (
        "overhead_raw", "nvshmem_kernel", "NVSHMEM_SIGNATURE",
        "the NVSHMEM kernel with every cache empty (first compile ever)",
    ),
}  # fmt: skip
NVSHMEM_CASES = ("c_nvshmem_warm", "d_nvshmem_cold")
WARM_CASES = ("b_raw", "c_nvshmem_warm")
MAX_RETAKES = 3
# case -> (what is compared, limit in seconds): overhead over a_plain, or the absolute time.
GOALS = {
    "b_raw": ("overhead", 0.3),
    "c_nvshmem_warm": ("overhead", 0.5),
    "d_nvshmem_cold": ("absolute", 15.0),
}


def worker(case: str) -> None:
    """Compile the case's kernel once in this process; print its timings and the plugin code digest.

    The digest (None when the plugin was not imported) is part of every plugin cache key: a sample
    whose digest differs from its warm-up's did not see a warm cache.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module_name, kernel_name, signature_name, _ = CASES[case]
    sys.path.insert(0, str(KERNELS))
    start = time.perf_counter()
    module = importlib.import_module(module_name)
    import_s = time.perf_counter() - start
    source = ASTSource(
        getattr(module, kernel_name), signature=getattr(module, signature_name), constexprs=module.CONSTEXPRS
    )
    start = time.perf_counter()
    triton.compile(source, target=GPUTarget("cuda", 90, 32))
    compile_s = time.perf_counter() - start
    plugin = sys.modules.get("triton_raw_ext.version")
    digest = plugin.code_digest() if plugin else None
    print(json.dumps({"compile_s": compile_s, "import_s": import_s, "plugin_code": digest}))


def run_sample(case: str, triton_cache: Path, plugin_cache: Path) -> dict:
    """One fresh process compiling ``case`` with the given cache folders: its timings, plugin digest and
    the 1-minute load average just before it started (other work on the machine skews timings)."""
    load = os.getloadavg()[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
    env |= {"TRITON_CACHE_DIR": str(triton_cache), "TRITON_RAW_CACHE_DIR": str(plugin_cache)}
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker", case],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"case {case} failed (exit {proc.returncode}):\n{proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1]) | {"load_1min": load}


def measure(cases: list[str], samples: int, root: Path) -> dict[str, list[dict]]:
    """``samples`` timings per case, taken round-robin so that drift spreads over all cases.

    Warm cases fill their plugin cache with an untimed run first. If the plugin's code changes
    during the run (its digest is in every cache key, so the "warm" sample was in fact cold), the
    cache is re-warmed and the sample retaken, up to ``MAX_RETAKES`` times per sample.
    """
    warm_plugin = {case: root / case / "plugin" for case in cases if case in WARM_CASES}
    warm_digest = {}
    for case, plugin in warm_plugin.items():  # fill the plugin cache once, untimed
        warm_digest[case] = run_sample(case, root / case / "warmup-triton", plugin)["plugin_code"]
    results: dict[str, list[dict]] = {case: [] for case in cases}
    for i in range(samples):
        for case in cases:
            plugin = warm_plugin.get(case, root / case / f"plugin-{i}")
            for retake in range(MAX_RETAKES + 1):
                sample = run_sample(case, root / case / f"triton-{i}-{retake}", plugin)
                if case not in warm_digest or sample["plugin_code"] == warm_digest[case]:
                    break
                print(f"  {case}: the plugin code changed; re-warming and retaking", flush=True)
                rewarm = run_sample(case, root / case / f"rewarm-{i}-{retake}", plugin)
                warm_digest[case] = rewarm["plugin_code"]
            else:
                raise SystemExit("the plugin code keeps changing under the benchmark; rerun on a quiet tree")
            results[case].append(sample)
            print(f"  sample {i + 1}/{samples} {case}: {sample['compile_s']:.3f} s", flush=True)
    return results


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_head() -> str | None:
    proc = subprocess.run(["git", "-C", str(HERE), "rev-parse", "HEAD"], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def versions() -> dict[str, str | None]:
    """Versions of everything on the compile path, as the plugin discovers them."""
    import llvmlite
    import triton

    from triton_raw_ext.nvshmem_install import find_nvshmem
    from triton_raw_ext.toolchain import find_clang

    clang = find_clang()
    nvshmem = find_nvshmem(required=False)
    return {
        "python": platform.python_version(),
        "triton": triton.__version__,
        "llvmlite": llvmlite.__version__,
        "clang": f"{'.'.join(map(str, clang.version))} ({' '.join(clang.command)})",
        "nvshmem": nvshmem.version_str if nvshmem else None,
    }


def summarize(results: dict[str, list[dict]]) -> tuple[dict, dict]:
    """Per-case medians, and each goal's measured value and verdict."""
    medians = {case: statistics.median(s["compile_s"] for s in samples) for case, samples in results.items()}
    goals = {}
    for case, (kind, limit) in GOALS.items():
        if case not in medians:
            continue
        value = medians[case] - medians["a_plain"] if kind == "overhead" else medians[case]
        goals[case] = {"measure": kind, "limit_s": limit, "value_s": round(value, 4), "pass": value <= limit}
    return medians, goals


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", "-n", type=int, default=5, help="fresh processes per case (default 5)")
    parser.add_argument(
        "--output", type=Path, help="JSON file (default bench/results/compile_overhead-<date>.json)"
    )
    parser.add_argument("--worker", choices=sorted(CASES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    if args.samples < 1:
        parser.error("--samples must be at least 1")

    info = versions()
    cases = list(CASES)
    skipped = {}
    if info["nvshmem"] is None:
        cases = [c for c in cases if c not in NVSHMEM_CASES]
        skipped = {c: "NVSHMEM not installed (`pip install nvidia-nvshmem-cu13`)" for c in NVSHMEM_CASES}
    print(f"compile overhead, {args.samples} fresh processes per case: {', '.join(cases)}")
    with tempfile.TemporaryDirectory(prefix="compile-overhead-") as tmp:
        results = measure(cases, args.samples, Path(tmp))
    medians, goals = summarize(results)

    now = datetime.datetime.now(datetime.timezone.utc)
    report = {
        "date": now.isoformat(timespec="seconds"),
        "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(), "platform": platform.platform()},
        "versions": info,
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "git_head": _git_head(),
        "target": "GPUTarget('cuda', 90, 32)",
        "timed": "triton.compile only, in a fresh process per sample",
        "cases": {
            case: {
                "description": CASES[case][3],
                "samples_s": [round(s["compile_s"], 4) for s in results[case]],
                "median_s": round(medians[case], 4),
                "overhead_vs_a_s": round(medians[case] - medians["a_plain"], 4),
                "import_median_s": round(statistics.median(s["import_s"] for s in results[case]), 4),
                "load_1min_before_each": [round(s["load_1min"], 2) for s in results[case]],
            }
            for case in cases
        },
        "skipped": skipped,
        "goals": goals,
    }
    output = args.output or RESULTS / f"compile_overhead-{now.date().isoformat()}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")

    print(f"\n{'case':<16} {'median s':>9} {'vs a s':>8}  import s")
    for case, entry in report["cases"].items():
        median, overhead, imports = entry["median_s"], entry["overhead_vs_a_s"], entry["import_median_s"]
        print(f"{case:<16} {median:>9.3f} {overhead:>+8.3f}  {imports:.3f}")
    for case, goal in goals.items():
        what = "overhead" if goal["measure"] == "overhead" else "time"
        verdict = "PASS" if goal["pass"] else "FAIL"
        print(f"goal {case}: {what} {goal['value_s']:.3f} s <= {goal['limit_s']} s: {verdict}")
    for case, why in skipped.items():
        print(f"skipped {case}: {why}")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
