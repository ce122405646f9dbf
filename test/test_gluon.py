"""Raw functions called from Gluon kernels: AOT compiles for sm_90 on CPU, and runs on a GPU.

Elementwise, struct, scalar and pointer calls work on every supported Triton. Gluon shared memory
passed to a raw function needs Triton >= 3.9; before, the call is refused with that reason.
"""

from __future__ import annotations

import re

import pytest
import triton
from conftest import aot, aot_error, assert_raw_inlined, requires_gpu
from kernels import gluon_kernels as g
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from examples.kernels.raw_kernels import fill_iota
from triton_raw_ext.triton_version import GLUON_SHARED_ADDRESS

requires_shared_address = pytest.mark.skipif(not GLUON_SHARED_ADDRESS, reason="needs Triton >= 3.9 (gl.inline_asm)")

SIGNATURES = {
    "elementwise_kernel": {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
    "elementwise_2d_kernel": {"x_ptr": "*fp32", "y_ptr": "*fp32", "M": "constexpr", "N": "constexpr"},
    "divmod_kernel": {"a_ptr": "*i32", "b_ptr": "*i32", "quot_ptr": "*i32", "rem_ptr": "*i32", "BLOCK": "constexpr"},
    "scalar_kernel": {"x_ptr": "*fp32", "y_ptr": "*fp32"},
    "rotate_kernel": {"data_ptr": "*i32", "N": "constexpr"},
    "shared_fill_kernel": {"y_ptr": "*fp32", "scale": "fp32", "N": "constexpr"},
    "shared_sum_kernel": {"x_ptr": "*fp32", "out_ptr": "*fp32", "N": "constexpr"},
}  # fmt: skip
CONSTEXPRS = {
    "elementwise_kernel": {"BLOCK": 1024}, "elementwise_2d_kernel": {"M": 32, "N": 64}, "divmod_kernel": {"BLOCK": 128},
    "scalar_kernel": {}, "rotate_kernel": {"N": 128}, "shared_fill_kernel": {"N": 256}, "shared_sum_kernel": {"N": 128},
}  # fmt: skip


def _compile(kernel):
    c = aot(kernel, SIGNATURES[kernel.__name__], CONSTEXPRS[kernel.__name__])
    assert_raw_inlined(c)
    return c


# ---- AOT on CPU ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", [g.elementwise_kernel, g.elementwise_2d_kernel])
def test_elementwise_call_on_a_blocked_layout(kernel):
    c = _compile(kernel)
    calls = re.findall(r"tt\.extern_elementwise .*", c.asm["ttgir"])
    assert calls and all("tensor<" in call and "#blocked" in call for call in calls), calls
    assert re.search(r"\badd(\.rn)?\.f32", c.asm["ptx"])


def test_struct_result_keeps_the_layout():
    c = _compile(g.divmod_kernel)
    assert re.search(r"tt\.extern_elementwise .*-> tensor<128xi64, #blocked>", c.asm["ttgir"]), "one word, blocked"
    assert len(re.findall(r"= sdiv i32", c.asm["llir"])) == 1, "divmod must run once per element (one per thread here)"


def test_scalar_and_pointer_calls():
    assert re.search(r"\badd(\.rn)?\.f32", _compile(g.scalar_kernel).asm["ptx"])
    ptx = _compile(g.rotate_kernel).asm["ptx"]
    assert re.search(r"\bbar\.sync|\bbarrier\.sync", ptx), "__syncthreads() must reach the PTX"
    assert "st.shared" in ptx and "ld.shared" in ptx, "the raw function's own __shared__ tile"


@requires_shared_address
def test_shared_memory_to_a_shared_space_pointer():
    """fill_iota(__attribute__((address_space(3))) float *): Gluon's descriptor becomes a generic
    address (cvta.shared), the wrapper's addrspacecast takes it back to the shared window, and the raw
    stores are st.shared."""
    c = _compile(g.shared_fill_kernel)
    assert re.search(r"ttg\.inline_asm .*!ttg\.memdesc<256xf32", c.asm["ttgir"])
    ptx = c.asm["ptx"]
    assert "cvta.shared.u64" in ptx and "cvta.to.shared.u64" in ptx
    assert re.search(r"\bst\.shared\.(b|f|u)32\b", ptx)
    assert re.search(r"\bbar\.sync|\bbarrier\.sync", ptx), "gl.barrier() between the raw stores and the loads"


@requires_shared_address
def test_shared_memory_to_a_generic_pointer():
    """block_sum(const float *) reads the second buffer of a [2, N] allocation through its generic
    address: generic loads from the converted address."""
    c = _compile(g.shared_sum_kernel)
    assert re.search(r"ttg\.inline_asm .*!ttg\.memdesc<128xf32", c.asm["ttgir"])
    ptx = c.asm["ptx"]
    address = re.search(r"cvta\.shared\.u64 (%rd\d+),", ptx)
    assert address, "the shared address made generic"
    loads = re.findall(rf"\bld\.(?:b|f|u)32\s+%r\d+, \[{address.group(1)}(?:\+\d+)?\]", ptx)
    assert len(loads) == CONSTEXPRS["shared_sum_kernel"]["N"], "block_sum's loop, unrolled, over the converted address"


@pytest.mark.skipif(GLUON_SHARED_ADDRESS, reason="Triton >= 3.9 takes Gluon shared memory")
def test_shared_memory_before_triton_3_9_is_refused():
    text = aot_error(g.shared_fill_kernel, SIGNATURES["shared_fill_kernel"], CONSTEXPRS["shared_fill_kernel"])
    assert "raw function fill_iota: parameter 'buf' (pointer) got Gluon shared memory" in text
    assert "gl.inline_asm, from Triton 3.9); use Triton 3.9, or declare the __shared__ array" in text


@gluon.jit
def _swizzled_kernel(N: gl.constexpr):
    smem = gl.allocate_shared_memory(gl.float32, [N, N], gl.SwizzledSharedLayout(4, 1, 8, [1, 0]))
    fill_iota(smem, N * N, 1.0)


@gluon.jit
def _column_major_kernel(N: gl.constexpr):
    smem = gl.allocate_shared_memory(gl.float32, [N, N], gl.SwizzledSharedLayout(1, 1, 1, [0, 1]))
    fill_iota(smem, N * N, 1.0)


@requires_shared_address
@pytest.mark.parametrize("kernel", [_swizzled_kernel, _column_major_kernel])
def test_shared_memory_that_is_not_row_major_is_refused(kernel):
    text = aot_error(kernel, {"N": "constexpr"}, {"N": 32})
    assert "which is not a plain row-major array" in text
    assert "allocate it with gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])" in text


@gluon.jit
def _shared_for_an_int_kernel(N: gl.constexpr):
    smem = gl.allocate_shared_memory(gl.float32, [N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    fill_iota(0, smem, 1.0)


def test_shared_memory_for_a_non_pointer_parameter_is_refused():
    text = aot_error(_shared_for_an_int_kernel, {"N": "constexpr"}, {"N": 128})
    assert "raw function fill_iota: parameter 'n' (int) got Gluon shared memory" in text
    assert "pass it for a pointer parameter" in text


# ---- on a GPU ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch():
    import torch

    return torch


@requires_gpu
def test_gpu_elementwise(torch):
    n = 100_003  # not a multiple of BLOCK: the mask matters
    x = torch.randn(n, device="cuda")
    y = torch.full_like(x, float("nan"))
    g.elementwise_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024, num_warps=4)
    torch.testing.assert_close(y, x + 1.0, rtol=0, atol=0)

    x = torch.randn(32, 64, device="cuda")
    y = torch.full_like(x, float("nan"))
    g.elementwise_2d_kernel[(1,)](x, y, M=32, N=64, num_warps=4)
    torch.testing.assert_close(y, x + 1.0, rtol=0, atol=0)


@requires_gpu
def test_gpu_struct_result(torch):
    a = torch.randint(-1000, 1000, (128,), device="cuda", dtype=torch.int32)
    b = torch.randint(1, 50, (128,), device="cuda", dtype=torch.int32)
    b[::2] *= -1
    quot, rem = torch.empty_like(a), torch.empty_like(a)
    g.divmod_kernel[(1,)](a, b, quot, rem, BLOCK=128, num_warps=4)
    torch.testing.assert_close(quot, torch.div(a, b, rounding_mode="trunc"), rtol=0, atol=0)  # C truncates
    torch.testing.assert_close(rem, torch.fmod(a, b), rtol=0, atol=0)


@requires_gpu
def test_gpu_scalar_and_pointer_calls(torch):
    x = torch.randn(64, device="cuda")
    y = torch.full_like(x, float("nan"))
    g.scalar_kernel[(64,)](x, y, num_warps=4)
    torch.testing.assert_close(y, x + 1.0, rtol=0, atol=0)

    n, blocks = 128, 16
    data = torch.randint(-1000, 1000, (blocks, n), device="cuda", dtype=torch.int32)
    expected = torch.roll(data, shifts=-1, dims=1) * 2
    g.rotate_kernel[(blocks,)](data, N=n, num_warps=4)
    torch.testing.assert_close(data, expected, rtol=0, atol=0)


@requires_gpu
@requires_shared_address
def test_gpu_raw_function_fills_gluon_shared_memory(torch):
    n = 256
    y = torch.full((n,), float("nan"), device="cuda")
    g.shared_fill_kernel[(1,)](y, 0.5, N=n, num_warps=4)
    torch.testing.assert_close(y, torch.arange(n, device="cuda", dtype=torch.float32) * 0.5, rtol=0, atol=0)


@requires_gpu
@requires_shared_address
def test_gpu_raw_function_sums_gluon_shared_memory(torch):
    n = 128
    x = torch.randint(-8, 8, (n,), device="cuda").to(torch.float32)  # integers: any summation order is exact
    out = torch.full((1,), float("nan"), device="cuda")
    g.shared_sum_kernel[(1,)](x, out, N=n, num_warps=4)
    torch.testing.assert_close(out, x.sum().reshape(1), rtol=0, atol=0)
