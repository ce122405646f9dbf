"""Tutorial 1 on CPU: every kernel of tutorials/01-allreduce-rmsnorm AOT-compiles for sm_90.

Also checks, in the PTX, what the tutorial's performance and correctness arguments rely on: 16-byte
vector loads and stores, NVSHMEM linked only into the communicating kernels, volatile loads of the
landing rows, and the GPU-scope fence after the signal wait.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

TUTORIAL = Path(__file__).resolve().parents[1] / "tutorials" / "01-allreduce-rmsnorm"
sys.path.insert(0, str(TUTORIAL))

triton = pytest.importorskip("triton")
pytest.importorskip("triton_raw_ext")

from arn_plan import Algorithm  # noqa: E402
from conftest import load_tutorial_aot  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

aot = load_tutorial_aot("01-allreduce-rmsnorm")

TARGET = GPUTarget("cuda", 90, 32)


def _compile(src, warps=None):
    options = {"num_warps": warps} if warps else None
    return triton.compile(src, target=TARGET, options=options)


@pytest.mark.parametrize("name", [name for name, _ in aot.kernels()])
def test_every_kernel_compiles_for_sm90(name):
    src = dict(aot.kernels())[name]
    compiled = _compile(src)
    assert compiled.asm["cubin"], name
    assert ".target sm_90" in compiled.asm["ptx"]


def test_local_kernel_is_vectorised_and_free_of_nvshmem():
    src, warps = aot.variant(Algorithm.LOCAL, 1, 8192, "bf16")
    ptx = _compile(src, warps).asm["ptx"]
    assert "nvshmem" not in ptx
    assert len(re.findall(r"ld\.global[\w:.]*\.v4\.b32", ptx)) >= 3  # x, residual, weight
    assert len(re.findall(r"st\.global[\w:.]*\.v4\.b32", ptx)) >= 2  # norm_out, residual_out
    assert not re.search(r"ld\.global[\w:.]*\.b16", ptx)  # no scalar 2-byte accesses
    assert ".local" not in ptx  # no spills


@pytest.mark.parametrize("algo,world", [(Algorithm.ONESHOT, 2), (Algorithm.TWOSHOT, 4)])
def test_comm_kernels_link_nvshmem_and_order_their_reads(algo, world):
    src, warps = aot.variant(algo, world, 4096, "fp16")
    compiled = _compile(src, warps)
    ptx = compiled.asm["ptx"]
    assert getattr(compiled.metadata, "raw_nvshmem", True)
    assert "nvshmemi_device_state_d" in ptx
    assert re.search(r"ld\.volatile\.global[\w.]*\.v4", ptx)  # landing rows: volatile, 16-byte
    assert "membar.gl" in ptx  # wait_ge's acquire fence
    body = ptx[ptx.index(".entry") :]
    spin = body.index("ld.volatile.b64")  # the signal spin loop (nvshmem_signal_wait_until)
    assert body.index("membar.gl", spin) < body.index("ld.volatile.global", spin)


def test_warm_jobs_cover_every_launch_variant():
    jobs = aot.warm_jobs([2048, 7168], [1, 2, 4], 90)
    assert len(jobs) == 2 * 2 * (1 + 2 + 2)
    assert {j[0] for j in jobs if j[1] == 1} == {Algorithm.LOCAL}
