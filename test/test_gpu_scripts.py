"""scripts/gpu/stacks.sh: ``timeout_with_stacks`` on CPU, with real processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

STACKS = Path(__file__).resolve().parent.parent / "scripts" / "gpu" / "stacks.sh"

pytestmark = pytest.mark.skipif(
    shutil.which("timeout") is None or shutil.which("pgrep") is None, reason="needs coreutils timeout and pgrep"
)


def _run(command: str) -> subprocess.CompletedProcess:
    script = f'source "{STACKS}"\n{command}\necho "rc=$?"\n'
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)


def test_a_hung_worker_prints_its_python_stack_and_the_limit_is_reported():
    hung = f"{sys.executable} -c 'import time\ndef stuck_in_here():\n    time.sleep(120)\nstuck_in_here()'"
    # a launcher with a child, like torchrun and its workers: the leaf gets the signal
    done = _run(f"timeout_with_stacks 8 bash -c \"{hung}; echo launcher-exit\"")
    out = done.stdout + done.stderr
    assert "timeout_with_stacks: still running" in out, out
    assert "stuck_in_here" in out, out  # faulthandler's traceback of the hung Python process
    assert "rc=124" in out, out


def test_a_command_that_ends_keeps_its_exit_status():
    done = _run("timeout_with_stacks 20 bash -c 'echo working; exit 3'")
    assert "working" in done.stdout and "rc=3" in done.stdout, done.stdout + done.stderr
    assert "still running" not in done.stdout
