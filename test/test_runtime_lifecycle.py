"""init/finalize/memory bookkeeping without a GPU: a fake helper library stands in for NVSHMEM."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from conftest import child_env
from triton_raw_ext.runtime import heap, lifecycle, memory

from triton_raw_ext import runtime
from triton_raw_ext.errors import RawRuntimeError


class FakeLib:
    """The helper's entry points that lifecycle/memory call, recording what happened."""

    def __init__(
        self, hang_in: str = "", free_error: int = 0, module_status: int = 0, ptr: int | None = 1, wait_error: int = 0
    ) -> None:
        self.calls: list[tuple] = []
        self.hang_in = hang_in
        self.free_error = free_error
        self.wait_error = wait_error
        self.module_status = module_status
        self.ptr = ptr

    def _maybe_hang(self, name: str) -> None:
        if self.hang_in == name:
            threading.Event().wait()

    def trx_free(self, ptr: int, device: int) -> int:
        self._maybe_hang("free")
        self.calls.append(("free", ptr))
        return self.free_error

    def trx_finalize(self, device: int) -> None:
        self._maybe_hang("finalize")
        self.calls.append(("finalize",))

    def trx_barrier_all_on_stream(self, stream: int) -> None:
        self.calls.append(("barrier", stream))

    def trx_quiet_on_stream(self, stream: int) -> None:
        self.calls.append(("quiet", stream))

    def trx_cumodule_init(self, module: int) -> int:
        self.calls.append(("cumodule", module))
        return self.module_status

    def trx_malloc(self, nbytes: int, device: int, out: Any) -> int:
        self.calls.append(("malloc", nbytes, device))
        out._obj.value = None if self.wait_error else self.ptr
        return self.wait_error

    def trx_ptr(self, ptr: int, pe: int) -> int | None:
        return self.ptr


def _install(monkeypatch: pytest.MonkeyPatch, lib: FakeLib, owned: bool = True) -> lifecycle.InitState:
    state = lifecycle.InitState(lib, 0, 2, 0, owned, 10_000 + id(lib) % 1000, lifecycle._DaemonWorker())
    monkeypatch.setattr(lifecycle, "_state", state)
    return state


def _fake_allocation(state: lifecycle.InitState, ptr: int) -> heap.Allocation:
    alloc = heap.Allocation(ptr=ptr, nbytes=64, device=0, serial=state.serial)
    heap.record(alloc)
    return alloc


def test_not_initialised_errors() -> None:
    assert not runtime.is_initialized()
    with pytest.raises(RawRuntimeError) as err:
        runtime.cumodule_init(0x1234)
    assert str(err.value) == "this kernel uses NVSHMEM; call triton_raw_ext.runtime.init() before launching it"
    for call, name in (
        (runtime.my_pe, "my_pe()"),
        (runtime.n_pes, "n_pes()"),
        (runtime.pes_per_gpu, "pes_per_gpu()"),
        (runtime.barrier_all, "barrier_all()"),
        (runtime.quiet, "quiet()"),
        (lambda: runtime.empty(4), "empty()"),
        (lambda: runtime.peer(torch.zeros(1), 0), "peer()"),
    ):
        with pytest.raises(
            RawRuntimeError,
            match=rf"{name.replace('(', '[(]').replace(')', '[)]')}.* call "
            r"triton_raw_ext.runtime.init\(\) first",
        ):
            call()
    runtime.finalize()  # a no-op, twice
    runtime.finalize()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_init_without_gpu_is_explained() -> None:
    with pytest.raises(RawRuntimeError, match="NVSHMEM needs a CUDA GPU but torch sees none"):
        runtime.init()
    assert not runtime.is_initialized()


def test_queries_and_stream_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = FakeLib()
    _install(monkeypatch, lib)
    assert (runtime.my_pe(), runtime.n_pes(), runtime.is_initialized()) == (0, 2, True)
    runtime.barrier_all(1234)
    runtime.quiet(type("Stream", (), {"cuda_stream": 99})())
    runtime.cumodule_init(0xABC)
    assert lib.calls == [("barrier", 1234), ("quiet", 99), ("cumodule", 0xABC)]


