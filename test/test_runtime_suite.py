"""scripts/gpu/runtime_suite.py on CPU: the order of its steps and the environment of its PEs.

The checks themselves need NVSHMEM on a GPU; this covers where the allocation-skew regression check
runs (one PE per GPU before MPS starts when the host has two GPUs, else sharing GPU 0 under MPS) and
that its PEs then get their own GPU.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "runtime_suite.py"


@pytest.fixture(scope="module")
def suite():
    spec = importlib.util.spec_from_file_location("runtime_suite", SUITE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_two_gpus_run_the_alloc_skew_check_one_pe_per_gpu_before_mps(suite):
    steps = [(s.name, s.under_mps) for s in suite.stages(2)]
    assert steps[0] == ("alloc_skew", False)
    assert all(under_mps for _, under_mps in steps[1:])
    assert [name for name, _ in steps[1:]] == ["world1", "world2", "world4", "world1-host_stream", "cycles", "raise"]


def test_one_gpu_runs_the_alloc_skew_check_last_sharing_the_gpu(suite):
    steps = [(s.name, s.under_mps) for s in suite.stages(1)]
    assert steps[-1] == ("alloc_skew", True) and all(under_mps for _, under_mps in steps)
    assert "alloc_skew" in suite.WORKERS


def test_pes_share_gpu_0_or_take_one_gpu_each(suite, monkeypatch):
    monkeypatch.setenv("TRITON_RAW_SHARED_GPU", "1")  # as a caller in shared-GPU mode would leave it
    monkeypatch.delenv("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", raising=False)
    shared = suite.worker_env(1, 2, 29500)
    assert shared["TRITON_RAW_SHARED_GPU"] == "1" and shared["RANK"] == shared["LOCAL_RANK"] == "1"
    own = suite.worker_env(1, 2, 29500, shared_gpu=False)
    assert "TRITON_RAW_SHARED_GPU" not in own and own["LOCAL_RANK"] == "1" and own["WORLD_SIZE"] == "2"
    assert own["NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"] == "lo" and own["NVSHMEM_DISABLE_NVLS"] == "1"
