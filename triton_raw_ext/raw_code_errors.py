"""Errors in raw code that show only once it is linked into a kernel, reported against the `.cu`.

Two kinds get past clang: a call of a function that is declared but that nothing linked into the
kernel defines (an ``extern`` prototype without a definition), and PTX that ptxas rejects (an
``asm`` statement with a bad instruction). Triton reports both as "Internal Triton PTX codegen
error" with the whole PTX, naming neither the `.cu` nor the function. Here they become a
:class:`RawCompileError` that names the `.cu`, the line, the function and the fix.

Contract: :func:`check_undefined_calls` runs on the kernel IR after every library is linked (raw
libraries, ``libs=``, libdevice, NVSHMEM); only a function that a raw library declares is its
error, and the functions ptxas resolves itself (``printf``, ``assert``, ``malloc``, ``free``) are
not undefined. :func:`ptxas_errors_in_raw_code` wraps Triton's ptxas stage; it translates an error
only when the PTX line ptxas names follows a ``.loc`` into a file of the raw code's line tables
(see :func:`triton_raw_ext.cu_compiler.line_info`), and then holds back Triton's printout of the
PTX; every other error, and all output, is Triton's as before. Without line tables
(``TRITON_DISABLE_LINE_INFO``) ptxas errors cannot be placed and stay Triton's.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from triton.runtime.errors import PTXASError

from .cu_compiler import SIGNATURE_FILE, source_symbol
from .cxx_names import demangle, describe
from .debug_metadata import MetadataNodes, SourcePlace
from .errors import RawCompileError

PTXAS_RESOLVES = frozenset({"vprintf", "__assertfail", "malloc", "free"})  # printf, assert, malloc, free
_DECLARED = re.compile(r"^declare [^@\n]*@([\w.$]+)\(", re.MULTILINE)
_PTXAS_ERROR = re.compile(r", line (\d+); error\s*:\s*(.*)")
_PTX_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', re.MULTILINE)
_PTX_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)")


def _source_of(library: Path) -> str:
    """The `.cu` a linked library belongs to: its raw library's source (``libs=`` libraries included)."""
    return json.loads((library.parent / SIGNATURE_FILE).read_text())["source"]


def _calls_of(symbol: str, ir_text: str) -> Iterator[tuple[str, str | None]]:
    """(defining function, ``!dbg`` reference or None) of each call of ``symbol`` in ``ir_text``."""
    function = None
    call = re.compile(rf"\bcall\b[^@\n]*@{re.escape(symbol)}\(")
    for line in ir_text.splitlines():
        if line.startswith("define "):
            function = re.search(r"@([\w.$]+)\(", line).group(1)
        elif line.startswith("}"):
            function = None
        elif function is not None and call.search(line):
            dbg = re.search(r"!dbg (!\d+)", line)
            yield function, dbg.group(1) if dbg else None


def _undefined_call_error(symbol: str, library: Path, ir_text: str) -> RawCompileError:
    source = _source_of(library)
    nodes = MetadataNodes(ir_text)
    callers = []
    for function, dbg in _calls_of(symbol, ir_text):
        place = nodes.place(dbg)
        callers.append(f"{place.function} at {place.path}:{place.line}" if place
                       else f"{describe(source_symbol(function))} in {source}")
    where = f"raw function {callers[0]}" if callers else f"the raw code of {source}"
    name = demangle(symbol) or symbol
    return RawCompileError(
        f"{where} calls {describe(symbol)}, which is declared but defined nowhere in the kernel (not in {source}, "
        f"its libs=, libdevice nor NVSHMEM); define {name} in {Path(source).name} or a file it includes, or give "
        f"the device library that defines it with @dialect(libs=[...])"
    )


def check_undefined_calls(llir: str, libraries: Iterable[Path], linked_later: Iterable[str] = ()) -> None:
    """Raise :class:`RawCompileError` if kernel IR ``llir`` still declares a function that one of
    ``libraries`` (the raw and ``libs=`` libraries linked into it) declares and ptxas cannot resolve,
    other than ``linked_later`` (NVSHMEM collectives the `cubin` stage links as objects).

    The message names the raw function that calls it with its `.cu` line (with line tables), the
    symbol and the fix.
    """
    declared = {name for name in _DECLARED.findall(llir) if not name.startswith("llvm.")}
    undefined = declared - PTXAS_RESOLVES - set(linked_later)
    if not undefined:
        return
    for library in libraries:
        text = library.read_text()
        declared = set(_DECLARED.findall(text)) & undefined
        if declared:
            raise _undefined_call_error(min(declared), library, text)


