"""<triton_raw/bounded_wait.h>: the bound on device-side waits, in the PTX of kernels that use it,
and ``knobs.wait_timeout_ms()``, which gives kernels the bound (``TRITON_RAW_WAIT_TIMEOUT_S``).

The tutorials' own waits are checked in their AOT tests with the same helper
(:func:`conftest.assert_bounded_wait`)."""

from __future__ import annotations

import re

import pytest
from conftest import aot, assert_bounded_wait, entry_lines, entry_param
from kernels.bounded_wait_kernels import wait_flag_kernel, wait_flag_reload_kernel, wait_signal_kernel

from triton_raw_ext.knobs import knobs, wait_timeout_ms

FLAG_SIGNATURE = {
    "flag_ptr": "*i32", "out_ptr": "*i32", "expected": "i32", "me": "i32", "peer": "i32", "wait_ms": "i32",
}  # fmt: skip
SIGNAL_SIGNATURE = {
    "sig_ptr": "*u64", "out_ptr": "*i64", "expected": "i64", "me": "i32", "peer": "i32", "WAIT_MS": "constexpr",
}  # fmt: skip


@pytest.fixture(scope="module")
def flag_ptx() -> str:
    return aot(wait_flag_kernel, FLAG_SIGNATURE).asm["ptx"]


def test_the_timeout_argument_bounds_the_wait(flag_ptx):
    assert_bounded_wait(flag_ptx, entry_param(flag_ptx, list(FLAG_SIGNATURE).index("wait_ms")))


def test_the_flag_is_read_with_acquire_at_system_scope_and_the_spin_sleeps(flag_ptx):
    body = "\n".join(entry_lines(flag_ptx))
    assert len(re.findall(r"ld\.acquire\.sys\.b32", body)) == 2  # the first look, then the spin
    assert "nanosleep" in body
    assert not re.search(r"\bcall(?:\.uni)?\s", body)  # the exported wait and its report are inlined


def test_the_reload_mode_polls_with_volatile_loads_then_acquires_once_at_gpu_scope_without_a_fence():
    ptx = aot(wait_flag_reload_kernel, FLAG_SIGNATURE).asm["ptx"]
    assert_bounded_wait(ptx, entry_param(ptx, list(FLAG_SIGNATURE).index("wait_ms")))
    body = "\n".join(entry_lines(ptx))
    assert len(re.findall(r"ld\.volatile\.b32\s+%r\d+, \[%rd7\]", body)) == 2  # the first look, the spin
    assert len(re.findall(r"ld\.acquire\.gpu\.b32", body)) == 1
    # no GPU-scope fence (the expired path's report has its system-scope ones)
    assert not re.search(r"fence\.(?:sc|acq_rel)\.gpu|membar\.gl|ld\.acquire\.sys", body)


def test_the_clock_is_read_once_every_256_spins(flag_ptx):
    body = "\n".join(entry_lines(flag_ptx))
    # The start and the check in the spin; then, in an expired wait, those of its wait for the report.
    assert body.count("%globaltimer") == 4
    assert re.search(r"and\.b32\s+%r\d+, %r\d+, 255;", body)  # spins % 256 before the clock is read


def test_a_constant_timeout_reaches_the_comparison_as_nanoseconds():
    compiled = aot(wait_signal_kernel, SIGNAL_SIGNATURE, {"WAIT_MS": 1234})
    ptx = compiled.asm["ptx"]
    assert_bounded_wait(ptx, 1234)
    assert "ld.acquire.sys.b64" in ptx


@pytest.mark.parametrize(
    "setting,expected", [(None, 20_000), ("5", 5_000), ("0.25", 250), ("2147483", 2_147_483_000)]
)
def test_wait_timeout_ms_reads_the_setting_in_seconds(setting, expected, monkeypatch):
    monkeypatch.delenv("TRITON_RAW_WAIT_TIMEOUT_S", raising=False)
    if setting is not None:
        monkeypatch.setenv("TRITON_RAW_WAIT_TIMEOUT_S", setting)
    assert wait_timeout_ms() == expected


def test_a_python_setting_overrides_the_environment(monkeypatch):
    monkeypatch.setenv("TRITON_RAW_WAIT_TIMEOUT_S", "5")
    knobs.wait_timeout_s = "2"
    try:
        assert wait_timeout_ms() == 2_000
    finally:
        knobs.wait_timeout_s = None


@pytest.mark.parametrize("setting", ["0", "-1", "soon", "nan", "inf", "2147484"])
def test_a_bad_setting_names_the_variable_and_the_range(setting, monkeypatch):
    monkeypatch.setenv("TRITON_RAW_WAIT_TIMEOUT_S", setting)
    with pytest.raises(ValueError) as info:
        wait_timeout_ms()
    assert str(info.value) == (
        f"TRITON_RAW_WAIT_TIMEOUT_S={setting!r}: give a number of seconds from 0.001 to 2147483"
    )
