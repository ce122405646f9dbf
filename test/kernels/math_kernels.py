"""Kernels calling raw functions that use CUDA math (libdevice) beside Triton's own tl.math versions."""

import triton
import triton.language as tl
from triton.language.extra import libdevice

from triton_raw_ext import dialect

MATH = "math-device.cu"


@dialect(name="cuda", file=MATH)
def clamp_int(x, lo, hi): ...


@dialect(name="cuda", file=MATH)
def min_u32(a, b): ...


@dialect(name="cuda", file=MATH)
def abs_int(x): ...


@dialect(name="cuda", file=MATH)
def exp_f32(x): ...


@dialect(name="cuda", file=MATH)
def fast_exp_f32(x): ...


@dialect(name="cuda", file=MATH)
def log_f32(x): ...


@dialect(name="cuda", file=MATH)
def sqrt_f32(x): ...


@dialect(name="cuda", file=MATH)
def sqrt_rn_f32(x): ...


@dialect(name="cuda", file=MATH)
def rsqrt_f32(x): ...


@dialect(name="cuda", file=MATH)
def fast_div_f32(x, y): ...


@dialect(name="cuda", file=MATH)
def fma_f32(x, y, z): ...


@dialect(name="cuda", file=MATH)
def popc_u32(x): ...


@dialect(name="cuda", file=MATH)
def clz_i32(x): ...


@dialect(name="cuda", file=MATH)
def softplus_clamped(x): ...


FLOAT_SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "raw_ptr": "*fp32", "ref_ptr": "*fp32", "n": "i32",
                   "BLOCK": "constexpr"}
INT_SIGNATURE = {"i_ptr": "*i32", "raw_ptr": "*i32", "ref_ptr": "*i32", "n": "i32", "BLOCK": "constexpr"}
# The rows of each kernel's outputs, in order:
FLOAT_NAMES = ("expf", "__expf", "logf", "sqrtf", "rsqrtf", "__fdividef", "fmaf", "softplus", "__fsqrt_rn")
INT_NAMES = ("min/max", "min unsigned", "abs", "__popc", "__clz")


@triton.jit
def float_math_kernel(x_ptr, y_ptr, raw_ptr, ref_ptr, n, BLOCK: tl.constexpr):
    """Row k of ``raw`` holds the raw function's result, row k of ``ref`` Triton's (see FLOAT_NAMES)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    y = tl.load(y_ptr + offs, mask=mask, other=1.0)
    ax = tl.abs(x) + 0.5
    tl.store(raw_ptr + 0 * n + offs, exp_f32(x), mask=mask)
    tl.store(ref_ptr + 0 * n + offs, libdevice.exp(x), mask=mask)
    tl.store(raw_ptr + 1 * n + offs, fast_exp_f32(x), mask=mask)
    tl.store(ref_ptr + 1 * n + offs, tl.exp(x), mask=mask)
    tl.store(raw_ptr + 2 * n + offs, log_f32(ax), mask=mask)
    tl.store(ref_ptr + 2 * n + offs, libdevice.log(ax), mask=mask)
    tl.store(raw_ptr + 3 * n + offs, sqrt_f32(ax), mask=mask)
    tl.store(ref_ptr + 3 * n + offs, libdevice.sqrt(ax), mask=mask)
    tl.store(raw_ptr + 4 * n + offs, rsqrt_f32(ax), mask=mask)
    tl.store(ref_ptr + 4 * n + offs, libdevice.rsqrt(ax), mask=mask)
    tl.store(raw_ptr + 5 * n + offs, fast_div_f32(x, y), mask=mask)
    tl.store(ref_ptr + 5 * n + offs, libdevice.fast_dividef(x, y), mask=mask)
    tl.store(raw_ptr + 6 * n + offs, fma_f32(x, y, ax), mask=mask)
    tl.store(ref_ptr + 6 * n + offs, tl.fma(x, y, ax), mask=mask)
    tl.store(raw_ptr + 7 * n + offs, softplus_clamped(x), mask=mask)
    tl.store(ref_ptr + 7 * n + offs, tl.minimum(libdevice.log(1.0 + libdevice.exp(x)), 20.0), mask=mask)
    tl.store(raw_ptr + 8 * n + offs, sqrt_rn_f32(ax), mask=mask)
    tl.store(ref_ptr + 8 * n + offs, tl.sqrt_rn(ax), mask=mask)


@triton.jit
def int_math_kernel(i_ptr, raw_ptr, ref_ptr, n, BLOCK: tl.constexpr):
    """Row k of ``raw`` holds the raw function's result, row k of ``ref`` Triton's (see INT_NAMES)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    i = tl.load(i_ptr + offs, mask=mask, other=0)
    u = i.to(tl.uint32, bitcast=True)
    bound = tl.full([BLOCK], 3_000_000_000, tl.uint32)
    tl.store(raw_ptr + 0 * n + offs, clamp_int(i, -1000, 1000), mask=mask)
    tl.store(ref_ptr + 0 * n + offs, tl.maximum(-1000, tl.minimum(i, 1000)), mask=mask)
    tl.store(raw_ptr + 1 * n + offs, min_u32(u, bound).to(tl.int32, bitcast=True), mask=mask)
    tl.store(ref_ptr + 1 * n + offs, tl.minimum(u, bound).to(tl.int32, bitcast=True), mask=mask)
    tl.store(raw_ptr + 2 * n + offs, abs_int(i), mask=mask)
    tl.store(ref_ptr + 2 * n + offs, tl.abs(i), mask=mask)
    tl.store(raw_ptr + 3 * n + offs, popc_u32(u), mask=mask)
    tl.store(ref_ptr + 3 * n + offs, libdevice.popc(i), mask=mask)
    tl.store(raw_ptr + 4 * n + offs, clz_i32(i), mask=mask)
    tl.store(ref_ptr + 4 * n + offs, libdevice.clz(i), mask=mask)
