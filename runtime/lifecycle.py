"""NVSHMEM's lifecycle in this process: init, PE queries, stream barriers, module setup, finalize.

Contracts:

* :func:`init` is collective over the PEs and idempotent. It loads (building once) the host helper
  and checks versions *before* any collective step, so a broken install fails fast on every PE.
  When NVSHMEM is already initialised in the process (e.g. by torch symmetric memory using the same
  ``libnvshmem_host.so.3``), it is reused and left for its owner to finalize.
* :func:`finalize` is idempotent, registered with :mod:`atexit`, and bounded in time: the collective
  part (freeing outstanding symmetric tensors, then ``nvshmemx_hostlib_finalize``) runs on a daemon
  thread started at init; if it does not finish within ``timeout_s``
  (``$TRITON_RAW_FINALIZE_TIMEOUT_S``, default 60 s) it raises naming the step it waited in. At
  interpreter exit that report goes to stderr and the process ends with
  :data:`TEARDOWN_TIMEOUT_EXIT_CODE` instead of hanging.
* :func:`is_initialized` and :func:`cumodule_init` are cheap and import nothing heavy; they are
  called from Triton's kernel-load hook.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import itertools
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from triton_raw_ext import wait_reports
from triton_raw_ext.errors import RawRuntimeError

from . import heap
from .watchdog import PeerWatchdog

FINALIZE_TIMEOUT_ENV = "TRITON_RAW_FINALIZE_TIMEOUT_S"
DEFAULT_FINALIZE_TIMEOUT_S = 60.0
TEARDOWN_TIMEOUT_EXIT_CODE = 87
NOT_INITIALIZED = "this kernel uses NVSHMEM; call triton_raw_ext.runtime.init() before launching it"


class TeardownTimeout(RawRuntimeError):
    """finalize() gave up waiting for the collective teardown."""


# Serialises every NVSHMEM call made through this package (NVSHMEM is initialised THREAD_SERIALIZED).
LOCK = threading.RLock()


class _DaemonWorker:
    """A daemon thread started ahead of time that runs one job on request.

    Started at init because threads cannot always be created from atexit handlers; a daemon
    thread stuck in a collective never blocks interpreter exit.
    """

    def __init__(self) -> None:
        self._job: Callable[[], None] | None = None
        self._go = threading.Event()
        self._done = threading.Event()
        self.error: BaseException | None = None
        threading.Thread(target=self._loop, name="triton-raw-teardown", daemon=True).start()

    def run(self, job: Callable[[], None], timeout_s: float) -> bool:
        """Run ``job`` on the worker; True if it finished within ``timeout_s``."""
        self._job = job
        self._go.set()
        return self._done.wait(timeout_s)

    def _loop(self) -> None:
        self._go.wait()
        try:
            assert self._job is not None
            self._job()
        except BaseException as exc:  # reported by finalize() on the caller's thread
            self.error = exc
        finally:
            self._done.set()


@dataclass
class InitState:
    """One successful init(): the helper library and this PE's identity."""

    lib: ctypes.CDLL
    pe: int
    n_pes: int
    device: int
    owned: bool
    serial: int
    worker: _DaemonWorker
    watchdog: PeerWatchdog | None = None
    shared_gpu: bool = False
    store: Any = None  # torch.distributed's store when the PEs are a torch.distributed job (host_barrier)
    token: str = ""  # the bootstrap's per-init id, the same on every PE
    host_barriers: int = 0


_state: InitState | None = None
_serials = itertools.count(1)
_atexit_registered = False


def is_initialized() -> bool:
    """True between a completed :func:`init` and :func:`finalize` in this process."""
    return _state is not None


def current() -> InitState | None:
    """The state of the live init(), or None."""
    return _state


def require(what: str) -> InitState:
    """The state of the live init(); raises naming ``what`` needed it when NVSHMEM is not initialised."""
    state = _state
    if state is None:
        raise RawRuntimeError(
            f"{what} needs NVSHMEM, which is not initialised: call triton_raw_ext.runtime.init() first"
        )
    return state


