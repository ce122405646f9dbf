"""What a GPU run ran on, for the summaries the GPU scripts write.

``python3 -m scripts.gpu.machine`` prints the versions as one JSON line (the suite runner runs it with the
steps' environment, where the plugin is importable).
"""

from __future__ import annotations

import json
import subprocess


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
    """torch, triton, CUDA and NVSHMEM versions; on failure what is known plus the error (a summary
    must still be written)."""
    found: dict[str, str] = {}
    try:
        import torch
        import triton

        found.update(torch=torch.__version__, triton=triton.__version__, cuda=str(torch.version.cuda))
        from triton_raw_ext.nvshmem_install import find_nvshmem

        found["nvshmem"] = ".".join(map(str, find_nvshmem().version))
    except Exception as exc:  # noqa: BLE001 - recorded, not raised
        found["error"] = repr(exc)
    return found


if __name__ == "__main__":
    print(json.dumps(versions()))
