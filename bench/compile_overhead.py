"""What raw functions and NVSHMEM add to a kernel's AOT compile time, per NVSHMEM release (CPU only).

Each sample is a fresh Python process that compiles one kernel with ``triton.compile`` for
``GPUTarget("cuda", 90, 32)``, with the Triton cache and the plugin cache in folders this script
controls. Cases (kernels in ``bench.kernels``):

- ``a_plain``: a plain Triton kernel (the plugin is not imported); Triton cache empty.
- ``b_raw``: the same kernel plus one raw elementwise function; its compiled `.cu` already in the
  plugin cache, Triton cache empty.
- ``c_nvshmem_warm``: plus a raw function using NVSHMEM; plugin caches warm (both `.cu` files and
  the NVSHMEM cut), Triton cache empty. One case per NVSHMEM release.
- ``d_nvshmem_cold``: the ``c`` kernel with every cache empty: the first compile ever. One case per
  NVSHMEM release.
- ``e_collective_warm``: the ``b`` kernel plus ``triton_raw_ext.nvshmem.int32_min_reduce_block``;
  plugin caches warm (the library's `.cu`, NVSHMEM's precompiled headers, the collective's object),
  Triton cache empty. One case per NVSHMEM release.
- ``f_collective_respecialized``: the ``e`` kernel compiled once, then timed compiling another
  specialisation (``BLOCK=512``) in the same process; caches as for ``e``. One case per release.
  ``b_raw_respecialized`` is the same for the ``b`` kernel.
- ``g_collective_cold``: the ``e`` kernel with every cache empty. One case per release.

NVSHMEM releases are given as installation folders (``--nvshmem-home``, each with ``include/`` and
``lib/``; the sample sets ``NVSHMEM_HOME`` to it) and as wheel versions to fetch
(``--fetch-nvshmem``: ``pip download nvidia-nvshmem-cu13==VERSION``, unpacked once under
``~/.cache/triton-raw-ext/nvshmem/``). Without either, the installed NVSHMEM is measured.

The reported time is ``triton.compile`` alone (imports excluded; the kernel module's import time
is recorded as ``import_s``), as wall time and as CPU time (``cpu_s``: the compiling process and the
tools it ran, clang, ptxas, llvm-link), which other work on the machine inflates much less. Cases
are sampled round-robin so that drift spreads over all of them.
Goals, on wall time (a miss is reported, never raised; each also gives the CPU-time value): ``b_raw``
at most 0.3 s over ``a_plain``; per release, ``c_nvshmem_warm`` at most 0.3 s over ``b_raw`` (the
same kernel without NVSHMEM), ``d_nvshmem_cold`` at most 10 s, ``e_collective_warm`` at most 3 s and
``f_collective_respecialized`` at most 0.3 s over ``b_raw_respecialized``. Results go to one JSON file
with the run's metadata, ``bench/results/<date>-cpu-compile-overhead/compile_overhead-<commit>.json``
by default.

Usage, from the repository root: ``python -m bench.compile_overhead [--samples N] [--nvshmem-home DIR
...] [--fetch-nvshmem VERSION ...] [--output PATH]``
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tutorials.common.run_metadata import run_metadata

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
FETCH_DIR = Path.home() / ".cache" / "triton-raw-ext" / "nvshmem"
WHEEL = "nvidia-nvshmem-cu13"

# case -> (kernel module, kernel, signature attribute, what it measures)
CASES = {
    "a_plain": ("overhead_plain", "plain_kernel", "SIGNATURE", "plain Triton kernel, Triton cache empty"),
    "b_raw": (
        "overhead_raw", "raw_kernel", "RAW_SIGNATURE",
        "+ one raw elementwise function (.cu in the plugin cache), Triton cache empty",
    ),
    "c_nvshmem_warm": (
        "overhead_raw", "nvshmem_kernel", "NVSHMEM_SIGNATURE",
        "+ a raw function using NVSHMEM, plugin caches warm (incl. the NVSHMEM cut), Triton cache empty",
    ),
    "d_nvshmem_cold": (
        "overhead_raw", "nvshmem_kernel", "NVSHMEM_SIGNATURE",
        "the NVSHMEM kernel with every cache empty (first compile ever)",
    ),
    "b_raw_respecialized": (
        "overhead_raw", "raw_kernel", "RAW_SIGNATURE",
        "the b kernel compiled once, then another specialisation timed in the same process",
    ),
    "e_collective_warm": (
        "overhead_collective", "collective_kernel", "COLLECTIVE_SIGNATURE",
        "+ triton_raw_ext.nvshmem's int32 min-reduce, plugin caches warm (incl. its object), Triton cache empty",
    ),
    "f_collective_respecialized": (
        "overhead_collective", "collective_kernel", "COLLECTIVE_SIGNATURE",
        "the e kernel compiled once, then another specialisation timed in the same process",
    ),
    "g_collective_cold": (
        "overhead_collective", "collective_kernel", "COLLECTIVE_SIGNATURE",
        "the e kernel with every cache empty (first compile ever)",
    ),
}  # fmt: skip
NVSHMEM_CASES = ("c_nvshmem_warm", "d_nvshmem_cold", "e_collective_warm", "f_collective_respecialized",
                 "g_collective_cold")
WARM_CASES = ("b_raw", "c_nvshmem_warm", "b_raw_respecialized", "e_collective_warm", "f_collective_respecialized")
RESPECIALIZED_CASES = ("b_raw_respecialized", "f_collective_respecialized")
RESPECIALIZED_CONSTEXPRS = {"BLOCK": 512}  # the timed compile of a respecialised case
MAX_RETAKES = 3
# case -> (the case it is compared with, or None for the absolute time; limit in seconds)
GOALS = {
    "b_raw": ("a_plain", 0.3),
    "c_nvshmem_warm": ("b_raw", 0.3),
    "d_nvshmem_cold": (None, 10.0),
    "e_collective_warm": (None, 3.0),
    "f_collective_respecialized": ("b_raw_respecialized", 0.3),
}


@dataclass(frozen=True)
class Sample:
    """One case to time: its name, the NVSHMEM release it uses (None: none) and that release's folder."""

    case: str
    nvshmem: str | None = None
    home: Path | None = None

    @property
    def label(self) -> str:
        return self.case if self.nvshmem is None else f"{self.case}@{self.nvshmem}"


