"""triton_raw_ext.module_init: a module with NVSHMEM state first loaded during a CUDA graph capture raises
naming the kernel and the fix; otherwise the set-up runs (CPU: the driver queries and the capture state
are stand-ins)."""

from __future__ import annotations

import pytest

from triton_raw_ext import module_init
from triton_raw_ext.errors import RawRuntimeError


@pytest.fixture
def module(monkeypatch):
    """A stand-in module: whether it holds NVSHMEM state, whether a capture is on, and what set-up ran."""
    state = {"nvshmem": False, "capturing": False, "ran": []}
    monkeypatch.setattr(module_init, "_libcuda", lambda: None)
    monkeypatch.setattr(module_init, "holds_nvshmem_state", lambda _: state["nvshmem"])
    monkeypatch.setattr(module_init, "_capturing", lambda: state["capturing"])
    monkeypatch.setattr(module_init, "point_module_at_record", lambda _, m: state["ran"].append(("record", m)))
    from triton_raw_ext import runtime

    monkeypatch.setattr(runtime, "cumodule_init", lambda m: state["ran"].append(("nvshmem", m)))
    return state


def test_a_module_with_nvshmem_state_loaded_under_capture_raises_naming_the_kernel(module):
    module["nvshmem"], module["capturing"] = True, True
    with pytest.raises(RawRuntimeError, match=r"kernel ag_gemm_kernel was first loaded while a CUDA graph was being "
                                              r"captured.*launch the kernel once before capturing"):  # fmt: skip
        module_init.init_loaded_module(0x10, None, "ag_gemm_kernel", None, "h")
    assert module["ran"] == []


def test_set_up_runs_outside_a_capture_and_plain_modules_load_under_one(module):
    module["nvshmem"] = True
    module_init.init_loaded_module(0x10, None, "k", None, "h")
    assert module["ran"] == [("record", 0x10), ("nvshmem", 0x10)]
    module["nvshmem"], module["capturing"], module["ran"] = False, True, []
    module_init.init_loaded_module(0x20, None, "plain", None, "h")  # no NVSHMEM state: loads under capture
    assert module["ran"] == [("record", 0x20)]