def test_pes_per_gpu_counts_peers_only_in_shared_gpu_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    state = _install(monkeypatch, FakeLib())
    assert runtime.pes_per_gpu() == 1
    state.shared_gpu = True
    assert runtime.pes_per_gpu() == 2


def test_cumodule_init_failure_names_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, FakeLib(module_status=7))
    with pytest.raises(RawRuntimeError, match="nvshmemx_cumodule_init failed with status 7 on CUmodule 0xabc"):
        runtime.cumodule_init(0xABC)


def test_each_allocation_is_freed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = FakeLib()
    state = _install(monkeypatch, lib)
    before = runtime.heap_stats()
    first, second, third = (_fake_allocation(state, p) for p in (0x1000, 0x2000, 0x3000))
    memory._release(second)  # collected before finalize: freed now
    memory._release(second)  # a second collection signal does nothing
    runtime.finalize()
    memory._release(first)  # collected after finalize: already freed there
    assert lib.calls == [("free", 0x2000), ("free", 0x1000), ("free", 0x3000), ("finalize",)]
    assert all(a.freed for a in (first, second, third))
    after = runtime.heap_stats()
    assert after["freed"] - before["freed"] == 3 and after["live"] == before["live"]
    assert not runtime.is_initialized()


def test_finalize_of_a_borrowed_nvshmem_frees_but_does_not_finalize(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = FakeLib()
    _fake_allocation(_install(monkeypatch, lib, owned=False), 0x4000)
    runtime.finalize()
    assert lib.calls == [("free", 0x4000)]


@pytest.mark.parametrize(
    ("hang_in", "step"),
    [
        ("finalize", "the device wait and nvshmemx_hostlib_finalize"),
        ("free", "nvshmem_free of symmetric tensor 1 of 1"),
    ],
)
def test_finalize_is_bounded_and_names_the_step(monkeypatch: pytest.MonkeyPatch, hang_in: str, step: str) -> None:
    _fake_allocation(_install(monkeypatch, FakeLib(hang_in=hang_in)), 0x5000)
    start = time.monotonic()
    with pytest.raises(runtime.TeardownTimeout, match=f"PE 0 of 2 did not finish within 0.3 s: it waits in {step}"):
        runtime.finalize(timeout_s=0.3)
    assert time.monotonic() - start < 5
    assert not runtime.is_initialized()
    runtime.finalize()  # idempotent even after a timeout


def test_cuda_error_while_freeing_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_allocation(_install(monkeypatch, FakeLib(free_error=700)), 0x6000)
    with pytest.raises(RawRuntimeError, match="cudaError 700 while freeing symmetric tensors"):
        runtime.finalize()


def test_release_reports_cuda_error(monkeypatch: pytest.MonkeyPatch) -> None:
    alloc = _fake_allocation(_install(monkeypatch, FakeLib(free_error=700)), 0x6100)
    with pytest.raises(RawRuntimeError, match="cudaError 700 .* the memory was freed"):
        memory._release(alloc)


def test_bad_finalize_timeout_env(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, FakeLib())
    monkeypatch.setenv(lifecycle.FINALIZE_TIMEOUT_ENV, "soon")
    with pytest.raises(RawRuntimeError, match="TRITON_RAW_FINALIZE_TIMEOUT_S='soon' is not a number"):
        runtime.finalize()


def test_memory_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = FakeLib(ptr=None)
    state = _install(monkeypatch, lib)
    with pytest.raises(RawRuntimeError, match=r"nvshmem_malloc\(40\) returned NULL on PE 0.*NVSHMEM_SYMMETRIC_SIZE"):
        runtime.empty((2, 5), torch.float32)
    assert lib.calls == [("malloc", 40, 0)]  # the init's device goes to trx_malloc, which waits for it
    with pytest.raises(RawRuntimeError, match="negative dimension -1"):
        runtime.empty((2, -1))
    plain = torch.zeros(4)
    with pytest.raises(RawRuntimeError, match="PE 2 does not exist; PEs are 0..1"):
        runtime.peer(plain, 2)
    with pytest.raises(RawRuntimeError, match="not on the symmetric heap"):
        runtime.peer(plain, 1)
    _fake_allocation(state, plain.untyped_storage().data_ptr())
    try:
        with pytest.raises(RawRuntimeError, match="PE 1 is not reachable by load/store from PE 0"):
            runtime.peer(plain, 1)
    finally:
        heap.release(heap.lookup(plain.untyped_storage().data_ptr()))


_EXIT_HANG = """
    import atexit
    from triton_raw_ext.runtime import lifecycle
    from test_runtime_lifecycle import FakeLib
    lifecycle._state = lifecycle.InitState(FakeLib(hang_in="finalize"), 1, 2, 0, True, 1, lifecycle._DaemonWorker())
    atexit.register(lifecycle._finalize_at_exit)
    print("exiting", flush=True)
"""


def test_a_failed_wait_before_nvshmem_malloc_is_reported_and_allocates_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = _install(monkeypatch, FakeLib(wait_error=700))
    aborts: list[str] = []
    state.watchdog = SimpleNamespace(post_abort=aborts.append)  # peers wait in nvshmem_malloc for us
    live = runtime.heap_stats()["live"]
    expected = (r"waiting for GPU 0 before nvshmem_malloc reported cudaError 700.*CUDA_LAUNCH_BLOCKING=1.*"
                r"nothing was allocated, and the other PEs were told to stop")  # fmt: skip
    with pytest.raises(RawRuntimeError, match=expected):
        runtime.zeros(8)
    assert runtime.heap_stats()["live"] == live
    assert len(aborts) == 1 and "cudaError 700" in aborts[0]


def test_exit_never_hangs_on_a_stuck_teardown() -> None:
    env = child_env(TRITON_RAW_FINALIZE_TIMEOUT_S="0.5")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_EXIT_HANG)], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == lifecycle.TEARDOWN_TIMEOUT_EXIT_CODE, proc.stderr
    assert "at exit: finalize() on PE 1 of 2 did not finish within 0.5 s" in proc.stderr


