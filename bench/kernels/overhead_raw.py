"""The kernels of bench.compile_overhead that call raw functions: the baseline kernel plus one raw
elementwise function (``raw_kernel``), and plus a raw function using NVSHMEM (``nvshmem_kernel``)."""

import triton
import triton.language as tl

from triton_raw_ext import dialect

RAW_SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
NVSHMEM_SIGNATURE = RAW_SIGNATURE | {"dst": "*i32", "pe": "i32"}
CONSTEXPRS = {"BLOCK": 1024}


@dialect(name="cuda", file="add_one.cu")
def bench_add_one(x): ...


@dialect(name="cuda", file="put_value.cu", library="nvshmem")
def bench_put_value(dst, value, pe): ...


@triton.jit
def raw_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, bench_add_one(x * 2.0), mask=mask)


@triton.jit
def nvshmem_kernel(x_ptr, y_ptr, n, dst, pe, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, bench_add_one(x * 2.0), mask=mask)
    bench_put_value(dst, tl.program_id(0), pe)
