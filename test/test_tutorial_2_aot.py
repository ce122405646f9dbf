"""Tutorial 2 (AllGather-GEMM): every kernel of ``aot.kernels()`` compiles for sm_90 without a GPU,
uses Hopper's tensor-core and TMA instructions, and the ready-flag wait leaves the software
pipeline as it is without the wait."""

from __future__ import annotations

import functools
import re

import pytest
import triton
from conftest import assert_bounded_wait, assert_no_spills, assert_wgmma_pipelined
from triton.backends.compiler import GPUTarget

from tutorials.allgather_gemm import aot, schedule

TARGET = GPUTarget("cuda", 90, 32)

NAMES = [name for name, _ in aot.kernels()]
GEMMS = [name for name in NAMES if name.startswith("ag_gemm_")]


@functools.cache
def _compiled(name: str):
    source = dict(aot.kernels())[name]
    return triton.compile(source, target=TARGET, options=aot.options_for(name))


@pytest.mark.parametrize("name", GEMMS)
def test_kernel_compiles_for_sm90_with_wgmma_and_tma(name, tmp_path):
    kernel = _compiled(name)
    ptx = kernel.asm["ptx"]
    assert ".target sm_90a" in ptx
    assert "wgmma.mma_async" in ptx, "the GEMM must use Hopper's warpgroup MMA"
    assert "cp.async.bulk.tensor" in ptx, "A and B must be loaded with TMA"
    assert len(kernel.asm["cubin"]) > 0
    assert kernel.metadata.shared <= schedule.SMEM_LIMIT_BYTES
    waits = "_nowait" not in name  # the copy-engine GEMMs with checks and the SM-push GEMMs
    assert ("ld.acquire.sys" in ptx) == waits
    assert ("fence.proxy.async.global" in ptx) == waits
    if waits:
        assert_bounded_wait(ptx, _wait_ms_param(ptx, last=2 if name.endswith("_smpush") else 1))
    else:
        assert "%globaltimer" not in ptx and "trap;" not in ptx
    assert_wgmma_pipelined(ptx, tmp_path)


def _wait_ms_param(ptx: str, last: int = 1) -> str:
    """The PTX name of the kernels' ``wait_ms``: their ``last``-th 32-bit parameter from the end (tensor
    descriptors expand into several PTX parameters, so it has no fixed index; in the SM-push GEMM only
    ``shard_bytes`` follows it, in the others only pointers)."""
    header = ptx[ptx.index(".entry") : ptx.index(")", ptx.index(".entry"))]
    return re.findall(r"\.param \.[ub]32 (\w+)", header)[-last]


def test_wait_all_kernel_inlines_the_bounded_wait():
    ptx = _compiled("ag_wait_all").asm["ptx"]
    assert "ld.acquire.sys" in ptx and "fence.proxy.async.global" in ptx
    assert_bounded_wait(ptx, _wait_ms_param(ptx))


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
    assert _pipeline_shape(with_wait)["stage_buffers"] == 4  # A and B, 3 stages each, in each of the two loops
    assert with_wait.count("tt.extern_elementwise") == 1 and "tt.extern_elementwise" not in without


def _defs(ttgir: str) -> dict[str, set[str]]:
    """SSA value -> values its defining line uses (straight-line approximation)."""
    deps: dict[str, set[str]] = {}
    for line in ttgir.splitlines():
        m = re.match(r"\s*(%[\w.]+)(?::\d+)? = (.*)", line)
        if m:
            deps[m.group(1)] = {re.sub(r"#\d+$", "", u) for u in re.findall(r"%[\w.#]+", m.group(2))}
    return deps


def test_peer_a_loads_depend_on_the_wait_and_local_ones_do_not_wait():
    """The A row offset of every TMA load of a peer's rows is computed from the wait's result, so the
    pipeliner cannot issue a load before its tile's wait; loads of the local shard (the caller's
    ``a``) have no wait to depend on."""
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

    def load_rows(desc: str) -> list[str]:
        rows = re.findall(rf"async_tma_copy_global_to_local %{desc}\[(%[\w.#]+),", ttgir)
        assert rows, f"no TMA load of {desc} found"
        return [re.sub(r"#\d+$", "", row) for row in rows]

    for row in load_rows("gathered_desc"):
        assert reaches(row, set()), f"A load at row {row} does not depend on the wait"
    for row in load_rows("local_desc"):
        assert not reaches(row, set()), f"local A load at row {row} depends on a wait"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_sm_push_gemm_pushes_with_vectors_and_release_flags_without_spills(dtype, tmp_path):
    """The SM-push GEMM: peers reached through nvshmem_ptr (NVSHMEM's device state linked in), 16-byte
    vector copies, one st.release.sys per raised flag after a system fence, ticket and completion counters
    as atomics, the same software pipeline as the copy-engine GEMM with waits, and no spills."""
    kernel = _compiled(f"ag_gemm_{dtype}_smpush")
    ptx = kernel.asm["ptx"]
    assert "nvshmemi_device_state_d" in ptx
    assert re.search(r"st(\.global)?\.v4\.b32", ptx) and re.search(r"ld(\.global)?(\.nc)?\.v4\.b32", ptx)
    assert ptx.count("st.release.sys.b32") == 1 and "membar.sys" in ptx
    assert len(re.findall(r"atom(?:\.\w+)*?\.add\.u32", ptx)) == 3  # tickets, chunks done, warps exited
    assert kernel.metadata.shared <= schedule.SMEM_LIMIT_BYTES
    ttgir = kernel.asm["ttgir"]
    assert _pipeline_shape(ttgir) == _pipeline_shape(_compiled(f"ag_gemm_{dtype}_wait").asm["ttgir"])
    assert_no_spills(ptx, tmp_path)