def _place_in_ptx(ptx_lines: list[str], index: int) -> tuple[str, int] | None:
    """The (file, line) of the last ``.loc`` with a line number at or before PTX line ``index``
    (0-based), or None. (Line 0 is code of no particular line.)"""
    files = {number: os.path.normpath(path) for number, path in _PTX_FILE.findall("\n".join(ptx_lines))}
    for line in reversed(ptx_lines[: index + 1]):
        loc = _PTX_LOC.match(line)
        if loc and loc.group(2) != "0":
            path = files.get(loc.group(1))
            return (path, int(loc.group(2))) if path else None
    return None


def _in_inline_asm(ptx_lines: list[str], index: int) -> bool:
    for line in reversed(ptx_lines[:index]):
        if "// begin inline asm" in line:
            return True
        if "// end inline asm" in line:
            return False
    return False


def raw_ptxas_error(ptx: str, ptxas_log: str, libraries: Iterable[Path]) -> RawCompileError | None:
    """The :class:`RawCompileError` for ptxas's ``ptxas_log`` on ``ptx`` if the first PTX line it
    rejects was compiled from the raw code of ``libraries``, else None."""
    errors = _PTXAS_ERROR.findall(ptxas_log)
    if not errors:
        return None
    index = int(errors[0][0]) - 1
    ptx_lines = ptx.splitlines()
    found = _place_in_ptx(ptx_lines, index) if index < len(ptx_lines) else None
    if found is None:
        return None
    path, line = found
    starts: list[SourcePlace] = []
    for library in libraries:
        starts += [s for s in MetadataNodes(library.read_text()).function_starts() if s.path == path]
    starts = [s for s in starts if s.line <= line]
    if not starts:
        return None  # not a line of raw code: Triton's own, or a file no raw library describes
    function = max(starts, key=lambda s: s.line).function
    messages = "; ".join(dict.fromkeys(message.strip() for number, message in errors if int(number) == index + 1))
    found_target = re.search(r"^\s*\.target\s+(\w+)", ptx, re.MULTILINE)
    target = found_target.group(1) if found_target else "the target"
    fix = (f"fix the PTX of the asm statement at {path}:{line}" if _in_inline_asm(ptx_lines, index)
           else f"change the code at {path}:{line}: ptxas does not accept what it compiles to for {target}")
    return RawCompileError(
        f"raw function {function} at {path}:{line}: ptxas ({target}) rejects the PTX it compiles to: {messages}\n"
        f"  PTX line {index + 1}: {ptx_lines[index].strip()}\n{fix}"
    )


class _ThreadOutput(io.TextIOBase):
    """``sys.stdout`` while Triton's ptxas stage runs: this thread's output is held, others' pass."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.thread, self.held = stream, threading.get_ident(), io.StringIO()

    def write(self, text: str) -> int:
        return (self.held if threading.get_ident() == self.thread else self.stream).write(text)

    def flush(self) -> None:
        self.stream.flush()


@contextlib.contextmanager
def ptxas_errors_in_raw_code(ptx: str, libraries: list[Path]) -> Iterator[None]:
    """Run Triton's ptxas stage on ``ptx`` inside this; a ptxas error in the raw code of ``libraries``
    becomes :func:`raw_ptxas_error`'s :class:`RawCompileError` (from the PTXASError) and Triton's
    printout of the whole PTX is dropped. Anything else passes as it was, output included."""
    if not libraries:
        yield
        return
    output = _ThreadOutput(sys.stdout)
    sys.stdout, replay = output, True
    try:
        yield
    except PTXASError as e:
        error = raw_ptxas_error(ptx, e.error_message or "", libraries)
        if error is None:
            raise
        replay = False
        raise error from e
    finally:
        if sys.stdout is output:
            sys.stdout = output.stream
        if replay:
            output.stream.write(output.held.getvalue())
