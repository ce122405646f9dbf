"""Triton kernels around the bounded waits of bounded-wait-device.cu (AOT-compiled by the tests)."""

import triton
import triton.language as tl

from triton_raw_ext import dialect


@dialect(name="cuda", file="bounded-wait-device.cu")
def wait_flag(flag, expected, me, peer, timeout_ms): ...


@dialect(name="cuda", file="bounded-wait-device.cu")
def wait_signal(sig, expected, me, peer, timeout_ms): ...


@dialect(name="cuda", file="bounded-wait-device.cu")
def wait_flag_reload(flag, expected, me, peer, timeout_ms): ...


@triton.jit
def wait_flag_kernel(flag_ptr, out_ptr, expected, me, peer, wait_ms):
    tl.store(out_ptr, wait_flag(flag_ptr, expected, me, peer, wait_ms))


@triton.jit
def wait_flag_reload_kernel(flag_ptr, out_ptr, expected, me, peer, wait_ms):
    tl.store(out_ptr, wait_flag_reload(flag_ptr, expected, me, peer, wait_ms))


@triton.jit
def wait_signal_kernel(sig_ptr, out_ptr, expected, me, peer, WAIT_MS: tl.constexpr):
    tl.store(out_ptr, wait_signal(sig_ptr, expected, me, peer, WAIT_MS))