def _cpu_s() -> float:
    """CPU seconds used so far by this process and the child processes it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def worker(case: str) -> None:
    """Compile the case's kernel once in this process (a respecialised case: twice, timing the second);
    print its timings and the plugin code digest.

    The digest (None when the plugin was not imported) is part of every plugin cache key: a sample
    whose digest differs from its warm-up's did not see a warm cache.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module_name, kernel_name, signature_name, _ = CASES[case]
    start = time.perf_counter()
    module = importlib.import_module(f"bench.kernels.{module_name}")
    import_s = time.perf_counter() - start
    kernel, signature = getattr(module, kernel_name), getattr(module, signature_name)
    source = ASTSource(kernel, signature=signature, constexprs=module.CONSTEXPRS)
    if case in RESPECIALIZED_CASES:
        triton.compile(source, target=GPUTarget("cuda", 90, 32))
        source = ASTSource(kernel, signature=signature, constexprs=RESPECIALIZED_CONSTEXPRS)
    start, start_cpu = time.perf_counter(), _cpu_s()
    triton.compile(source, target=GPUTarget("cuda", 90, 32))
    compile_s, cpu_s = time.perf_counter() - start, _cpu_s() - start_cpu
    plugin = sys.modules.get("triton_raw_ext.version")
    digest = plugin.code_digest() if plugin else None
    print(json.dumps({"compile_s": compile_s, "cpu_s": cpu_s, "import_s": import_s, "plugin_code": digest}))