def _unique_id(lib: ctypes.CDLL) -> bytes:
    from .hostlib import UNIQUE_ID_BYTES

    buf = ctypes.create_string_buffer(UNIQUE_ID_BYTES)
    status = lib.trx_get_unique_id(buf)
    if status != 0:
        raise RawRuntimeError(
            f"nvshmemx_get_uniqueid failed with status {status}: NVSHMEM's bootstrap could not open a "
            "listening "
            f"socket; set NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME to an interface all PEs reach (lo on one node)"
        )
    return buf.raw


def init(group: Any = None, *, shared_gpu: bool | None = None) -> None:
    """Initialise NVSHMEM for this process (collective over ``group``; idempotent).

    ``group``: the torch.distributed group whose ranks become PEs (default: the default group,
    created from torchrun's environment when none exists; no torch.distributed at all for a
    single process). ``shared_gpu``: put every PE on GPU 0 (default: ``$TRITON_RAW_SHARED_GPU``).
    """
    global _state, _atexit_registered
    with LOCK:
        if _state is not None:
            return
        import torch

        from . import bootstrap
        from .hostlib import STATUS_IS_INITIALIZED, host_library

        shared = bootstrap.shared_gpu_requested(shared_gpu)
        device = bootstrap.select_device(
            shared, torch.cuda.device_count() if torch.cuda.is_available() else 0
        )
        lib = host_library()
        torch.cuda.set_device(device)
        err = lib.trx_set_device(device)
        if err != 0:
            raise RawRuntimeError(
                f"cudaSetDevice({device}) failed with cudaError {err}; check the GPU and driver"
            )
        if lib.trx_init_status() >= STATUS_IS_INITIALIZED:
            state = InitState(
                lib, lib.trx_my_pe(), lib.trx_n_pes(), device, False, next(_serials), _DaemonWorker()
            )
        else:
            state = _bootstrap(lib, bootstrap.join_world(group, shared), device, bootstrap)
        state.shared_gpu = shared
        _state = state
        if not _atexit_registered:
            atexit.register(_finalize_at_exit)
            _atexit_registered = True


def _bootstrap(lib: ctypes.CDLL, world: Any, device: int, bootstrap: Any) -> InitState:
    mine = bootstrap.BootstrapInfo.fresh(_unique_id(lib)) if world.rank == 0 else None
    info = bootstrap.share_bootstrap(mine, world)
    watchdog = None
    store = bootstrap.default_store() if world.size > 1 else None
    if store is not None:
        watchdog = PeerWatchdog(store, info.token, world.rank, world.size)
        watchdog.start()
    status = lib.trx_init_with_unique_id(world.rank, world.size, info.unique_id)
    if status == 0 and (lib.trx_my_pe(), lib.trx_n_pes()) != (world.rank, world.size):
        status = -1
    if status != 0:
        if watchdog is not None:
            watchdog.post_abort(f"NVSHMEM init failed with status {status}")
            watchdog.stop()
        raise RawRuntimeError(
            f"NVSHMEM initialisation failed (status {status}) on PE {world.rank} of {world.size}: rerun with "
            f"NVSHMEM_DEBUG=INFO to see why; common causes are PEs that called init() with different groups, "
            f"GPUs without a P2P path, or NVSHMEM_SYMMETRIC_SIZE larger than free GPU memory"
        )
    return InitState(
        lib, world.rank, world.size, device, True, next(_serials), _DaemonWorker(), watchdog, store=store,
        token=info.token,
    )


HOST_BARRIER_TIMEOUT_S = 600.0


