"""Settings a user may change from Python; each defaults to its environment variable.

``triton_raw_ext.knobs.clang = "/opt/llvm/bin/clang"`` is the same as ``TRITON_RAW_CLANG=...``;
``knobs.tool_timeout_s`` (``TRITON_RAW_TOOL_TIMEOUT_S``) bounds every clang, nvcc, llvm-link, ptxas and
nvlink run.
"""

from __future__ import annotations

import os
import subprocess


class _Knobs:
    """Attribute access reads the override if set, else the environment variable."""

    _env = {"clang": "TRITON_RAW_CLANG", "llvm_link": "TRITON_RAW_LLVM_LINK", "cache_dir": "TRITON_RAW_CACHE_DIR",
            "tool_timeout_s": "TRITON_RAW_TOOL_TIMEOUT_S", "nvlink": "TRITON_RAW_NVLINK"}

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
        from .toolchain import find_clang, find_llvm_link, find_nvlink

        find_clang.cache_clear()
        find_llvm_link.cache_clear()
        find_nvlink.cache_clear()


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
