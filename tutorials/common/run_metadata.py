"""What a run ran on and how it was started: the metadata every benchmark and GPU script records.

Contract: :func:`run_metadata` returns ``date`` (UTC, ISO 8601 to the second), ``command`` (this
process's command line as it was typed, ``python -m`` included), ``git_head`` (the checkout's commit,
None outside a git checkout), ``host`` (CPU model, cores, platform), ``gpus`` (:func:`gpus`) and
``versions`` (:func:`versions`). Nothing here raises or initialises CUDA: what cannot be found is
recorded as such, since a run's results must be written even then.

``python -m tutorials.common.run_metadata`` prints :func:`versions` as one JSON line: the GPU suite
runner runs it in its steps' environment, where the plugin is installed.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def gpus() -> list[str]:
    """One "name, driver version" line per GPU nvidia-smi lists ([] when it cannot run)."""
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        ).stdout.strip().splitlines()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []


def versions() -> dict[str, str]:
    """Python, torch, CUDA (torch's), Triton, the plugin and the NVSHMEM it finds; on a failure what was
    found before it, and the error."""
    found = {"python": platform.python_version()}
    try:
        import torch

        found.update(torch=torch.__version__, cuda=str(torch.version.cuda))
        import triton

        found["triton"] = triton.__version__
        import triton_raw_ext
        from triton_raw_ext.nvshmem_install import find_nvshmem

        found["triton_raw_ext"] = triton_raw_ext.__version__
        nvshmem = find_nvshmem(required=False)
        found["nvshmem"] = nvshmem.version_str if nvshmem else "not installed"
    except Exception as exc:  # noqa: BLE001 - recorded, not raised
        found["error"] = repr(exc)
    return found


def git_head() -> str | None:
    """The commit the repository's checkout is at; None without git or outside a checkout."""
    try:
        done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_metadata(command: Sequence[str] | None = None, found_versions: dict[str, str] | None = None) -> dict[str, Any]:
    """The metadata of this run (module docstring); ``command`` and ``found_versions`` replace this
    process's own, for a runner that records the command it was given and the versions its steps see."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(command if command is not None else sys.orig_argv),
        "git_head": git_head(),
        "host": {"cpu": _cpu_model(), "cores": os.cpu_count(), "platform": platform.platform()},
        "gpus": gpus(),
        "versions": found_versions if found_versions is not None else versions(),
    }


if __name__ == "__main__":
    print(json.dumps(versions()))
