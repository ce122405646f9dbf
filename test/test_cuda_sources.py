"""CUDA C++ sources as written: C++ names, overloads, templates, pointer and struct results.

The AOT tests compile for sm_90 on CPU; the GPU tests run the same kernels and compare with torch.
"""

from __future__ import annotations

import re

import pytest
import triton
import triton.language as tl
from conftest import KERNELS, aot, aot_error, requires_gpu
from kernels import cxx_kernels as k

from triton_raw_ext import cxx_names, dialect
from triton_raw_ext.cu_compiler import DEBUG_FLAGS, CompileSpec, compile_to_module
from triton_raw_ext.cxx_names import candidates, demangle
from triton_raw_ext.debug_types import pointee_types

BLOCK = 128
CXX = KERNELS / "cxx-device.cu"
RAW_CALL = re.compile(r"\bcall\b[^@\n]*@rawext_\w+")
SIGNATURES = {
    "axpy_kernel": {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "a": "fp32", "n": "i32"},
    "square_kernel": {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
    "lerp_kernel": {"a32_ptr": "*fp32", "b32_ptr": "*fp32", "out32_ptr": "*fp32", "a64_ptr": "*fp64",
                    "b64_ptr": "*fp64", "out64_ptr": "*fp64", "t": "fp32", "n": "i32"},
    "row_sum_kernel": {"x_ptr": "*fp32", "out_ptr": "*fp32", "stride": "i32"},
    "gather_kernel": {"x_ptr": "*i32", "idx_ptr": "*i32", "out_ptr": "*i32", "n": "i32"},
    "divmod_kernel": {"a_ptr": "*i32", "b_ptr": "*i32", "quot_ptr": "*i32", "rem_ptr": "*i32", "n": "i32"},
    "split_kernel": {"x_ptr": "*fp32", "mag_ptr": "*fp32", "neg_ptr": "*i32", "n": "i32"},
    "moments_kernel": {"a_ptr": "*fp32", "b_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
    "half2_kernel": {"a_ptr": "*fp16", "b_ptr": "*fp16", "sum_ptr": "*fp16", "diff_ptr": "*fp16", "n": "i32"},
}  # fmt: skip


def _compile(kernel, **options):
    """AOT-compile one of cxx_kernels' kernels with BLOCK=128; check that the raw code was inlined."""
    c = aot(kernel, {**SIGNATURES[kernel.__name__], "BLOCK": "constexpr"}, {"BLOCK": BLOCK}, **options)
    assert not RAW_CALL.search(c.asm["llir"]), "a raw function survived Triton's inliner"
    assert c.asm["cubin"][:4] == b"\x7fELF"
    return c


def _compile_error(kernel) -> str:
    """The error compiling ``kernel(x_ptr: *fp32, out_ptr: *fp32, n, BLOCK)`` must raise."""
    return aot_error(kernel, {**SIGNATURES["square_kernel"], "BLOCK": "constexpr"}, {"BLOCK": BLOCK})


def _count(pattern: str, text: str) -> int:
    return len(re.findall(pattern, text))


# --- names ------------------------------------------------------------------------------------


def test_demangled_names_and_rules():
    symbols = ["_Z4axpyfff", "_Z6squaref", "_Z6squared", "_Z4lerpIfET_S0_S0_S0_", "_Z4lerpIdET_S0_S0_S0_", "add_one"]
    assert demangle("_Z4lerpIfET_S0_S0_S0_") == "float lerp<float>(float, float, float)"
    assert demangle("add_one") is None
    assert candidates("axpy", symbols) == ["_Z4axpyfff"]
    assert candidates("add_one", symbols) == ["add_one"]
    assert candidates("square", symbols) == ["_Z6squaref", "_Z6squared"]
    assert candidates("square( double )", symbols) == ["_Z6squared"]
    assert candidates("lerp<double>", symbols) == ["_Z4lerpIdET_S0_S0_S0_"]
    assert candidates("float lerp<float>(float,float,float)", symbols) == ["_Z4lerpIfET_S0_S0_S0_"]
    assert candidates("lerp", symbols) == ["_Z4lerpIfET_S0_S0_S0_", "_Z4lerpIdET_S0_S0_S0_"]
    assert candidates("lerp<int>", symbols) == []


def test_cxx_function_bound_by_name():
    c = _compile(k.axpy_kernel)
    assert "fma.rn.f32" in c.asm["ptx"]


def test_overloaded_name_lists_the_overloads():
    @dialect(name="cuda", file="kernels/cxx-device.cu")
    def square(x): ...

    @triton.jit
    def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, square(tl.load(x_ptr + offs)))

    text = _compile_error(kernel)
    assert "'square' names 2 functions in" in text and "cxx-device.cu" in text
    assert "square(float) [_Z6squaref]" in text and "square(double) [_Z6squared]" in text
    assert "Pick one with extern_func_name= set to its mangled name (in brackets) or its signature" in text


def test_overload_picked_by_signature():
    c = _compile(k.square_kernel)
    assert "mul.f32" in c.asm["ptx"] and "f64" not in c.asm["ptx"]


def test_template_bound_by_instantiation_name_and_by_mangled_name():
    c = _compile(k.lerp_kernel)
    ptx = c.asm["ptx"]
    assert re.search(r"\bfma\.rn\.f32|\bmul\.f32", ptx) and re.search(r"\bfma\.rn\.f64|\bmul\.f64", ptx)


def test_template_name_alone_lists_its_instances():
    @dialect(name="cuda", file="kernels/cxx-device.cu")
    def lerp(a, b, t): ...

    @triton.jit
    def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        tl.store(out_ptr + offs, lerp(x, x, x))

    text = _compile_error(kernel)
    assert "float lerp<float>(float, float, float) [_Z4lerpIfET_S0_S0_S0_]" in text
    assert "double lerp<double>(double, double, double) [_Z4lerpIdET_S0_S0_S0_]" in text


@pytest.mark.parametrize("name", ["twice", "thrice", "halve"])
def test_file_local_helpers_are_not_exported(name):
    @dialect(name="cuda", file="kernels/cxx-device.cu", extern_func_name=name)
    def helper(x): ...

    @triton.jit
    def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, helper(tl.load(x_ptr + offs)))

    text = _compile_error(kernel)
    assert f"function {name!r} not found in" in text and "axpy(float, float, float) [_Z4axpyfff]" in text
    assert "(not static, not inline, not in an anonymous namespace)" in text