def test_host_barrier_waits_for_every_pe_through_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    from torch.distributed import HashStore

    state = _install(monkeypatch, FakeLib())
    state.store, state.token = HashStore(), "job-1"
    peer_arrives_at: list[float] = []

    def peer(n: int) -> None:
        time.sleep(0.3)
        peer_arrives_at.append(time.monotonic())
        state.store.add(f"triton_raw/host_barrier/job-1/{n}", 1)

    for n in (1, 2):  # each call is a new barrier: the first one's count does not release the second
        threading.Thread(target=peer, args=(n,)).start()
        runtime.host_barrier(timeout_s=10)
        assert peer_arrives_at and time.monotonic() >= peer_arrives_at[-1]
        peer_arrives_at.clear()
    assert state.lib.calls == []  # no work on the GPU: the helper library saw no call


def test_host_barrier_times_out_naming_the_arrivals(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed import HashStore

    state = _install(monkeypatch, FakeLib())
    state.store, state.token = HashStore(), "job-2"
    with pytest.raises(RawRuntimeError, match="1 of 2 PEs arrived within 0 s"):
        runtime.host_barrier(timeout_s=0.2)


def test_host_barrier_is_a_no_op_without_a_store(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, FakeLib())  # NVSHMEM initialised by another owner: no torch.distributed store
    runtime.host_barrier(timeout_s=0.01)


def test_preload_load_names_what_it_needs() -> None:
    from triton_raw_ext.kernel_loading import load

    with pytest.raises(TypeError, match="expected a triton CompiledKernel"):
        load(object())


def test_preload_is_a_function_of_the_package() -> None:
    from triton_raw_ext import kernel_loading, preload

    assert preload is kernel_loading.preload  # not a module: `from triton_raw_ext import preload` then call it
