"""A raw function that calls a user device library given with ``libs=`` (built by the test first)."""

import triton
import triton.language as tl

from triton_raw_ext import dialect


@dialect(name="cuda", file="uses-lib-device.cu", libs=["scale-lib.bc"])
def scaled_soft_exp(x): ...


SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}


@triton.jit
def userlib_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, scaled_soft_exp(tl.load(x_ptr + offs, mask=mask)), mask=mask)
