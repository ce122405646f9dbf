"""triton_raw_ext.wait_reports on CPU: the record's layout against bounded_wait.h, the pointer's
definition in a kernel's LLVM IR, and the line a filled record prints (once; also when the runtime
ends the process with os._exit). The device side is checked in the PTX of every kernel that waits
(conftest.assert_bounded_wait); a wait that expires on the GPU is scripts/gpu/peer_fault.py's."""

from __future__ import annotations

import ctypes
import re
import subprocess
import sys
import threading
from pathlib import Path

from triton_raw_ext import wait_reports
from triton_raw_ext.cu_compiler import INCLUDE_DIR
from triton_raw_ext.wait_reports import RECORD_SYMBOL, WaitRecord, define_record_pointer, format_report

HEADER = (INCLUDE_DIR / "triton_raw" / "bounded_wait.h").read_text()


def test_the_record_has_the_layout_of_the_header():
    struct = re.search(r"struct triton_raw_wait_record \{(.*?)\};", HEADER, re.DOTALL).group(1)
    names = [n for decl in struct.split(";") for n in re.findall(r"(\w+)(?:\[\d+\])?\s*(?:,|$)", decl.strip())]
    assert names == [name for name, _ in WaitRecord._fields_]
    size = int(re.search(r"sizeof\(struct triton_raw_wait_record\) == (\d+)", HEADER).group(1))
    assert ctypes.sizeof(WaitRecord) == size


def test_the_declared_pointer_is_defined_null_and_visible():
    declared = f"@{RECORD_SYMBOL} = external dso_local local_unnamed_addr addrspace(1) global ptr, align 8\n"
    defined = define_record_pointer(f"; kernel\n{declared}@other = global i32 0\n")
    assert f"@{RECORD_SYMBOL} = addrspace(1) global ptr null, align 8\n" in defined
    assert "external" not in defined and "@other = global i32 0" in defined
    assert define_record_pointer("@other = external global ptr, align 8\n") == "@other = external global ptr, align 8\n"


def _record(**fields) -> WaitRecord:
    values = {"me": 1, "peer": 0, "is_signed": 1, "block": 7, "thread": 32, "waited_ns": 5_000_123_456,
              "flag": 0x7F00_1234_5678, "seen": 3, "expected": 4, "what": b"allreduce signal"}  # fmt: skip
    record = WaitRecord()
    for name, value in {**values, **fields}.items():
        setattr(record, name, value)
    return record


def test_a_filled_record_prints_the_line_of_the_report():
    line = format_report(_record())
    assert line == ("triton_raw_ext: PE 1 waited 5000 ms for PE 0: allreduce signal at 0x7f0012345678 is 3, expected "
                    ">= 4 (block 7, thread 32); trapping (the peer died or is stuck; the bound is "
                    "TRITON_RAW_WAIT_TIMEOUT_S)")


def test_the_report_is_printed_once_and_only_when_ready(capsys):
    reporter = object.__new__(wait_reports._Reporter)
    reporter.record, reporter.printed, reporter.lock = _record(ready=0), False, threading.Lock()
    assert not reporter.report() and capsys.readouterr().err == ""
    reporter.record.ready = 1
    assert reporter.report() and reporter.report()
    assert capsys.readouterr().err.count("triton_raw_ext: PE 1 waited 5000 ms for PE 0") == 1


# A PE whose watchdog ends it (os._exit, no atexit) right after one of its waits filled the record.
_ENDED_BY_WATCHDOG = """
import threading, time
import torch.distributed as dist
from triton_raw_ext import wait_reports
from triton_raw_ext.runtime.watchdog import PeerWatchdog
from test_wait_reports import _record

reporter = object.__new__(wait_reports._Reporter)  # the record a trapped kernel filled; no polling thread
reporter.record, reporter.printed, reporter.lock = _record(ready=1), False, threading.Lock()
wait_reports._reporter = reporter
store = dist.HashStore()
PeerWatchdog(store, "job", rank=1, size=2, poll_s=0.01).start()
PeerWatchdog(store, "job", rank=0, size=2).post_abort("raised RuntimeError")
time.sleep(30)
"""


def test_a_pending_report_is_printed_before_the_watchdog_ends_the_process():
    from triton_raw_ext.runtime import PEER_FAILED_EXIT_CODE

    done = subprocess.run([sys.executable, "-c", _ENDED_BY_WATCHDOG], cwd=Path(__file__).parent, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == PEER_FAILED_EXIT_CODE, done.stderr
    report = done.stderr.find("triton_raw_ext: PE 1 waited 5000 ms for PE 0: allreduce signal")
    assert 0 <= report < done.stderr.index("is ending this process"), done.stderr