def test_without_a_demangler_cxx_functions_bind_by_mangled_name(monkeypatch):
    monkeypatch.setattr(cxx_names, "_cxa_demangle", lambda: None)
    cxx_names.demangle.cache_clear()
    try:
        assert candidates("_Z4axpyfff", ["_Z4axpyfff"]) == ["_Z4axpyfff"] and candidates("axpy", ["_Z4axpyfff"]) == []

        @dialect(name="cuda", file="kernels/cxx-device.cu")
        def axpy(a, x, y): ...

        @triton.jit
        def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs)
            tl.store(out_ptr + offs, axpy(x, x, x))

        text = _compile_error(kernel)
        assert "function 'axpy' not found" in text and "_Z4axpyfff" in text
        assert "by its mangled name (no C++ runtime with __cxa_demangle could be loaded" in text
    finally:
        cxx_names.demangle.cache_clear()


# --- results ----------------------------------------------------------------------------------


def test_pointee_types_come_from_the_declarations():
    text = str(compile_to_module(CompileSpec(CXX), 90, extra=DEBUG_FLAGS))
    found = pointee_types(text, ["_Z9row_startPKfii", "_Z7elementPii", "_Z7advancePvx"])
    assert found == {"_Z9row_startPKfii": "float32", "_Z7elementPii": "int32"}


def test_pointer_result_is_a_triton_pointer():
    row = _compile(k.row_sum_kernel)
    assert re.search(r"tt\.int_to_ptr %\S+ : i64 -> !tt\.ptr<f32>", row.asm["ttir"])
    gather = _compile(k.gather_kernel)
    assert re.search(r"tt\.int_to_ptr %\S+ : tensor<128xi64> -> tensor<128x!tt\.ptr<i32>>", gather.asm["ttir"])


def test_pointer_to_void_is_an_int64_address():
    c = aot(k.advance_kernel, {"x_ptr": "*fp32", "out_ptr": "*i64", "nbytes": "i64"})
    assert "tt.int_to_ptr" not in c.asm["ttir"] and c.asm["cubin"][:4] == b"\x7fELF"


def test_struct_result_unpacks_as_a_tuple():
    divmod_ = _compile(k.divmod_kernel, num_warps=4)  # one element per thread
    llir = divmod_.asm["llir"]
    assert _count(r"= sdiv i32", llir) == 1, "divmod must run once per element"
    split = _compile(k.split_kernel, num_warps=4)
    assert "shl i64" not in split.asm["llir"], "the packing into a word should fold away"


def test_struct_of_two_words_runs_the_function_once():
    """moments() fills two words (two wrapper calls); Triton's optimizer merges the two copies."""
    ptx = _compile(k.moments_kernel, num_warps=4).asm["ptx"]
    assert _count(r"\badd\.f32", ptx) == _count(r"\bsub\.f32", ptx) == _count(r"\bmul\.f32", ptx) == 1


