"""Launch-mode helpers, the unique-id broadcast over gloo (2 CPU processes) and the peer watchdog."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import free_port
from triton_raw_ext.runtime import PEER_FAILED_EXIT_CODE, bootstrap

from triton_raw_ext.errors import RawRuntimeError


def test_shared_gpu_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(bootstrap.SHARED_GPU_ENV, raising=False)
    assert not bootstrap.shared_gpu_requested(None)
    for value, expected in (("1", True), ("yes", True), ("0", False), ("false", False), ("", False)):
        monkeypatch.setenv(bootstrap.SHARED_GPU_ENV, value)
        assert bootstrap.shared_gpu_requested(None) is expected
    monkeypatch.setenv(bootstrap.SHARED_GPU_ENV, "1")
    assert bootstrap.shared_gpu_requested(False) is False  # the argument wins


def test_device_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert bootstrap.select_device(shared_gpu=False, device_count=4) == 3
    assert bootstrap.select_device(shared_gpu=True, device_count=4) == 0
    with pytest.raises(RawRuntimeError, match="LOCAL_RANK=3 but only 2 CUDA device.*TRITON_RAW_SHARED_GPU=1"):
        bootstrap.select_device(shared_gpu=False, device_count=2)
    monkeypatch.setenv("LOCAL_RANK", "x")
    with pytest.raises(RawRuntimeError, match="LOCAL_RANK='x' is not an integer"):
        bootstrap.select_device(shared_gpu=False, device_count=2)
    with pytest.raises(RawRuntimeError, match="torch sees none"):
        bootstrap.select_device(shared_gpu=True, device_count=0)


def test_single_process_world_needs_no_torch_distributed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    world = bootstrap.join_world(None, shared_gpu=False)
    assert (world.rank, world.size, world.distributed) == (0, 1, False)
    info = bootstrap.BootstrapInfo.fresh(bytes(128))
    assert bootstrap.share_bootstrap(info, world) == info


def test_world_size_without_rendezvous_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    for var in ("MASTER_ADDR", "MASTER_PORT", "RANK"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(RawRuntimeError, match="WORLD_SIZE=2 but MASTER_ADDR, MASTER_PORT, RANK not set"):
        bootstrap.join_world(None, shared_gpu=True)
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(RawRuntimeError, match="WORLD_SIZE='two' is not an integer"):
        bootstrap.join_world(None, shared_gpu=True)


def test_only_group_rank_zero_provides_the_id() -> None:
    with pytest.raises(RawRuntimeError, match="exactly group rank 0"):
        bootstrap.share_bootstrap(None, bootstrap.World(rank=0, size=2, distributed=True))


@pytest.mark.parametrize(
    "payload", [None, b"x" * 128, (b"short", "s"), (b"x" * 128, 5), ("x" * 128, "s"), (b"x" * 128, "s", 1)]
)
def test_malformed_payload_is_rejected(payload: object) -> None:
    with pytest.raises(RawRuntimeError, match="malformed NVSHMEM bootstrap payload"):
        bootstrap.validate(payload)


def _launch_pair(script: str) -> list[subprocess.Popen[str]]:
    """Start ``script`` as ranks 0 and 1 of a gloo job (torchrun-style env)."""
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(
            os.environ,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_RANK=str(rank),
            TRITON_RAW_SHARED_GPU="1",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(script)],
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
    return procs


def _collect(procs: list[subprocess.Popen[str]], deadline: float) -> list[subprocess.CompletedProcess[str]]:
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail("a rank did not finish in time (hang)")
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


_BROADCAST = """
    import sys, time
    import torch.distributed as dist
    from triton_raw_ext.runtime import bootstrap
    from triton_raw_ext.runtime.watchdog import PeerWatchdog
    world = bootstrap.join_world(None, shared_gpu=True)  # creates the gloo group from the env
    fake_id = bytes(range(128))
    mine = bootstrap.BootstrapInfo.fresh(fake_id) if world.rank == 0 else None
    info = bootstrap.share_bootstrap(mine, world)
    assert info.unique_id == fake_id
    print(world.rank, world.size, dist.get_backend(), info.token, flush=True)
    # A stopped watchdog must not fire when rank 0 (the store's host) leaves first.
    dog = PeerWatchdog(bootstrap.default_store(), info.token, world.rank, world.size, poll_s=0.2,
                       lost_after_s=1.0)
    dog.start()
    dist.barrier()
    dog.stop()
    if world.rank == 1:
        time.sleep(2.0)
    # A clean exit destroys the group: left to interpreter shutdown, torch's gloo threads can abort
    # the process ("terminate called without an active exception", seen once in CI).
    dist.destroy_process_group()
"""

_WATCHDOG = """
    import time
    from triton_raw_ext.runtime import bootstrap
    from triton_raw_ext.runtime.watchdog import PeerWatchdog
    world = bootstrap.join_world(None, shared_gpu=True)
    mine = bootstrap.BootstrapInfo.fresh(bytes(128)) if world.rank == 0 else None
    info = bootstrap.share_bootstrap(mine, world)
    dog = PeerWatchdog(bootstrap.default_store(), info.token, world.rank, world.size, poll_s=0.2,
                       lost_after_s=2.0)
    dog.start()
    if world.rank == FAILING:
        raise RuntimeError("boom on purpose")
    time.sleep(60)  # stands in for a PE spinning in a kernel on the failed one
"""
_WATCHDOG_CASES = {"rank1-raises": 1, "store-host-raises": 0}


PAIR_TIMEOUT_S = 45.0


@pytest.fixture(scope="module")
def pairs() -> dict[str, tuple[list[subprocess.CompletedProcess[str]], float]]:
    """All two-process jobs of this module, launched together (process start-up dominates their cost)."""
    scripts = {
        "broadcast": _BROADCAST,
        **{name: _WATCHDOG.replace("FAILING", str(f)) for name, f in _WATCHDOG_CASES.items()},
    }
    start = time.monotonic()
    launched = {name: _launch_pair(script) for name, script in scripts.items()}
    done = {}
    for name, procs in launched.items():
        results = _collect(procs, start + PAIR_TIMEOUT_S)
        done[name] = (results, time.monotonic() - start)
    return done


def test_unique_id_broadcast_over_gloo_and_clean_exit(pairs: dict) -> None:
    results, _ = pairs["broadcast"]
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    lines = [r.stdout.split() for r in results]
    assert [line[:3] for line in lines] == [["0", "2", "gloo"], ["1", "2", "gloo"]]
    assert lines[0][3] == lines[1][3]  # same token everywhere


@pytest.mark.parametrize("case", list(_WATCHDOG_CASES))
def test_watchdog_ends_peers_of_a_failed_rank(case: str, pairs: dict) -> None:
    failing = _WATCHDOG_CASES[case]
    results, elapsed = pairs[case]
    survivor = results[1 - failing]
    # The raising rank exits 1, or is aborted at exit by torch's TCPStore thread when it hosts the
    # store ("terminate called without an active exception", seen with torch 2.13 in CI).
    assert results[failing].returncode in (1, -signal.SIGABRT), results[failing].stderr
    assert "boom on purpose" in results[failing].stderr
    assert survivor.returncode == PEER_FAILED_EXIT_CODE, survivor.stderr
    assert "because another PE failed" in survivor.stderr
    if failing == 1:
        assert "PE 1 of 2: raised RuntimeError: boom on purpose" in survivor.stderr
    assert elapsed < PAIR_TIMEOUT_S