def host_barrier(timeout_s: float = HOST_BARRIER_TIMEOUT_S) -> None:
    """Return once every PE has called host_barrier (collective; no GPU work, unlike
    :func:`barrier_all`). Used after loading kernels (:mod:`triton_raw_ext.kernel_loading`) so that no PE
    enqueues waiting kernels while another still loads. Goes through torch.distributed's store; a
    no-op for one PE or when NVSHMEM was initialised by another owner. Raises after ``timeout_s``
    naming how many PEs arrived."""
    import time

    state = require("host_barrier()")
    if state.n_pes == 1 or state.store is None:
        return
    state.host_barriers += 1
    key = f"triton_raw/host_barrier/{state.token}/{state.host_barriers}"
    arrived = state.store.add(key, 1)
    deadline = time.monotonic() + timeout_s
    delay = 1e-4
    while arrived < state.n_pes:
        if time.monotonic() > deadline:
            raise RawRuntimeError(
                f"host_barrier: {arrived} of {state.n_pes} PEs arrived within {timeout_s:.0f} s; a PE "
                "stopped before it (see its log), or PEs call host_barrier a different number of times"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.01)
        arrived = state.store.add(key, 0)


def my_pe() -> int:
    """This process's PE number."""
    return require("my_pe()").pe


def pes_per_gpu() -> int:
    """How many PEs run kernels on this PE's GPU: ``n_pes()`` in shared-GPU mode, else 1.

    Persistent kernels that spin on peers' data size their grids with it: in shared-GPU mode the
    PEs' kernels compete for the same SMs, and a grid that takes them all can starve a peer's work.
    """
    state = require("pes_per_gpu()")
    return state.n_pes if state.shared_gpu else 1


def n_pes() -> int:
    """The number of PEs."""
    return require("n_pes()").n_pes


def stream_handle(stream: Any) -> int:
    """The ``cudaStream_t`` of a torch stream, an int handle, or (None) the current torch stream."""
    if stream is None:
        import torch

        stream = torch.cuda.current_stream()
    return int(getattr(stream, "cuda_stream", stream))


def refuse_capture(what: str, stream: Any = None) -> None:
    """Raise :class:`RawRuntimeError` naming ``what`` when ``stream`` (default: the current torch
    stream) is capturing a CUDA graph. NVSHMEM's ``*_on_stream`` calls are not capturable: one made
    while capturing ends the whole process (exit 255) with no Python error."""
    import torch

    if stream is not None and not isinstance(stream, torch.cuda.Stream):
        return  # a raw handle: torch cannot ask it, and NVSHMEM reports its own misuse
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        capturing = torch.cuda.is_current_stream_capturing()
    if capturing:
        raise RawRuntimeError(
            f"{what} was called while the stream is capturing a CUDA graph: NVSHMEM's stream operations "
            "cannot be captured (NVSHMEM would end the process). Synchronise PEs inside the captured kernels "
            "instead (triton_raw_ext.nvshmem.barrier_all_block, or flags with device-side epochs), or make "
            "this call outside graph capture.")


def barrier_all(stream: Any = None) -> None:
    """Enqueue ``nvshmemx_barrier_all_on_stream`` on ``stream`` (default: the current torch stream).

    Collective; returns at once. Work queued on the stream afterwards sees every PE's symmetric
    memory writes and puts made before their barrier. Raises :class:`RawRuntimeError` while the
    stream is capturing a CUDA graph (:func:`refuse_capture`).
    """
    state = require("barrier_all()")
    refuse_capture("triton_raw_ext.runtime.barrier_all()", stream)
    handle = stream_handle(stream)
    with LOCK:
        state.lib.trx_barrier_all_on_stream(handle)


def quiet(stream: Any = None) -> None:
    """Enqueue ``nvshmemx_quiet_on_stream``: completes this PE's outstanding puts/AMOs on ``stream``.
    Raises :class:`RawRuntimeError` while the stream is capturing a CUDA graph."""
    state = require("quiet()")
    refuse_capture("triton_raw_ext.runtime.quiet()", stream)
    handle = stream_handle(stream)
    with LOCK:
        state.lib.trx_quiet_on_stream(handle)


