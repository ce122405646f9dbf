"""Kernels calling the C++ functions of cxx-device.cu (AOT on CPU, and run on a GPU)."""

import triton
import triton.language as tl

import triton_raw_ext.language as raw
from triton_raw_ext import dialect

CXX = "cxx-device.cu"


@dialect(name="cuda", file=CXX)
def axpy(a, x, y): ...


@dialect(name="cuda", file=CXX, extern_func_name="square(float)")
def square_f32(x): ...


@dialect(name="cuda", file=CXX, extern_func_name="lerp<float>")
def lerp_f32(a, b, t): ...


@dialect(name="cuda", file=CXX, extern_func_name="_Z4lerpIdET_S0_S0_S0_")
def lerp_f64(a, b, t): ...


@dialect(name="cuda", file=CXX)
def row_start(base, row, stride): ...


@dialect(name="cuda", file=CXX)
def element(base, i): ...


@dialect(name="cuda", file=CXX)
def divmod(a, b): ...


@dialect(name="cuda", file=CXX)
def split_sign(x): ...


@dialect(name="cuda", file=CXX)
def moments(a, b): ...


@dialect(name="cuda", file=CXX)
def sum_diff(a, b): ...


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    """out = a * x + y through a C++ function bound by its plain name."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, axpy(a, x, y), mask=mask)


@triton.jit
def square_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out = x * x through the float overload of square, picked by its signature."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, raw.call(square_f32, [tl.load(x_ptr + offs, mask=mask)]), mask=mask)


@triton.jit
def lerp_kernel(a32_ptr, b32_ptr, out32_ptr, a64_ptr, b64_ptr, out64_ptr, t, n, BLOCK: tl.constexpr):
    """lerp<float> (bound by instantiation name) and lerp<double> (bound by mangled name)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a32, b32 = tl.load(a32_ptr + offs, mask=mask), tl.load(b32_ptr + offs, mask=mask)
    tl.store(out32_ptr + offs, lerp_f32(a32, b32, t), mask=mask)
    a64, b64 = tl.load(a64_ptr + offs, mask=mask), tl.load(b64_ptr + offs, mask=mask)
    tl.store(out64_ptr + offs, lerp_f64(a64, b64, t.to(tl.float64)), mask=mask)


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, stride, BLOCK: tl.constexpr):
    """out[row] = sum(x[row, :BLOCK]), loading through the const float * that row_start returns."""
    row = tl.program_id(0)
    start = row_start(x_ptr, row, stride)  # every thread runs it once
    tl.static_assert(start.dtype == tl.pointer_type(tl.float32))
    tl.store(out_ptr + row, tl.sum(tl.load(start + tl.arange(0, BLOCK)), axis=0))


@triton.jit
def gather_kernel(x_ptr, idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out = x[idx], loading through the int * that element returns for each index."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    pointers = element(x_ptr, tl.load(idx_ptr + offs, mask=mask))
    tl.static_assert(pointers.dtype == tl.pointer_type(tl.int32))
    tl.store(out_ptr + offs, tl.load(pointers, mask=mask), mask=mask)


@triton.jit
def divmod_kernel(a_ptr, b_ptr, quot_ptr, rem_ptr, n, BLOCK: tl.constexpr):
    """A struct of two ints unpacked as a tuple."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    quot, rem = divmod(tl.load(a_ptr + offs, mask=mask), tl.load(b_ptr + offs, mask=mask, other=1))
    tl.static_assert(quot.dtype == tl.int32 and rem.dtype == tl.int32)
    tl.store(quot_ptr + offs, quot, mask=mask)
    tl.store(rem_ptr + offs, rem, mask=mask)


@triton.jit
def split_kernel(x_ptr, mag_ptr, neg_ptr, n, BLOCK: tl.constexpr):
    """A struct of a float and an int, read by index."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    parts = raw.call(split_sign, [tl.load(x_ptr + offs, mask=mask)])
    tl.static_assert(len(parts) == 2 and parts[0].dtype == tl.float32 and parts[1].dtype == tl.int32)
    tl.store(mag_ptr + offs, parts[0], mask=mask)
    tl.store(neg_ptr + offs, parts[1], mask=mask)


@triton.jit
def moments_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """A struct of three floats (two 64-bit words): out[0, 1, 2 rows] = sum, diff, prod."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    s, d, p = moments(tl.load(a_ptr + offs, mask=mask), tl.load(b_ptr + offs, mask=mask))
    tl.static_assert(s.dtype == tl.float32 and d.dtype == tl.float32 and p.dtype == tl.float32)
    tl.store(out_ptr + offs, s, mask=mask)
    tl.store(out_ptr + n + offs, d, mask=mask)
    tl.store(out_ptr + 2 * n + offs, p, mask=mask)


@triton.jit
def half2_kernel(a_ptr, b_ptr, sum_ptr, diff_ptr, n, BLOCK: tl.constexpr):
    """__half2 as a tuple of two fp16 tensors."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    total, diff = sum_diff(tl.load(a_ptr + offs, mask=mask), tl.load(b_ptr + offs, mask=mask))
    tl.static_assert(total.dtype == tl.float16 and diff.dtype == tl.float16)
    tl.store(sum_ptr + offs, total, mask=mask)
    tl.store(diff_ptr + offs, diff, mask=mask)


@dialect(name="cuda", file=CXX)
def advance(p, nbytes): ...


@triton.jit
def advance_kernel(x_ptr, out_ptr, nbytes):
    """out[0] = the address advance returns (void *: an int64)."""
    address = advance(x_ptr, nbytes)
    tl.static_assert(address.dtype == tl.int64)
    tl.store(out_ptr, address)
