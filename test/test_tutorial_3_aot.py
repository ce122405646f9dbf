"""Tutorial 3 (MegaMoE): every kernel compiles ahead of time for sm_90 (no GPU needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import triton
from triton.backends.compiler import GPUTarget

TUTORIAL = Path(__file__).resolve().parent.parent / "tutorials" / "03-megamoe"
sys.path.insert(0, str(TUTORIAL))

from conftest import load_tutorial_aot  # noqa: E402

aot = load_tutorial_aot("03-megamoe")

KERNELS = aot.kernels()
OPTIONS = aot.options()


@pytest.mark.nvshmem
@pytest.mark.parametrize("name,src", KERNELS, ids=[n for n, _ in KERNELS])
def test_kernel_compiles_for_sm90(name, src):
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=OPTIONS[name])
    assert compiled.asm["cubin"]
    ttgir = compiled.asm["ttgir"]
    if name in ("moe_l1_swiglu", "moe_l2"):
        assert "warp_group_dot" in ttgir, "the grouped GEMM must use Hopper's wgmma"
        assert "async_copy_global_to_local" in ttgir, "the grouped GEMM must be software-pipelined"
    if name in ("moe_dispatch", "moe_combine"):
        assert "nvshmemi_device_state_d" in compiled.asm["ptx"], "NVSHMEM's device library must be linked"


def test_every_kernel_listed():
    assert [n for n, _ in KERNELS] == [
        "moe_route",
        "moe_plan",
        "moe_dispatch",
        "moe_place",
        "moe_l1_swiglu",
        "moe_l2",
        "moe_combine",
        "moe_reduce",
    ]
