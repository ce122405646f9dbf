"""``triton-raw-opt``: run the plugin's IR passes on one file, like LLVM's ``opt``.

Usage::

    triton-raw-opt INPUT [-o OUT] [--passes=abi-wrappers,unique-symbols,triton-compat]
                   [--prefix=P] [--keep=a,b] [--keep-globals=x,y] [--library=FILE]
                   [--functions=f,g] [--for-triton=3.6] [--arch=90] [--verify-triton]

Contract:

* ``INPUT`` (and ``--library``) is textual IR (``.ll``), bitcode (``.bc``) or CUDA (``.cu``); a
  ``.cu`` file is compiled for ``sm_<arch>`` by :func:`triton_raw_ext.cu_compiler.compile_to_module`,
  the plugin's own clang command, with no pass applied, as for ``library="nvshmem"`` when it
  includes NVSHMEM's own headers.
* The passes named in ``--passes`` run in order: the module passes on one llvmlite module, then the
  text passes (``pin-device-transport``, ``triton-compat``) on its text, which must therefore be named
  after every module pass. Without ``--passes`` the input is printed as parsed.
* Each pass declares its name, options and report in its module (:mod:`triton_raw_ext.passes.tool_pass`);
  the tool takes every pass and option from there: ``--prefix`` (unique-symbols, required),
  ``--keep`` (extract-needed, required) and ``--keep-globals`` (extract-needed, link-library),
  ``--library`` (link-library, required), ``--functions`` (abi-wrappers, optional), ``--for-triton``
  (triton-compat: the Triton version to prepare the IR for, default the installed one). A missing
  required option, or an option no chosen pass uses, is an error.
* The result goes to stdout or ``-o``. Each pass's findings (wrapped functions, functions it
  cannot wrap, renamed and linked symbols) go to stderr as ``triton-raw-opt: <pass>: ...`` lines.
* ``--verify-triton`` has Triton's own LLVM parse the result and generate PTX from it, in a child
  process (Triton's LLVM aborts the process on a parse error).
* Exit status: 0 on success; 1 when a pass fails or ``--verify-triton`` rejects the result; 2 for
  usage errors (unknown pass, missing or unused option, unreadable input). Errors are one message on
  stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm
import triton

from triton_raw_ext.passes import TOOL_PASSES
from triton_raw_ext.passes.module_io import parse
from triton_raw_ext.passes.tool_pass import Option, ToolContext, ToolPass

from .errors import RawCompileError

TOOL = "triton-raw-opt"
INPUT_SUFFIXES = (".ll", ".bc", ".cu")
PASSES: dict[str, ToolPass] = {tool.name: tool for tool in TOOL_PASSES}
# The installed Triton's own LLVM: parse the text and run the NVPTX backend, as make_ptx does.
_VERIFY_SCRIPT = """
import sys
from triton_raw_ext.triton_version import translate_to_asm
translate_to_asm(sys.stdin.read(), sys.argv[1], "+ptx86")
"""


class UsageError(Exception):
    """The command line or the input file is wrong (exit status 2)."""


class PassError(Exception):
    """A pass or the Triton check failed on a valid command line (exit status 1)."""


def _pass_options() -> dict[str, tuple[Option, list[str]]]:
    """Every pass option by name, with the passes that declare it (in the passes' order)."""
    options: dict[str, tuple[Option, list[str]]] = {}
    for tool in TOOL_PASSES:
        for option in tool.options:
            known, users = options.setdefault(option.name, (option, []))
            if known.parse is not option.parse:
                raise TypeError(f"--{option.name} is read differently by {users[0]} and {tool.name}")
            users.append(tool.name)
    return options


@dataclass(frozen=True)
class Options:
    input: Path
    output: Path | None
    passes: list[str]
    values: dict[str, Any]  # pass option name -> parsed value, None when not given
    arch: int
    verify_triton: bool

    @property
    def cpu(self) -> str:
        from triton.backends.nvidia.compiler import sm_arch_from_capability

        return sm_arch_from_capability(self.arch)


def _argument_type(parse: Any) -> Any:
    """``parse`` for argparse: its ValueError becomes the message argparse prints."""

    def read(value: str) -> Any:
        try:
            return parse(value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from e

    return read


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=TOOL, description="Run triton-raw-ext IR passes on one file.")
    p.add_argument("input", type=Path, help="input file: .ll, .bc or .cu")
    p.add_argument("-o", dest="output", type=Path, help="output file (default: stdout)")
    p.add_argument("--passes", default="", help=f"comma-separated passes, in order: {', '.join(PASSES)}")
    for name, (option, users) in _pass_options().items():
        p.add_argument(f"--{name}", dest=name, metavar=name.replace("-", "_").upper(),
                       type=_argument_type(option.parse), help=f"{', '.join(users)}: {option.help}")  # fmt: skip
    p.add_argument("--arch", type=int, default=90, help="SM number for .cu, link-library and the check")
    p.add_argument("--verify-triton", action="store_true", help="check that Triton's LLVM reads the result")
    return p


def _options(argv: list[str] | None) -> Options:
    """Parse and check the command line; argparse itself exits 2 on malformed arguments."""
    ns = vars(_parser().parse_args(argv))
    passes = [n.strip() for n in ns["passes"].split(",") if n.strip()]
    unknown = [p for p in passes if p not in PASSES]
    if unknown:
        raise UsageError(f"unknown pass {', '.join(unknown)}; known passes: {', '.join(PASSES)}")
    for i, name in enumerate(passes):
        later_module_passes = [p for p in passes[i + 1:] if PASSES[p].run is not None]
        if PASSES[name].rewrite_text is not None and later_module_passes:
            raise UsageError(f"{name} works on text: name it after every module pass in --passes "
                             f"(here before {', '.join(later_module_passes)})")
    for name in passes:
        for option in PASSES[name].options:
            if option.required and ns[option.name] is None:
                raise UsageError(f"pass {name} needs --{option.name}")
    values = {}
    for name, (_, users) in _pass_options().items():
        values[name] = ns[name]
        if ns[name] is not None and not set(users) & set(passes):
            raise UsageError(f"--{name} is only used by {' and '.join(users)}, which --passes does not name")
    return Options(ns["input"], ns["output"], passes, values, ns["arch"], ns["verify_triton"])


def read_module(path: Path, arch: int) -> llvm.ModuleRef:
    """Load a ``.ll``/``.bc`` file, or compile a ``.cu`` file for ``sm_<arch>`` as the plugin does."""
    if path.suffix not in INPUT_SUFFIXES:
        raise UsageError(f"{path}: unknown file type {path.suffix or '(none)'}; use a .ll, .bc or .cu file")
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    try:
        if path.suffix == ".cu":
            from .cu_compiler import CompileSpec, compile_to_module, source_files
            from .nvshmem_headers import includes_nvshmem_headers

            spec = CompileSpec(path.resolve())
            if includes_nvshmem_headers(source_files(spec)):
                spec = CompileSpec(spec.source, library="nvshmem")
            return compile_to_module(spec, arch)
        return parse(path.read_bytes(), str(path))
    except (ValueError, RawCompileError) as e:
        raise UsageError(str(e)) from e


def verify_triton(text: str, cpu: str) -> None:
    """Raise :class:`PassError` unless the installed Triton's LLVM parses ``text`` and compiles it to PTX."""
    command = [sys.executable, "-c", _VERIFY_SCRIPT, cpu]
    proc = subprocess.run(command, input=text, capture_output=True, text=True)
    if proc.returncode != 0:
        detail = "\n".join(ln for ln in proc.stderr.splitlines() if ln.strip()) or f"exit {proc.returncode}"
        raise PassError(f"Triton's LLVM cannot read this IR: {detail}\nrun the triton-compat pass last to make "
                        f"LLVM 22.1 output readable by Triton {triton.__version__}")


def run(opts: Options) -> str:
    """Load the input, run the passes and return the resulting IR text."""
    mod = read_module(opts.input, opts.arch)
    context = ToolContext(opts.arch, opts.cpu, lambda path: read_module(path, opts.arch))
    text = None  # the module's text once the text passes start (they come last: checked with the command line)
    for name in opts.passes:
        tool = PASSES[name]
        values = {option.name: opts.values[option.name] for option in tool.options}
        try:
            if tool.rewrite_text is not None:
                text, report = tool.rewrite_text(text or str(mod).rstrip("\n") + "\n", values)
            else:
                report = tool.run(mod, values, context)
        except ValueError as e:
            raise PassError(str(e)) from e
        for line in report:
            print(f"{TOOL}: {name}: {line}", file=sys.stderr)
    if text is None:
        text = str(mod).rstrip("\n") + "\n"
    if opts.verify_triton:
        verify_triton(text, opts.cpu)
    return text


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns the exit status (see the module docstring)."""
    try:
        opts = _options(argv)
        text = run(opts)
    except UsageError as e:
        print(f"{TOOL}: error: {e}", file=sys.stderr)
        return 2
    except PassError as e:
        print(f"{TOOL}: error: {e}", file=sys.stderr)
        return 1
    if opts.output is None or str(opts.output) == "-":
        sys.stdout.write(text)
    else:
        try:
            opts.output.write_text(text)
        except OSError as e:
            print(f"{TOOL}: error: cannot write {opts.output}: {e.strerror}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
