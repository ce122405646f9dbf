"""scripts.gpu.runtime_suite on CPU: the order of its steps and the environment of its PEs.

The checks themselves need NVSHMEM on a GPU; this covers where the allocation-skew regression check
runs (one PE per GPU, first and as a step of its own without MPS when the host has two GPUs, else
last, sharing GPU 0) and that its PEs then get their own GPU.
"""

from __future__ import annotations

from scripts.gpu import runtime_suite, suites


def test_two_gpus_run_the_alloc_skew_check_first_and_alone_without_mps():
    names = [s.name for s in runtime_suite.stages(2)]
    assert names == ["alloc_skew", "world1", "world2", "world4", "world1-host_stream", "cycles", "raise"]
    runtime = suites.runtime(2)  # the runner's steps: alloc_skew alone, without MPS, then the rest
    assert [(s.command[-2:], s.shared_gpu) for s in runtime.steps] == [
        (("--stages", "alloc_skew"), False), (("--skip", "alloc_skew"), True)]  # fmt: skip


def test_one_gpu_runs_the_alloc_skew_check_last_sharing_the_gpu():
    assert [s.name for s in runtime_suite.stages(1)][-1] == "alloc_skew" and "alloc_skew" in runtime_suite.WORKERS
    (step,) = suites.runtime(1).steps
    assert step.shared_gpu and "--stages" not in step.command and "--skip" not in step.command


def test_pes_share_gpu_0_or_take_one_gpu_each(monkeypatch):
    monkeypatch.setenv("TRITON_RAW_SHARED_GPU", "1")  # as a caller in shared-GPU mode would leave it
    monkeypatch.delenv("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", raising=False)
    shared = runtime_suite.worker_env(1, 2, 29500)
    assert shared["TRITON_RAW_SHARED_GPU"] == "1" and shared["RANK"] == shared["LOCAL_RANK"] == "1"
    own = runtime_suite.worker_env(1, 2, 29500, shared_gpu=False)
    assert "TRITON_RAW_SHARED_GPU" not in own and own["LOCAL_RANK"] == "1" and own["WORLD_SIZE"] == "2"
    assert own["NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"] == "lo"