def run_sample(sample: Sample, triton_cache: Path, plugin_cache: Path) -> dict:
    """One fresh process compiling ``sample`` with the given cache folders: its timings, plugin digest and
    the 1-minute load average just before it started (other work on the machine skews timings)."""
    load = os.getloadavg()[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_") and k != "NVSHMEM_HOME"}
    env |= {"TRITON_CACHE_DIR": str(triton_cache), "TRITON_RAW_CACHE_DIR": str(plugin_cache)}
    if sample.home is not None:
        env["NVSHMEM_HOME"] = str(sample.home)
    proc = subprocess.run(
        [sys.executable, "-m", __spec__.name, "--worker", sample.case],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"case {sample.label} failed (exit {proc.returncode}):\n{proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1]) | {"load_1min": load}


def measure(samples: list[Sample], rounds: int, root: Path) -> dict[str, list[dict]]:
    """``rounds`` timings per sample, taken round-robin so that drift spreads over all of them.

    Warm cases fill their plugin cache with an untimed run first. If the plugin's code changes
    during the run (its digest is in every cache key, so the "warm" sample was in fact cold), the
    cache is re-warmed and the sample retaken, up to ``MAX_RETAKES`` times per sample.
    """
    folders = {s.label: root / s.label.replace("@", "-") for s in samples}
    warm_digest = {}
    for s in samples:  # fill the plugin caches once, untimed
        if s.case in WARM_CASES:
            warm_digest[s.label] = run_sample(s, folders[s.label] / "warmup-triton", folders[s.label] / "plugin")[
                "plugin_code"
            ]
    results: dict[str, list[dict]] = {s.label: [] for s in samples}
    for i in range(rounds):
        for s in samples:
            folder = folders[s.label]
            plugin = folder / "plugin" if s.label in warm_digest else folder / f"plugin-{i}"
            for retake in range(MAX_RETAKES + 1):
                result = run_sample(s, folder / f"triton-{i}-{retake}", plugin)
                if s.label not in warm_digest or result["plugin_code"] == warm_digest[s.label]:
                    break
                print(f"  {s.label}: the plugin code changed; re-warming and retaking", flush=True)
                warm_digest[s.label] = run_sample(s, folder / f"rewarm-{i}-{retake}", plugin)["plugin_code"]
            else:
                raise SystemExit("the plugin code keeps changing under the benchmark; rerun on a quiet tree")
            results[s.label].append(result)
            print(f"  round {i + 1}/{rounds} {s.label}: {result['compile_s']:.3f} s", flush=True)
    return results


def fetch_nvshmem(version: str) -> Path:
    """The ``nvidia/nvshmem`` folder of the ``nvidia-nvshmem-cu13==version`` wheel, downloaded and unpacked once."""
    home = FETCH_DIR / version / "nvidia" / "nvshmem"
    if (home / "include" / "nvshmem.h").is_file():
        return home
    FETCH_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{version}-", dir=FETCH_DIR) as tmp:
        print(f"fetching {WHEEL}=={version}", flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"{WHEEL}=={version}", "-d", tmp],
            check=True,
        )  # fmt: skip
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise SystemExit(f"pip download {WHEEL}=={version} gave {[w.name for w in wheels]}, not one wheel")
        with zipfile.ZipFile(wheels[0]) as wheel:
            wheel.extractall(Path(tmp) / "unpacked")
        os.replace(Path(tmp) / "unpacked", FETCH_DIR / version)  # whole or not at all
    return home


def nvshmem_releases(homes: list[Path], fetch: list[str]) -> dict[str, Path]:
    """NVSHMEM version -> installation folder, for the folders given and the versions fetched (in that order).

    With neither, the installed NVSHMEM (as the plugin finds it), or nothing when there is none.
    """
    from triton_raw_ext.nvshmem_install import NvshmemInstall, find_nvshmem

    installs = [NvshmemInstall(home.resolve()) for home in homes]
    installs += [NvshmemInstall(fetch_nvshmem(version)) for version in fetch]
    if not homes and not fetch:
        installed = find_nvshmem(required=False)
        installs = [installed] if installed else []
    releases: dict[str, Path] = {}
    for install in installs:
        if install.version_str in releases:
            raise SystemExit(f"NVSHMEM {install.version_str} given twice: {releases[install.version_str]} "
                             f"and {install.root}")
        install.bitcode_for(90)  # refuses a folder without usable device bitcode, naming what it found
        releases[install.version_str] = install.root
    return releases


def plugin_source() -> dict[str, str | bool | None]:
    """Where the measured plugin was imported from and whether its git tree had changes."""
    import triton_raw_ext

    folder = Path(triton_raw_ext.__file__).resolve().parent
    proc = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
                          capture_output=True, text=True)  # fmt: skip
    return {"path": str(folder), "dirty": bool(proc.stdout.strip()) if proc.returncode == 0 else None}


def compile_path_versions() -> dict[str, str]:
    """Versions of the tools on the compile path besides those of the run's metadata, as the plugin
    discovers them."""
    import llvmlite

    from triton_raw_ext.toolchain import find_clang

    clang = find_clang()
    clang_version = ".".join(map(str, clang.version))
    return {"llvmlite": llvmlite.__version__, "clang": f"{clang_version} ({' '.join(clang.command)})"}


