"""Compile the Gluon persistent kernel (fp8, the layer's launch) for sm_90 and report its ptxas spills, any
wgmma serialization (C75xx), the spills inside its wgmma loops and its wgmma shapes. Run from the repository
root, before and after `git apply bench/results/2026-12-07-cpu-t3-tail-registers/probe.patch`:
PYTHONPATH=.:test python3 bench/results/2026-12-07-cpu-t3-tail-registers/probe.py"""

import re
import subprocess
import tempfile
from pathlib import Path

import triton
from conftest import ptxas_report, wgmma_loop_spills
from triton.backends.compiler import GPUTarget

import triton_raw_ext  # noqa: F401  (the backend hook: raw calls inlined)
from tutorials.megamoe import aot

((cfg, launch),) = [(c, k) for c, k in aot.all_launches() if k.name == "moe_persistent_gluon"]
compiled = triton.compile(aot.ast_source(launch, cfg), target=GPUTarget("cuda", 90, 32),
                          options=aot.options_for(launch.name))  # fmt: skip
with tempfile.TemporaryDirectory() as folder:
    cubin = Path(folder) / "kernel.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    sass = subprocess.run([triton.knobs.nvidia.nvdisasm.path, "-c", str(cubin)], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip
    report = ptxas_report(compiled.asm["ptx"], Path(folder))
print("triton", triton.__version__)
print("spills:", [line.strip() for line in report.splitlines() if "spill" in line])
print("wgmma serialized (C75xx):", re.findall(r"\(C75\d\d\)", report))
print("spills inside wgmma loops:", wgmma_loop_spills(sass.splitlines()))
print("wgmma shapes:", sorted(set(re.findall(r"QGMMA\.[0-9x]+", sass))))
