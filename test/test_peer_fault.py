"""scripts.gpu.peer_fault on CPU: it skips cleanly without a GPU, and it reads the report line that
the plugin prints for an expired wait (triton_raw_ext.wait_reports)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, child_env, has_gpu

from scripts.gpu import peer_fault
from triton_raw_ext.wait_reports import WaitRecord, format_report


def test_the_report_parser_reads_the_printed_line():
    record = WaitRecord(ready=1, me=0, peer=1, is_signed=1, block=17, thread=0, waited_ns=5_012_000_000,
                        flag=0x7F3A00000040, seen=3, expected=4, what=b"allreduce signal")  # fmt: skip
    match = peer_fault.REPORT.search("noise before\n" + format_report(record) + "\nnoise after")
    assert match and match.groupdict() == {
        "me": "0", "waited_ms": "5012", "peer": "1", "what": "allreduce signal", "address": "0x7f3a00000040",
        "seen": "3", "expected": "4",
    }  # fmt: skip


@pytest.mark.skipif(has_gpu(), reason="checks the run without a GPU")
def test_without_a_gpu_it_skips_and_says_so(tmp_path):
    done = subprocess.run([sys.executable, "-m", "scripts.gpu.peer_fault", str(tmp_path)], cwd=ROOT, env=child_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "peer_fault: SKIP (no CUDA GPU visible)" in done.stdout
    doc = json.loads((tmp_path / "peer_fault.json").read_text())
    assert doc["skipped"] == "no CUDA GPU visible" and doc["steps"] == [] and doc["bound_s"] == 5.0
