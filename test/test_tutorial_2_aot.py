"""Tutorial 2 (AllGather-GEMM): every kernel of ``aot.kernels()`` compiles for sm_90 without a GPU,
uses Hopper's tensor-core and TMA instructions, and the ready-flag wait leaves the software
pipeline as it is without the wait."""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

import pytest
import triton
from conftest import load_tutorial_aot
from triton.backends.compiler import GPUTarget

TUTORIAL = Path(__file__).resolve().parents[1] / "tutorials" / "02-allgather-gemm"
TARGET = GPUTarget("cuda", 90, 32)


aot = load_tutorial_aot("02-allgather-gemm")
sys.path.insert(0, str(TUTORIAL))
import ag_schedule as schedule  # noqa: E402

NAMES = [name for name, _ in aot.kernels()]


@functools.cache
def _compiled(name: str):
    source = dict(aot.kernels())[name]
    return triton.compile(source, target=TARGET, options=aot.options_for(name))


@pytest.mark.parametrize("name", NAMES)
def test_kernel_compiles_for_sm90_with_wgmma_and_tma(name):
    kernel = _compiled(name)
    ptx = kernel.asm["ptx"]
    assert ".target sm_90a" in ptx
    assert "wgmma.mma_async" in ptx, "the GEMM must use Hopper's warpgroup MMA"
    assert "cp.async.bulk.tensor" in ptx, "A and B must be loaded with TMA"
    assert len(kernel.asm["cubin"]) > 0
    assert kernel.metadata.shared <= schedule.SMEM_LIMIT_BYTES
    waits = "_wait" in name and "_nowait" not in name
    assert ("ld.acquire.sys" in ptx) == waits
    assert ("fence.proxy.async.global" in ptx) == waits
    assert "call.uni" not in ptx or "ag_wait_ready" not in ptx, "the raw wait must be inlined"


def test_smem_model_matches_the_compiler():
    kernel = _compiled("ag_gemm_bfloat16_wait")
    model = schedule.DEFAULT_CONFIG.smem_bytes()
    assert model <= kernel.metadata.shared <= model + 1024  # the rest is mbarriers


def _pipeline_shape(ttgir: str) -> dict[str, int]:
    return {
        "tma_loads": ttgir.count("ttng.async_tma_copy_global_to_local"),
        "async_dots": len(re.findall(r"ttng\.warp_group_dot .*isAsync = true", ttgir)),
        "stage_buffers": len(re.findall(r"ttg\.local_alloc : \(\) -> !ttg\.memdesc<3x\d+x\d+x(?:bf16|f16)", ttgir)),
        "barrier_waits": ttgir.count("ttng.wait_barrier"),
    }


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_wait_keeps_the_software_pipeline(dtype):
    with_wait = _compiled(f"ag_gemm_{dtype}_wait").asm["ttgir"]
    without = _compiled(f"ag_gemm_{dtype}_nowait").asm["ttgir"]
    assert _pipeline_shape(with_wait) == _pipeline_shape(without)
    assert _pipeline_shape(with_wait)["stage_buffers"] == 2  # A and B, 3 stages each
    assert with_wait.count("tt.extern_elementwise") == 1 and "tt.extern_elementwise" not in without


def _defs(ttgir: str) -> dict[str, set[str]]:
    """SSA value -> values its defining line uses (straight-line approximation)."""
    deps: dict[str, set[str]] = {}
    for line in ttgir.splitlines():
        m = re.match(r"\s*(%[\w.]+)(?::\d+)? = (.*)", line)
        if m:
            deps[m.group(1)] = {re.sub(r"#\d+$", "", u) for u in re.findall(r"%[\w.#]+", m.group(2))}
    return deps


def test_a_loads_depend_on_the_wait():
    """The A row offset of every TMA load of A is computed from the wait's result, so the pipeliner
    cannot issue a load before its tile's wait."""
    ttgir = _compiled("ag_gemm_bfloat16_wait").asm["ttgir"]
    deps = _defs(ttgir)
    token = re.search(r"(%[\w.]+) = tt\.extern_elementwise", ttgir).group(1)

    def reaches(value: str, seen: set[str]) -> bool:
        if value == token:
            return True
        if value in seen:
            return False
        seen.add(value)
        return any(reaches(u, seen) for u in deps.get(value, ()))

    loads = re.findall(r"async_tma_copy_global_to_local %a_desc\[(%[\w.#]+),", ttgir)
    assert loads, "no TMA load of A found"
    for row in loads:
        assert reaches(re.sub(r"#\d+$", "", row), set()), f"A load at row {row} does not depend on the wait"
