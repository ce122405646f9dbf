"""Reports of expired bounded waits (``<triton_raw/bounded_wait.h>``): the record kernels write, the
definition of its pointer in kernels, and the host side that prints it.

A kernel that uses the header declares ``triton_raw_wait_record_ptr``; :func:`define_record_pointer`
defines it (null) in the kernel's LLVM IR. When such a kernel's module is loaded,
:func:`point_module_at_record` stores there the device address of this process's record: host memory
mapped into the GPUs (``cuMemHostAlloc``, portable and device-mapped), so the host can read it after
the kernel has trapped and the context is lost. The first expired wait of a kernel fills the record,
then traps; a daemon thread started with the record prints it as one line on stderr within
``POLL_S``, and so do :mod:`atexit` and :func:`print_pending` (which code that ends the process with
``os._exit`` calls first) if the process ends sooner. One report per process: the first expired wait
is the cause, later ones its consequences.
"""

from __future__ import annotations

import atexit
import ctypes
import re
import sys
import threading
import warnings

RECORD_SYMBOL = "triton_raw_wait_record_ptr"
POLL_S = 0.05
CUDA_SUCCESS = 0
_HOST_ALLOC_FLAGS = 0x01 | 0x02  # CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP
_STREAM_NON_BLOCKING = 0x1
# Triton's LLVM IR declares the pointer as an external global of the generic or global address space.
_DECLARATION = re.compile(rf"^@{RECORD_SYMBOL} = external ((?:\w+ )*?)(addrspace\(1\) )?global ptr(.*)$", re.MULTILINE)


class WaitRecord(ctypes.Structure):
    """``struct triton_raw_wait_record`` of bounded_wait.h, field for field."""

    _fields_ = [("ready", ctypes.c_uint), ("me", ctypes.c_int), ("peer", ctypes.c_int), ("is_signed", ctypes.c_int),
                ("block", ctypes.c_uint), ("thread", ctypes.c_uint), ("waited_ns", ctypes.c_ulonglong),
                ("flag", ctypes.c_ulonglong), ("seen", ctypes.c_longlong), ("expected", ctypes.c_longlong),
                ("what", ctypes.c_char * 64)]  # fmt: skip


def define_record_pointer(llir: str) -> str:
    """``llir`` with ``triton_raw_wait_record_ptr`` defined (null, visible to ``cuModuleGetGlobal``) where
    the kernel declares it; unchanged otherwise."""
    return _DECLARATION.sub(lambda m: f"@{RECORD_SYMBOL} = {m.group(2) or ''}global ptr null{m.group(3)}", llir)


def format_report(record: WaitRecord) -> str:
    """The line printed for a filled record."""
    what = record.what.decode(errors="replace")
    return (f"triton_raw_ext: PE {record.me} waited {record.waited_ns // 1_000_000} ms for PE {record.peer}: "
            f"{what} at {record.flag:#x} is {record.seen}, expected >= {record.expected} (block {record.block}, "
            f"thread {record.thread}); trapping (the peer died or is stuck; the bound is TRITON_RAW_WAIT_TIMEOUT_S)")


class _Reporter:
    """The process's record and the thread that prints it once it is filled."""

    def __init__(self, cuda: ctypes.CDLL) -> None:
        host = ctypes.c_void_p()
        _check(cuda.cuMemHostAlloc(ctypes.byref(host), ctypes.sizeof(WaitRecord), _HOST_ALLOC_FLAGS),
               "cuMemHostAlloc of the wait record")
        self.record = WaitRecord.from_address(host.value)
        ctypes.memset(host.value, 0, ctypes.sizeof(WaitRecord))
        self.host = host.value
        self.printed = False
        self.lock = threading.Lock()
        threading.Thread(target=self._watch, name="triton_raw_ext wait reports", daemon=True).start()
        atexit.register(self.report)

    def report(self) -> bool:
        """Print the record if it is filled and not yet printed; whether it is printed now."""
        with self.lock:
            if not self.printed and self.record.ready:
                print(format_report(self.record), file=sys.stderr, flush=True)
                self.printed = True
            return self.printed

    def _watch(self) -> None:
        stop = threading.Event()
        while not self.report():
            stop.wait(POLL_S)


_reporter: _Reporter | None = None
_reporter_lock = threading.Lock()


def _check(status: int, what: str) -> None:
    if status != CUDA_SUCCESS:
        raise RuntimeError(f"triton_raw_ext: {what} failed with CUDA error {status}")


def print_pending() -> None:
    """Print this process's report now if a kernel has filled it and it is not printed yet; nothing
    otherwise. For code about to end the process without :mod:`atexit` (``os._exit``)."""
    if _reporter is not None:
        _reporter.report()


def point_module_at_record(cuda: ctypes.CDLL, module: int) -> None:
    """If the loaded CUmodule ``module`` defines ``triton_raw_wait_record_ptr``, store there the device
    address of this process's record (created on first use). The copy goes on a stream of its own that
    does not wait for the default stream, where a kernel may be waiting for a peer. If the driver
    refuses any step, the kernel runs without reports (its waits still trap) and a warning says why."""
    slot, size = ctypes.c_uint64(), ctypes.c_size_t()
    if cuda.cuModuleGetGlobal_v2(ctypes.byref(slot), ctypes.byref(size), ctypes.c_void_p(module),
                                 RECORD_SYMBOL.encode()) != CUDA_SUCCESS:
        return
    try:
        _store_record_address(cuda, slot)
    except RuntimeError as e:
        warnings.warn(f"{e}: this kernel's bounded waits will trap without printing their report", stacklevel=2)


def _store_record_address(cuda: ctypes.CDLL, slot: ctypes.c_uint64) -> None:
    global _reporter
    with _reporter_lock:
        if _reporter is None:
            _reporter = _Reporter(cuda)
        reporter = _reporter
    device = ctypes.c_uint64()
    _check(cuda.cuMemHostGetDevicePointer_v2(ctypes.byref(device), ctypes.c_void_p(reporter.host), 0),
           "cuMemHostGetDevicePointer of the wait record")
    stream = ctypes.c_void_p()
    _check(cuda.cuStreamCreate(ctypes.byref(stream), _STREAM_NON_BLOCKING), "cuStreamCreate")
    try:
        _check(cuda.cuMemcpyHtoDAsync_v2(slot, ctypes.byref(device), ctypes.sizeof(device), stream),
               f"setting {RECORD_SYMBOL}")
        _check(cuda.cuStreamSynchronize(stream), f"setting {RECORD_SYMBOL}")
    finally:
        cuda.cuStreamDestroy_v2(stream)
