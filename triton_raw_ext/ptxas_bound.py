"""Triton's ptxas run, bounded like the plugin's own tools for kernels with raw code.

Triton's NVIDIA backend runs ptxas with ``subprocess.run`` and no time limit, so ptxas stuck on a raw
function's inline PTX would hold the compile (and Triton's cache entry) for ever. :func:`install`
gives that backend module a ``subprocess`` whose ``run`` adds :func:`~.knobs.tool_timeout_s` in a
thread inside :func:`bounded` (the `cubin` stage of a kernel with raw code) and is the standard one
everywhere else; past the bound the ptxas process is killed and a :class:`RawCompileError` names
ptxas, the setting and the command.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import types
from collections.abc import Iterator

from .errors import RawCompileError
from .knobs import tool_timeout_s

_bound = threading.local()


class _BoundedSubprocess(types.ModuleType):
    """``subprocess`` with a default timeout on ``run`` where :func:`bounded` set one."""

    def __getattr__(self, name: str):
        return getattr(subprocess, name)

    @staticmethod
    def run(*args, **kwargs):
        limit = getattr(_bound, "seconds", None)
        if limit is not None:
            kwargs.setdefault("timeout", limit)
        return subprocess.run(*args, **kwargs)


def install() -> None:
    """Give Triton's NVIDIA backend module the bounded ``subprocess``; safe to call more than once."""
    from triton.backends.nvidia import compiler

    if not isinstance(compiler.subprocess, _BoundedSubprocess):
        compiler.subprocess = _BoundedSubprocess("subprocess")


@contextlib.contextmanager
def bounded() -> Iterator[None]:
    """Inside this, in this thread, Triton's ptxas runs at most ``tool_timeout_s()`` seconds."""
    limit = _bound.seconds = tool_timeout_s()
    try:
        yield
    except subprocess.TimeoutExpired as e:
        command = " ".join(map(str, e.cmd)) if isinstance(e.cmd, (list, tuple)) else str(e.cmd)
        raise RawCompileError(f"ptxas did not finish within {limit:g} s on a kernel with raw code (it was "
                              f"stopped; raise TRITON_RAW_TOOL_TIMEOUT_S if it needs longer): {command}") from e
    finally:
        _bound.seconds = None