def summarize(samples: list[Sample], results: dict[str, list[dict]]) -> tuple[dict, dict, dict[str, dict]]:
    """Per-sample medians of wall and CPU time, and each goal's measured values and verdict (on wall time)."""
    medians = {label: statistics.median(r["compile_s"] for r in rs) for label, rs in results.items()}
    cpu = {label: statistics.median(r["cpu_s"] for r in rs) for label, rs in results.items()}
    goals = {}
    for s in samples:
        base, limit = GOALS.get(s.case, (None, None))
        if limit is None:
            continue
        value = medians[s.label] - medians[base] if base else medians[s.label]
        value_cpu = cpu[s.label] - cpu[base] if base else cpu[s.label]
        goals[s.label] = {"compared_with": base, "limit_s": limit, "value_s": round(value, 4),
                          "value_cpu_s": round(value_cpu, 4), "pass": value <= limit}
    return medians, cpu, goals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", "-n", type=int, default=5, help="fresh processes per case (default 5)")
    parser.add_argument("--nvshmem-home", type=Path, nargs="+", default=[], metavar="DIR",
                        help="NVSHMEM installation folders (include/ and lib/) to measure side by side")
    parser.add_argument("--fetch-nvshmem", nargs="+", default=[], metavar="VERSION",
                        help=f"{WHEEL} versions to download (once) and measure side by side")
    parser.add_argument("--output", type=Path, help="JSON file (default: see above)")
    parser.add_argument("--worker", choices=sorted(CASES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    if args.samples < 1:
        parser.error("--samples must be at least 1")

    releases = nvshmem_releases(args.nvshmem_home, args.fetch_nvshmem)
    samples = [Sample("a_plain"), Sample("b_raw"), Sample("b_raw_respecialized")]
    samples += [Sample(case, version, home) for version, home in releases.items() for case in NVSHMEM_CASES]
    skipped = {} if releases else {c: f"NVSHMEM not installed (`pip install {WHEEL}`)" for c in NVSHMEM_CASES}
    print(f"compile overhead, {args.samples} fresh processes per case: {', '.join(s.label for s in samples)}")
    with tempfile.TemporaryDirectory(prefix="compile-overhead-") as tmp:
        results = measure(samples, args.samples, Path(tmp))
    medians, cpu, goals = summarize(samples, results)

    from triton_raw_ext.nvshmem_install import NvshmemInstall

    meta = run_metadata()
    report = {
        **meta,
        "versions": {**meta["versions"], **compile_path_versions()},
        "plugin": plugin_source(),
        "target": "GPUTarget('cuda', 90, 32)",
        "timed": "triton.compile only, in a fresh process per sample",
        "nvshmem": {
            version: {"home": str(home), "bitcode_sm_90": NvshmemInstall(home).bitcode_for(90).name}
            for version, home in releases.items()
        },
        "cases": {
            s.label: {
                "description": CASES[s.case][3],
                "nvshmem": s.nvshmem,
                "samples_s": [round(r["compile_s"], 4) for r in results[s.label]],
                "median_s": round(medians[s.label], 4),
                "cpu_samples_s": [round(r["cpu_s"], 4) for r in results[s.label]],
                "cpu_median_s": round(cpu[s.label], 4),
                "import_median_s": round(statistics.median(r["import_s"] for r in results[s.label]), 4),
                "load_1min_before_each": [round(r["load_1min"], 2) for r in results[s.label]],
            }
            for s in samples
        },
        "skipped": skipped,
        "goals": goals,
    }
    folder = RESULTS / f"{meta['date'][:10]}-cpu-compile-overhead"  # the UTC date
    output = args.output or folder / f"compile_overhead-{(meta['git_head'] or 'unknown')[:10]}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")

    print(f"\n{'case':<24} {'median s':>9} {'CPU s':>7}  import s")
    for label, entry in report["cases"].items():
        print(f"{label:<24} {entry['median_s']:>9.3f} {entry['cpu_median_s']:>7.3f}  {entry['import_median_s']:.3f}")
    for label, goal in goals.items():
        what = f"over {goal['compared_with']}" if goal["compared_with"] else "time"
        verdict = "PASS" if goal["pass"] else "FAIL"
        print(f"goal {label}: {what} {goal['value_s']:.3f} s <= {goal['limit_s']} s: {verdict} "
              f"(CPU time: {goal['value_cpu_s']:.3f} s)")
    for case, why in skipped.items():
        print(f"skipped {case}: {why}")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