def test_half2_result_is_two_fp16():
    c = _compile(k.half2_kernel, num_warps=4)  # the kernel asserts that both fields are fp16
    assert _count(r"\badd\.f16", c.asm["ptx"]) == _count(r"\bsub\.f16", c.asm["ptx"]) == 1


# --- on a GPU ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch():
    import torch

    return torch


@requires_gpu
def test_gpu_axpy_and_square(torch):
    n = 1000  # not a multiple of BLOCK: the mask matters
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.full_like(x, float("nan"))
    k.axpy_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, 1.5, n, BLOCK=BLOCK)
    torch.testing.assert_close(out, 1.5 * x + y)
    k.square_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)
    torch.testing.assert_close(out, x * x)


@requires_gpu
def test_gpu_lerp_instances(torch):
    n, t = 1000, 0.25
    a32, b32 = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    a64, b64 = a32.double(), b32.double()
    out32, out64 = torch.empty_like(a32), torch.empty_like(a64)
    k.lerp_kernel[(triton.cdiv(n, BLOCK),)](a32, b32, out32, a64, b64, out64, t, n, BLOCK=BLOCK)
    torch.testing.assert_close(out32, a32 + t * (b32 - a32))
    torch.testing.assert_close(out64, a64 + t * (b64 - a64))


@requires_gpu
def test_gpu_pointer_results(torch):
    rows, stride = 16, 3 * BLOCK
    x = torch.randn(rows, stride, device="cuda")
    sums = torch.empty(rows, device="cuda")
    k.row_sum_kernel[(rows,)](x, sums, stride, BLOCK=BLOCK)
    torch.testing.assert_close(sums, x[:, :BLOCK].sum(dim=1))

    n = 1000
    values = torch.randint(-1000, 1000, (4096,), device="cuda", dtype=torch.int32)
    idx = torch.randint(0, values.numel(), (n,), device="cuda", dtype=torch.int32)
    out = torch.empty(n, device="cuda", dtype=torch.int32)
    k.gather_kernel[(triton.cdiv(n, BLOCK),)](values, idx, out, n, BLOCK=BLOCK)
    torch.testing.assert_close(out, values[idx.long()], rtol=0, atol=0)

    address = torch.zeros(1, device="cuda", dtype=torch.int64)
    k.advance_kernel[(1,)](x, address, 40)
    assert address.item() == x.data_ptr() + 40


@requires_gpu
def test_gpu_struct_results(torch):
    n = 1000
    a = torch.randint(-10_000, 10_000, (n,), device="cuda", dtype=torch.int32)
    sign = 1 - 2 * (torch.arange(n, device="cuda", dtype=torch.int32) % 2)
    b = torch.randint(1, 100, (n,), device="cuda", dtype=torch.int32) * sign
    quot, rem = torch.empty_like(a), torch.empty_like(a)
    k.divmod_kernel[(triton.cdiv(n, BLOCK),)](a, b, quot, rem, n, BLOCK=BLOCK)
    torch.testing.assert_close(quot, torch.div(a, b, rounding_mode="trunc"), rtol=0, atol=0)  # C truncates
    torch.testing.assert_close(rem, torch.fmod(a, b), rtol=0, atol=0)

    x = torch.randn(n, device="cuda")
    mag, neg = torch.empty_like(x), torch.empty(n, device="cuda", dtype=torch.int32)
    k.split_kernel[(triton.cdiv(n, BLOCK),)](x, mag, neg, n, BLOCK=BLOCK)
    torch.testing.assert_close(mag, x.abs(), rtol=0, atol=0)
    torch.testing.assert_close(neg, (x < 0).to(torch.int32), rtol=0, atol=0)

    p, q = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty(3 * n, device="cuda")
    k.moments_kernel[(triton.cdiv(n, BLOCK),)](p, q, out, n, BLOCK=BLOCK)
    torch.testing.assert_close(out, torch.cat([p + q, p - q, p * q]))


@requires_gpu
def test_gpu_half2(torch):
    n = 1000
    a, b = torch.randn(n, device="cuda", dtype=torch.float16), torch.randn(n, device="cuda", dtype=torch.float16)
    total, diff = torch.empty_like(a), torch.empty_like(a)
    k.half2_kernel[(triton.cdiv(n, BLOCK),)](a, b, total, diff, n, BLOCK=BLOCK)
    torch.testing.assert_close(total, a + b)
    torch.testing.assert_close(diff, a - b)
