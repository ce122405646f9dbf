"""AOT-compile the NVSHMEM ring kernel against several NVSHMEM installations (CPU, no GPU needed).

Usage, from the repository root: ``python -m bench.nvshmem_versions NVSHMEM_ROOT [NVSHMEM_ROOT ...]
[--out DIR]``, each root a folder with ``include/`` and ``lib/`` (for a wheel: ``unzip
nvidia_nvshmem_cu13-X.whl`` and pass ``.../nvidia/nvshmem``). Each root is compiled in a fresh
process with empty caches (first-ever compile), then again warm (plugin caches kept, Triton cache
emptied). Records which bitcode was linked, that NVSHMEM's state is in the PTX, that no NVSHMEM
function is left unresolved (the collectives linked as precompiled objects are listed apart), and
times, with the run's metadata.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tutorials.common.run_metadata import run_metadata

ROOT = Path(__file__).resolve().parents[1]
PROBE = r"""
import json, re, time
import triton
from triton.compiler import ASTSource
from examples.kernels import raw_kernels as k
from triton_raw_ext.nvshmem_install import find_nvshmem
from tutorials.common.aot import SM90
nv = find_nvshmem()
sig = {"buf": "*i32", "slot": "*i32", "sig": "*u64", "out": "*i32", "step": "i64", "BLOCK": "constexpr"}
t = time.perf_counter()
c = triton.compile(ASTSource(k.ring_kernel, signature=sig, constexprs={"BLOCK": 128}), target=SM90)
ptx = c.asm["ptx"]
print(json.dumps({
    "nvshmem": nv.version_str, "bitcode": nv.bitcode_for(90).name, "seconds": round(time.perf_counter() - t, 2),
    "link_seconds": c.metadata.raw_nvshmem_link_s,
    "state_in_ptx": bool(re.search(r"\.visible \.\w+ .*nvshmemi_device_state_d\[", ptx)),
    "unresolved_nvshmem": sorted(
        s for s in re.findall(r"\.extern \.func\s+(?:\([^)]*\)\s*)?(\w+)", ptx)
        if "nvshmem" in s and s not in c.metadata.raw_nvshmem_objects),
    "linked_as_objects": list(c.metadata.raw_nvshmem_objects),
    "cubin_elf": c.asm["cubin"][:4] == b"\x7fELF", "symbols": list(c.metadata.raw_nvshmem)}))
"""


def compile_once(nvshmem_root: Path, caches: Path) -> dict:
    env = {**os.environ, "NVSHMEM_HOME": str(nvshmem_root), "TRITON_CACHE_DIR": str(caches / "triton"),
           "TRITON_RAW_CACHE_DIR": str(caches / "raw")}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        return {"ok": False, "error": out.stderr[-2000:]}
    return {"ok": True, **json.loads(out.stdout.strip().splitlines()[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("roots", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    rows = []
    for root in args.roots:
        caches = Path(tempfile.mkdtemp(prefix="nvshmem-versions-"))
        cold = compile_once(root, caches)
        shutil.rmtree(caches / "triton", ignore_errors=True)
        warm = compile_once(root, caches)
        shutil.rmtree(caches, ignore_errors=True)
        rows.append({"root": str(root), "cold": cold, "warm": warm})
        print(f"{root}: cold {cold.get('seconds')} s, warm {warm.get('seconds')} s, "
              f"{cold.get('nvshmem')} {cold.get('bitcode')} ok={cold['ok'] and warm['ok']}")
    record = {"benchmark": "nvshmem_versions", "target": "cuda sm_90 (AOT, no GPU)", **run_metadata(), "results": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"nvshmem_versions-{datetime.date.today()}.json"
    path.write_text(json.dumps(record, indent=1))
    print(f"-> {path}")


if __name__ == "__main__":
    main()
