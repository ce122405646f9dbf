"""Raw functions and Triton kernels shared by the benchmarks, the GPU scripts and the tests (AOT on CPU,
and run on a GPU)."""

import triton
import triton.language as tl

import triton_raw_ext.language as raw
from triton_raw_ext import dialect


@dialect(name="cuda", file="add-device.cu")
def add_one(x): ...


@dialect(name="cuda", file="shift-device.cu")
def rotate_block(data, n): ...


@dialect(name="cuda", file="dup/first-device.cu")
def first(x): ...


@dialect(name="cuda", file="dup/second-device.cu")
def second(x): ...


@dialect(name="cuda", file="types-device.cu")
def scale_f64(x, a): ...


@dialect(name="cuda", file="types-device.cu")
def add_i64(x, y): ...


@dialect(name="cuda", file="types-device.cu")
def twice_f16(x): ...


@dialect(name="cuda", file="types-device.cu")
def twice_bf16(x): ...


@dialect(name="cuda", file="types-device.cu")
def load_at(base, i): ...


@dialect(name="cuda", file="shared-device.cu")
def fill_iota(buf, n, scale): ...


@dialect(name="cuda", file="shared-device.cu")
def block_sum(buf, n): ...


SHMEM = "shmem-device.cu"


@dialect(name="cuda", file=SHMEM, library="nvshmem")
def my_pe(): ...


@dialect(name="cuda", file=SHMEM, library="nvshmem")
def n_pes(): ...


@dialect(name="cuda", file=SHMEM, library="nvshmem")
def put_int(dst, value, pe): ...


@dialect(name="cuda", file=SHMEM, library="nvshmem")
def peer_reachable(sym, pe): ...


@dialect(name="cuda", file=SHMEM, library="nvshmem")
def put_signal_block(dst, src, nbytes, sig, value, pe): ...


@dialect(name="cuda", file=SHMEM, library="nvshmem")
def put_block(dst, src, nbytes, pe): ...


@dialect(name="cuda", file=SHMEM, library="nvshmem")
def get_block(dst, src, nbytes, pe): ...


@dialect(name="cuda", file=SHMEM, library="nvshmem")
def wait_signal(sig, value): ...


@dialect(name="cuda", file=SHMEM, library="nvshmem")
def barrier_all(): ...


@triton.jit
def elementwise_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """y = add_one(x), elementwise through the raw function (raw.call form)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, raw.call(add_one, [x]), mask=mask)


@triton.jit
def elementwise_direct_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """y = add_one(x) with the direct-call form."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, add_one(x), mask=mask)


@triton.jit
def triton_add_one_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """The same operation in pure Triton (the bandwidth baseline)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


@triton.jit
def rotate_kernel(data_ptr, N: tl.constexpr):
    """Each program rotates its own block of N ints in shared memory (pointer function)."""
    raw.call(rotate_block, [data_ptr + tl.program_id(0) * N, N])


@triton.jit
def rotate_direct_kernel(data_ptr, N: tl.constexpr):
    """rotate_kernel with the direct-call form (the form torch.compile can re-emit, see docs/api.md)."""
    rotate_block(data_ptr + tl.program_id(0) * N, N)


@triton.jit
def two_sources_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    """Calls first() and second(), whose .cu files both define `helper`."""
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, first(x) + second(x))


@triton.jit
def types_kernel(f64_ptr, i64_ptr, f16_ptr, bf16_ptr, i32_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(f64_ptr + offs, scale_f64(tl.load(f64_ptr + offs), 0.5))
    tl.store(i64_ptr + offs, add_i64(tl.load(i64_ptr + offs), tl.load(i64_ptr + offs)))
    tl.store(f16_ptr + offs, twice_f16(tl.load(f16_ptr + offs)))
    tl.store(bf16_ptr + offs, twice_bf16(tl.load(bf16_ptr + offs)))
    tl.store(out_ptr + offs, load_at(i32_ptr, offs))


@triton.jit
def ring_kernel(buf, slot, sig, out, step, BLOCK: tl.constexpr):
    """One ring step over all PEs, using every NVSHMEM call of shmem-device.cu.

    ``buf`` is symmetric [2 * BLOCK] int32: the first half is what this PE sends, the second half
    receives from the previous PE. ``slot`` (symmetric int32) receives the previous PE's number via
    nvshmem_int_p; ``sig`` (symmetric uint64) is raised to ``step`` by the previous PE.
    ``out[0:BLOCK]`` gets the received block, ``out[BLOCK]`` whether the peer is load/store reachable.
    """
    me = my_pe()
    peer = (me + 1) % n_pes()
    put_int(slot, me, peer)
    put_signal_block(buf + BLOCK, buf, BLOCK * 4, sig, step, peer)
    wait_signal(sig, step)
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(buf + BLOCK + offs, volatile=True))
    tl.store(out + BLOCK, peer_reachable(buf, peer))
    barrier_all()


@triton.jit
def sigmoid_if_reachable_kernel(x, sym, pe, BLOCK: tl.constexpr):
    """``x`` [BLOCK] fp32 through ``tl.sigmoid`` (an ``exp2`` intrinsic) where PE ``pe`` is reachable:
    a kernel that links NVSHMEM and uses one of Triton's math intrinsics."""
    offs = tl.arange(0, BLOCK)
    v = tl.load(x + offs)
    tl.store(x + offs, tl.where(peer_reachable(sym, pe) != 0, tl.sigmoid(v), v))


@triton.jit
def put_pe_kernel(slot):
    """This PE's number into ``slot`` (symmetric int32) on the next PE: NVSHMEM's smallest use."""
    me = my_pe()
    put_int(slot, me, (me + 1) % n_pes())


@triton.jit
def put_get_kernel(buf, got, BLOCK: tl.constexpr):
    """Device-side put and get with the next PE.

    ``buf`` is symmetric [2 * BLOCK] int32: this PE puts its first half into the next PE's second
    half, then (after a barrier, which completes the puts) gets the next PE's first half into the
    local ``got`` [BLOCK].
    """
    peer = (my_pe() + 1) % n_pes()
    put_block(buf + BLOCK, buf, BLOCK * 4, peer)
    barrier_all()
    get_block(got, buf, BLOCK * 4, peer)
