"""One raw function compiled with each debug-info flag a user may give, and a kernel calling each."""

import triton
import triton.language as tl

from triton_raw_ext import dialect

SIGNATURE = {"x_ptr": "*fp32", "BLOCK": "constexpr"}


@dialect(name="cuda", file="lines-device.cu", extern_func_name="scale_add")
def scale_add_default(x, a): ...


@dialect(name="cuda", file="lines-device.cu", extern_func_name="scale_add", clang_flags=["-g"])
def scale_add_g(x, a): ...


@dialect(name="cuda", file="lines-device.cu", extern_func_name="scale_add", clang_flags=["-gline-tables-only"])
def scale_add_line_tables(x, a): ...


@dialect(name="cuda", file="lines-device.cu", extern_func_name="scale_add", clang_flags=["-lineinfo"])
def scale_add_lineinfo(x, a): ...


@triton.jit
def default_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, scale_add_default(tl.load(x_ptr + offs), 3.0))


@triton.jit
def g_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, scale_add_g(tl.load(x_ptr + offs), 3.0))


@triton.jit
def line_tables_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, scale_add_line_tables(tl.load(x_ptr + offs), 3.0))


@triton.jit
def lineinfo_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, scale_add_lineinfo(tl.load(x_ptr + offs), 3.0))


KERNELS = {"(default)": default_kernel, "-g": g_kernel, "-gline-tables-only": line_tables_kernel,
           "-lineinfo": lineinfo_kernel}
