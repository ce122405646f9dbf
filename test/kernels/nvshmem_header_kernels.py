"""Kernels calling raw functions whose source includes NVSHMEM's own headers (nvshmem-headers-device.cu)."""

import triton
import triton.language as tl

from triton_raw_ext import dialect

SOURCE = "nvshmem-headers-device.cu"


@dialect(name="cuda", file=SOURCE, library="nvshmem")
def my_pe(): ...


@dialect(name="cuda", file=SOURCE, library="nvshmem")
def ring_shift(destination): ...


@dialect(name="cuda", file=SOURCE, library="nvshmem")
def ring_put_signal(destination, source, nelems, signal, value): ...


@dialect(name="cuda", file=SOURCE, library="nvshmem")
def wait_signal(signal, value): ...


@dialect(name="cuda", file=SOURCE, library="nvshmem")
def next_pe_ptr(symmetric): ...


@dialect(name="cuda", file=SOURCE, library="nvshmem")
def barrier_all(): ...


SIGNATURE = {"buf": "*i32", "slot": "*i32", "sig": "*u64", "out": "*i32", "step": "i64", "BLOCK": "constexpr"}


@triton.jit
def header_ring_kernel(buf, slot, sig, out, step, BLOCK: tl.constexpr):
    """One ring step: the previous PE's number lands in ``slot``, its block in ``buf[BLOCK:]``.

    ``buf`` is symmetric [2 * BLOCK] int32 (the first half is sent), ``slot`` symmetric int32,
    ``sig`` symmetric uint64 (raised to ``step`` by the previous PE). ``out[0:BLOCK]`` gets the
    received block, ``out[BLOCK]`` the next PE's ``buf[0]`` read through ``nvshmem_ptr``, ``out[BLOCK + 1]``
    this PE's number.
    """
    ring_shift(slot)
    ring_put_signal(buf + BLOCK, buf, BLOCK, sig, step)
    wait_signal(sig, step)
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(buf + BLOCK + offs, volatile=True))
    tl.store(out + BLOCK, tl.load(next_pe_ptr(buf)))
    tl.store(out + BLOCK + 1, my_pe())
    barrier_all()
