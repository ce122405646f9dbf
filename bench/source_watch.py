"""What the `.cu` edit watch adds to each launch of a kernel that calls raw functions (CPU only).

The pre-run check (:mod:`triton_raw_ext.source_watch`) stats every file the kernel's raw
functions were built from, once each. This times that check for kernels reaching 1, 4 and 16 raw
functions, each from a `.cu` of its own and all from one `.cu`, against one ``os.stat`` on the same
machine, median of many calls, and writes ``bench/results/<date>-cpu-source-watch/``.

Usage, from the repository root: ``python -m bench.source_watch [--calls N] [--out FOLDER]``
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import tempfile
import time
from pathlib import Path

from triton_raw_ext.cu_compiler import CompileSpec
from triton_raw_ext.dialect import RawFunction, stamp
from triton_raw_ext.source_watch import _pre_run
from tutorials.common.run_metadata import run_metadata

HERE = Path(__file__).resolve().parent


def _median_s(call, calls: int) -> float:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def time_check(functions: int, files: int, calls: int, folder: Path) -> float:
    """Median seconds of one pre-run check over ``functions`` raw functions spread over ``files`` `.cu`."""
    raw = []
    for i in range(functions):
        folder.mkdir(exist_ok=True)
        source = folder / f"f{i % files}-device.cu"
        if not source.exists():
            source.write_text("".join(f'extern "C" __device__ float f{j}(float x) {{ return x + {j}.0f; }}\n'
                                      for j in range(functions)))
        fn = RawFunction(f"f{i}", CompileSpec(source), f"f{i}")
        fn.source_stamps = {source: stamp(source)}  # what computing its cache key records
        raw.append(fn)
    return _median_s(_pre_run(raw), calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        one_stat = _median_s(lambda: stamp(Path(tmp)), args.calls)
        print(f"one os.stat: {one_stat * 1e6:.2f} us")
        for n in (1, 4, 16):
            for files in sorted({1, n}):
                seconds = time_check(n, files, args.calls, Path(tmp) / f"{n}-{files}")
                rows.append({"raw_functions": n, "cu_files": files, "check_us": round(seconds * 1e6, 2)})
                print(f"{n:>3} raw functions from {files:>2} .cu: {seconds * 1e6:7.2f} us per launch")
    out = args.out or HERE / "results" / f"{datetime.date.today().isoformat()}-cpu-source-watch"
    out.mkdir(parents=True, exist_ok=True)
    doc = {**run_metadata(), "calls": args.calls, "one_stat_us": round(one_stat * 1e6, 2), "rows": rows}
    (out / "source_watch.json").write_text(json.dumps(doc, indent=1))
    print(f"wrote {out / 'source_watch.json'}")


if __name__ == "__main__":
    main()
