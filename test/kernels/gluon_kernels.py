"""Gluon kernels calling raw functions (AOT on CPU, and run on a GPU).

The shared-memory kernels need Triton >= 3.9 (``gl.inline_asm`` reads a descriptor's address).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import triton_raw_ext.language as raw
from examples.kernels.raw_kernels import add_one, block_sum, fill_iota, rotate_block

from .cxx_kernels import divmod


@gluon.jit
def elementwise_kernel(x_ptr, y_ptr, n, BLOCK: gl.constexpr):
    """y = add_one(x) on a tensor in an explicit blocked layout (raw.call form)."""
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [gl.num_warps()], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    mask = offs < n
    x = gl.load(x_ptr + offs, mask=mask)
    gl.store(y_ptr + offs, raw.call(add_one, [x]), mask=mask)


@gluon.jit
def elementwise_2d_kernel(x_ptr, y_ptr, M: gl.constexpr, N: gl.constexpr):
    """y = add_one(x) over an M x N row-major tile in a 2-D blocked layout (direct form)."""
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [gl.num_warps(), 1], [1, 0])
    rows = gl.arange(0, M, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, N, layout=gl.SliceLayout(0, layout))
    offs = gl.expand_dims(rows, 1) * N + gl.expand_dims(cols, 0)
    gl.store(y_ptr + offs, add_one(gl.load(x_ptr + offs)))


@gluon.jit
def divmod_kernel(a_ptr, b_ptr, quot_ptr, rem_ptr, BLOCK: gl.constexpr):
    """A struct result (two ints) unpacked into two tensors that keep the layout."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    offs = gl.arange(0, BLOCK, layout=layout)
    quot, rem = divmod(gl.load(a_ptr + offs), gl.load(b_ptr + offs))
    gl.store(quot_ptr + offs, quot)
    gl.store(rem_ptr + offs, rem)


@gluon.jit
def scalar_kernel(x_ptr, y_ptr):
    """A scalar call: every thread runs add_one once on the same value."""
    gl.store(y_ptr + gl.program_id(0), add_one(gl.load(x_ptr + gl.program_id(0))))


@gluon.jit
def rotate_kernel(data_ptr, N: gl.constexpr):
    """A pointer call: each program rotates its block of N ints in the raw function's __shared__ tile."""
    rotate_block(data_ptr + gl.program_id(0) * N, N)


@gluon.jit
def shared_fill_kernel(y_ptr, scale, N: gl.constexpr):
    """y[i] = i * scale, written by the raw function into shared memory this kernel allocated."""
    smem = gl.allocate_shared_memory(gl.float32, [N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    fill_iota(smem, N, scale)  # an address_space(3) pointer parameter
    gl.barrier()  # the raw function's writes before the loads below
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    gl.store(y_ptr + gl.arange(0, N, layout=layout), smem.load(layout))


@gluon.jit
def shared_sum_kernel(x_ptr, out_ptr, N: gl.constexpr):
    """out[0] = sum(x), x staged by Gluon into the second of two shared buffers, summed by the raw function."""
    smem = gl.allocate_shared_memory(gl.float32, [2, N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    smem.index(1).store(gl.load(x_ptr + gl.arange(0, N, layout=layout)))
    gl.barrier()  # every thread's store before the raw function reads them all
    gl.store(out_ptr, block_sum(smem.index(1), N))  # a generic pointer parameter
