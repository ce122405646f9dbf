"""Settings a user may change from Python; each defaults to its environment variable.

``triton_raw_ext.knobs.clang = "/opt/llvm/bin/clang"`` is the same as ``TRITON_RAW_CLANG=...``;
``knobs.tool_timeout_s`` (``TRITON_RAW_TOOL_TIMEOUT_S``) bounds every clang, nvcc, llvm-link, ptxas and
nvlink run; ``knobs.nvlink`` (``TRITON_RAW_NVLINK``) is the nvlink that links NVSHMEM's collectives;
``knobs.nvshmem_transports`` (``TRITON_RAW_NVSHMEM_TRANSPORTS``) says which NVSHMEM device transports
kernels are compiled for (:func:`nvshmem_transports`);
``knobs.wait_timeout_s`` (``TRITON_RAW_WAIT_TIMEOUT_S``) bounds the device-side waits on peers
(``<triton_raw/bounded_wait.h>``).
"""

from __future__ import annotations

import os
import subprocess


class _Knobs:
    """Attribute access reads the override if set, else the environment variable."""

    _env = {"clang": "TRITON_RAW_CLANG", "llvm_link": "TRITON_RAW_LLVM_LINK", "cache_dir": "TRITON_RAW_CACHE_DIR",
            "tool_timeout_s": "TRITON_RAW_TOOL_TIMEOUT_S", "nvshmem_transports": "TRITON_RAW_NVSHMEM_TRANSPORTS",
            "wait_timeout_s": "TRITON_RAW_WAIT_TIMEOUT_S", "nvlink": "TRITON_RAW_NVLINK"}

    def __init__(self) -> None:
        self._overrides: dict[str, str | None] = {}

    def __getattr__(self, name: str) -> str | None:
        if name not in _Knobs._env:
            raise AttributeError(f"unknown knob {name!r}; known: {sorted(_Knobs._env)}")
        if name in self._overrides:
            return self._overrides[name]
        return os.environ.get(_Knobs._env[name]) or None

    def __setattr__(self, name: str, value: str | None) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        if name not in _Knobs._env:
            raise AttributeError(f"unknown knob {name!r}; known: {sorted(_Knobs._env)}")
        if value is None:
            self._overrides.pop(name, None)  # back to the environment variable
        else:
            self._overrides[name] = value


knobs = _Knobs()
DEFAULT_TOOL_TIMEOUT_S = 600.0


def tool_timeout_s() -> float:
    """Seconds an external tool (clang, nvcc, llvm-link) may run before it is killed: ``knobs.tool_timeout_s``
    (``TRITON_RAW_TOOL_TIMEOUT_S``), default 600."""
    value = knobs.tool_timeout_s
    if value is None:
        return DEFAULT_TOOL_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if seconds <= 0:
        raise ValueError(f"TRITON_RAW_TOOL_TIMEOUT_S={value!r}: give a positive number of seconds")
    return seconds


NVSHMEM_TRANSPORTS = ("all", "proxy")
_NVSHMEM_FALSE = ("", "0", "n", "no", "f", "false", "off")


def nvshmem_transports() -> str:
    """``"all"`` or ``"proxy"``: whether NVSHMEM device code keeps the device-initiated network
    transports (IBGDA, GPUNetIO GDAKI) or only the proxy one. ``knobs.nvshmem_transports`` when set;
    else ``"all"`` if NVSHMEM's own environment enables one of them (``NVSHMEM_IB_ENABLE_IBGDA``,
    ``NVSHMEM_GPUNETIO_ENABLE_GDAKI``, ``NVSHMEM_REMOTE_TRANSPORT=gpunetio``), else ``"proxy"``."""
    value = knobs.nvshmem_transports
    if value is not None:
        if value not in NVSHMEM_TRANSPORTS:
            raise ValueError(f"TRITON_RAW_NVSHMEM_TRANSPORTS={value!r}: use one of {', '.join(NVSHMEM_TRANSPORTS)}")
        return value
    device_initiated = any(
        os.environ.get(name, "").strip().lower() not in _NVSHMEM_FALSE
        for name in ("NVSHMEM_IB_ENABLE_IBGDA", "NVSHMEM_GPUNETIO_ENABLE_GDAKI")
    ) or os.environ.get("NVSHMEM_REMOTE_TRANSPORT", "").strip().lower() in ("gpunetio", "ibgda")
    return "all" if device_initiated else "proxy"


DEFAULT_WAIT_TIMEOUT_S = 20.0
MAX_WAIT_TIMEOUT_MS = 2**31 - 1  # the kernels take the bound as an int32


def wait_timeout_ms() -> int:
    """The bound of a device-side wait on a peer (``<triton_raw/bounded_wait.h>``), in milliseconds:
    ``knobs.wait_timeout_s`` (``TRITON_RAW_WAIT_TIMEOUT_S``, seconds), default 20 s. Kernels that wait
    take it as an int32 argument; operators read it when they are built."""
    # A kernel argument, not a .cu define: one compiled kernel serves every bound, so changing the bound
    # neither recompiles nor can load a kernel cached for another bound.
    value = knobs.wait_timeout_s
    if value is None:
        return round(DEFAULT_WAIT_TIMEOUT_S * 1000)
    try:
        ms = round(float(value) * 1000)
    except (ValueError, OverflowError):
        ms = 0
    if not 1 <= ms <= MAX_WAIT_TIMEOUT_MS:
        raise ValueError(f"TRITON_RAW_WAIT_TIMEOUT_S={value!r}: give a number of seconds from 0.001 to "
                         f"{MAX_WAIT_TIMEOUT_MS // 1000}")
    return ms


def run_tool(tool: str, command: list[str], subject: str, error: type[Exception]) -> subprocess.CompletedProcess[str]:
    """Run ``command`` (external ``tool``, output captured as text) bounded by :func:`tool_timeout_s`; a
    run past it is stopped and raises ``error`` naming the tool, ``subject`` (what it worked on) and
    the setting."""
    limit = tool_timeout_s()
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired as e:
        raise error(f"{tool} did not finish within {limit:g} s {subject} (it was stopped; raise "
                    f"TRITON_RAW_TOOL_TIMEOUT_S if it needs longer): {' '.join(command)}") from e
