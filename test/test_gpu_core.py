"""Raw functions running on a GPU: results checked against torch (skipped without a GPU)."""

from __future__ import annotations

import pytest
from conftest import requires_gpu, requires_nvshmem

pytestmark = requires_gpu


@pytest.fixture(scope="module")
def torch():
    import torch

    return torch


def test_elementwise_matches_torch(torch):
    from examples.kernels.raw_kernels import elementwise_direct_kernel, elementwise_kernel

    n = 1_000_003  # not a multiple of BLOCK: the mask matters
    x = torch.randn(n, device="cuda")
    for kernel in (elementwise_kernel, elementwise_direct_kernel):
        y = torch.full_like(x, float("nan"))
        kernel[(triton_cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        torch.testing.assert_close(y, x + 1.0, rtol=0, atol=0)


def test_pointer_function_rotates_each_block(torch):
    from examples.kernels.raw_kernels import rotate_kernel

    n, blocks = 128, 64
    data = torch.randint(-1000, 1000, (blocks, n), device="cuda", dtype=torch.int32)
    expected = torch.roll(data, shifts=-1, dims=1) * 2
    rotate_kernel[(blocks,)](data, N=n, num_warps=4)
    torch.testing.assert_close(data, expected, rtol=0, atol=0)


def test_two_sources_with_the_same_helper(torch):
    from examples.kernels.raw_kernels import two_sources_kernel

    x = torch.randint(-1000, 1000, (128,), device="cuda", dtype=torch.int32)
    y = torch.empty_like(x)
    two_sources_kernel[(1,)](x, y, BLOCK=128)
    torch.testing.assert_close(y, (x + 100) + (x * 3), rtol=0, atol=0)


def test_all_abi_types(torch):
    from examples.kernels.raw_kernels import types_kernel

    n = 128
    f64 = torch.randn(n, device="cuda", dtype=torch.float64)
    i64 = torch.randint(-(2**40), 2**40, (n,), device="cuda", dtype=torch.int64)
    f16 = torch.randn(n, device="cuda", dtype=torch.float16)
    bf16 = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    i32 = torch.randint(-1000, 1000, (n,), device="cuda", dtype=torch.int32)
    out = torch.empty_like(i32)
    expect = (f64 * 0.5, i64 * 2, f16 + f16, bf16 + bf16, i32.clone())
    types_kernel[(1,)](f64, i64, f16, bf16, i32, out, BLOCK=n)
    for got, want in zip((f64, i64, f16, bf16, out), expect, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@requires_nvshmem
def test_nvshmem_ring_at_world_size_one(torch):
    """A single PE is its own ring neighbour: every NVSHMEM call of shmem-device.cu runs."""
    from examples.kernels.raw_kernels import ring_kernel
    from triton_raw_ext import runtime

    runtime.init()
    block = 128
    buf = runtime.zeros((2 * block,), torch.int32)
    slot = runtime.zeros((1,), torch.int32)
    sig = runtime.zeros((1,), torch.int64)
    out = torch.full((block + 1,), -1, device="cuda", dtype=torch.int32)
    buf[:block] = torch.arange(block, device="cuda", dtype=torch.int32) + 7000
    slot.fill_(-5)
    runtime.barrier_all()
    for step in (1, 2, 3):
        ring_kernel[(1,)](buf, slot, sig, out, step, BLOCK=block)
        torch.cuda.synchronize()
        assert out[:block].tolist() == (torch.arange(block) + 7000).tolist()
        assert out[block].item() == 1  # the PE itself is load/store reachable
        assert slot.item() == 0 and sig.item() == step


@requires_nvshmem
def test_nvshmem_put_get_at_world_size_one(torch):
    """Device-side block put and get with itself: the put lands in the second half, the get reads the first."""
    from examples.kernels.raw_kernels import put_get_kernel
    from triton_raw_ext import runtime

    runtime.init()
    block = 256
    buf = runtime.zeros((2 * block,), torch.int32)
    buf[:block] = torch.arange(block, device="cuda", dtype=torch.int32) + 300
    got = torch.full((block,), -1, device="cuda", dtype=torch.int32)
    runtime.barrier_all()
    put_get_kernel[(1,)](buf, got, BLOCK=block)
    torch.cuda.synchronize()
    assert buf[block:].tolist() == buf[:block].tolist() == got.tolist()


@requires_nvshmem
def test_nvshmem_headers_ring_at_world_size_one(torch):
    """The ring of nvshmem-headers-device.cu, which includes <nvshmem.h> and <nvshmemx.h>, with itself."""
    from kernels.nvshmem_header_kernels import header_ring_kernel

    from triton_raw_ext import runtime

    runtime.init()
    block = 128
    buf = runtime.zeros((2 * block,), torch.int32)
    slot = runtime.zeros((1,), torch.int32)
    sig = runtime.zeros((1,), torch.int64)
    out = torch.full((block + 2,), -1, device="cuda", dtype=torch.int32)
    buf[:block] = torch.arange(block, device="cuda", dtype=torch.int32) + 5000
    slot.fill_(-5)
    runtime.barrier_all()
    for step in (1, 2, 3):
        header_ring_kernel[(1,)](buf, slot, sig, out, step, BLOCK=block)
        torch.cuda.synchronize()
        assert out[:block].tolist() == (torch.arange(block) + 5000).tolist()
        assert out[block:].tolist() == [5000, 0]  # buf[0] through nvshmem_ptr, then this PE's number
        assert slot.item() == 0 and sig.item() == step


def triton_cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def test_preload_loads_the_kernel_the_launch_then_uses(torch):
    from examples.kernels.raw_kernels import elementwise_kernel
    from triton_raw_ext import preload

    n = 4096
    kernel = preload(elementwise_kernel, torch.float32, torch.float32, n, grid=(4,), BLOCK=1024)
    assert kernel.module is not None  # loaded before any launch
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    launched = elementwise_kernel[(4,)](x, y, n, BLOCK=1024)
    assert launched is kernel  # same specialisation: Triton's cache hands back the preloaded kernel
    torch.testing.assert_close(y, x + 1.0, rtol=0, atol=0)


@requires_nvshmem
def test_stream_barrier_under_graph_capture_raises(torch):
    """NVSHMEM's stream barrier cannot be captured (it would end the process): capturing one raises a
    Python error that names it, the capture is abandoned, and the process goes on."""
    from triton_raw_ext import runtime
    from triton_raw_ext.errors import RawRuntimeError

    runtime.init()
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with pytest.raises(RawRuntimeError, match=r"runtime.barrier_all\(\).*capturing a CUDA graph"):
        with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
            runtime.barrier_all()
    with pytest.raises(RawRuntimeError, match=r"runtime.quiet\(\).*capturing"):
        with torch.cuda.graph(torch.cuda.CUDAGraph(), stream=stream):
            runtime.quiet(stream)
    runtime.barrier_all()  # outside capture: still works
    torch.cuda.synchronize()
