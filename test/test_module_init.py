"""triton_raw_ext.module_init: a module with NVSHMEM state first loaded during a CUDA graph capture raises
naming the kernel and the fix; otherwise the set-up runs (CPU: the driver queries and the capture state
are stand-ins)."""

from __future__ import annotations

import pytest

from triton_raw_ext import module_init
from triton_raw_ext.errors import RawRuntimeError


@pytest.fixture
def module(monkeypatch):
    """A stand-in module: which globals it defines, whether a capture is on, and what set-up ran."""
    state = {"defines": set(), "capturing": False, "ran": []}
    monkeypatch.setattr(module_init, "_libcuda", lambda: None)
    monkeypatch.setattr(module_init, "_defines_global", lambda _, symbol: symbol in state["defines"])
    monkeypatch.setattr(module_init, "_capturing", lambda: state["capturing"])
    monkeypatch.setattr(module_init, "point_module_at_record", lambda _, m: state["ran"].append(("record", m)))
    from triton_raw_ext import runtime

    monkeypatch.setattr(runtime, "cumodule_init", lambda m: state["ran"].append(("nvshmem", m)))
    return state


def test_a_module_with_nvshmem_state_loaded_under_capture_raises_naming_the_kernel(module):
    module["defines"], module["capturing"] = {module_init.STATE_SYMBOL}, True
    with pytest.raises(RawRuntimeError, match=r"kernel ag_gemm_kernel was first loaded while a CUDA graph was being "
                                              r"captured.*launch the kernel once before capturing"):  # fmt: skip
        module_init.init_loaded_module(0x10, None, "ag_gemm_kernel", None, "h")
    assert module["ran"] == []


def test_set_up_runs_outside_a_capture_and_plain_modules_load_under_one(module):
    module["defines"] = {module_init.STATE_SYMBOL}
    module_init.init_loaded_module(0x10, None, "k", None, "h")
    assert module["ran"] == [("record", 0x10), ("nvshmem", 0x10)]
    module["capturing"], module["ran"] = True, []
    for defines in (set(), {b"triton_raw_wait_record_ptr"}):  # no NVSHMEM state: loads under capture
        module["defines"] = defines
        module_init.init_loaded_module(0x20, None, "plain", None, "h")
    assert module["ran"] == [("record", 0x20)] * 2
