"""scripts.gpu.peer_fault on CPU: it skips cleanly without a GPU, and it reads the report line that
<triton_raw/bounded_wait.h> prints (the format string compiled into the kernels)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from conftest import ROOT, child_env, has_gpu

from scripts.gpu import peer_fault

HEADER = ROOT / "triton_raw_ext" / "include" / "triton_raw" / "bounded_wait.h"


def _printed(fmt: str, *values: object) -> str:
    """What the device's printf writes for the C format ``fmt`` (the conversions the report uses)."""
    return re.sub(r"%(?:llu|lld|u|d|s|p)", "{}", fmt).format(*values)


def test_the_report_parser_reads_the_headers_line():
    literals = re.search(r'printf\(((?:\s*"(?:[^"\\]|\\.)*")+)', HEADER.read_text()).group(1)
    c_format = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', literals))
    line = _printed(c_format.replace("\\n", ""), 0, 5012, 1, "allreduce signal", "0x7f3a00000040", 3, 4, 17, 0)
    match = peer_fault.REPORT.search("noise before\n" + line + "\nnoise after")
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