def cumodule_init(cu_module_handle: int) -> None:
    """Publish NVSHMEM's device state into a loaded ``CUmodule`` (given as an int handle).

    Raises :class:`RawRuntimeError` when NVSHMEM is not initialised or NVSHMEM rejects the module.
    """
    state = _state
    if state is None:
        raise RawRuntimeError(NOT_INITIALIZED)
    with LOCK:
        status = state.lib.trx_cumodule_init(cu_module_handle)
    if status != 0:
        raise RawRuntimeError(
            f"nvshmemx_cumodule_init failed with status {status} on CUmodule {cu_module_handle:#x}: the "
            "module "
            f"holds no NVSHMEM device state (was NVSHMEM's device bitcode linked into this kernel?)"
        )


def _timeout_from_env() -> float:
    raw = os.environ.get(FINALIZE_TIMEOUT_ENV)
    if not raw:
        return DEFAULT_FINALIZE_TIMEOUT_S
    try:
        return float(raw)
    except ValueError:
        raise RawRuntimeError(f"{FINALIZE_TIMEOUT_ENV}={raw!r} is not a number of seconds") from None


def finalize(timeout_s: float | None = None) -> None:
    """Free outstanding symmetric tensors and tear NVSHMEM down (collective; idempotent; bounded).

    Does nothing collective after this PE reported a failure to the others (its watchdog posted an
    abort), and does not finalize NVSHMEM when someone else initialised it (then only this package's
    symmetric tensors are freed). Raises :class:`TeardownTimeout` naming the step it waited in when
    the teardown takes over ``timeout_s``, and :class:`RawRuntimeError` for CUDA errors met on the way.
    """
    global _state
    with LOCK:
        state = _state
        if state is None:
            return
        _state = None
        pending = heap.take_outstanding(state.serial)
        if state.watchdog is not None:
            state.watchdog.stop()
            if state.watchdog.aborted:
                return
        limit = _timeout_from_env() if timeout_s is None else timeout_s
        step = ["starting"]
        cuda_errors: list[int] = []

        def teardown() -> None:
            for i, ptr in enumerate(pending):
                step[0] = f"nvshmem_free of symmetric tensor {i + 1} of {len(pending)}"
                err = state.lib.trx_free(ptr, state.device)
                if err:
                    cuda_errors.append(err)
            if state.owned:
                step[0] = "the device wait and nvshmemx_hostlib_finalize"
                state.lib.trx_finalize(state.device)

        if not state.worker.run(teardown, limit):
            if state.watchdog is not None:
                state.watchdog.post_abort(f"finalize() timed out in {step[0]}")
            raise TeardownTimeout(
                f"finalize() on PE {state.pe} of {state.n_pes} did not finish within {limit:g} s: it "
                "waits in "
                f"{step[0]}, a collective step that needs every PE to call finalize(). A PE that exited "
                "without "
                f"finalize(), is stuck in a kernel, or dropped different symmetric tensors keeps it waiting; "
                f"NVSHMEM was left initialised (raise {FINALIZE_TIMEOUT_ENV} if PEs are just slow)"
            )
        if state.worker.error is not None:
            raise RawRuntimeError(f"finalize() failed: {state.worker.error}") from state.worker.error
        if cuda_errors:
            raise RawRuntimeError(
                f"finalize() tore NVSHMEM down, but the device reported cudaError {cuda_errors[0]} while "
                "freeing "
                f"symmetric tensors: a kernel failed earlier (run with CUDA_LAUNCH_BLOCKING=1 to find it)"
            )


def _finalize_at_exit() -> None:
    try:
        finalize()
    except RawRuntimeError as exc:
        sys.stderr.write(f"triton_raw_ext.runtime: at exit: {exc}\n")
        sys.stderr.flush()
        if isinstance(exc, TeardownTimeout):
            # The teardown thread is blocked inside NVSHMEM; C-level exit handlers could block on it.
            wait_reports.print_pending()
            os._exit(TEARDOWN_TIMEOUT_EXIT_CODE)
