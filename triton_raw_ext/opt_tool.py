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
* The passes named in ``--passes`` run in order on one llvmlite module, then on its text the text
  passes: ``pin-device-transport``, then ``triton-compat``, which must be the last. Without
  ``--passes`` the input is printed as parsed.
* Pass options: ``--prefix`` (unique-symbols, required), ``--keep`` (extract-needed, required) and
  ``--keep-globals`` (extract-needed, link-library), ``--library`` (link-library, required),
  ``--functions`` (abi-wrappers, optional), ``--for-triton`` (triton-compat: the Triton version to
  prepare the IR for, default the installed one). An option no chosen pass uses is an error.
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

import llvmlite.binding as llvm
import triton

from triton_raw_ext.passes import PASSES
from triton_raw_ext.passes.module_io import parse

from .errors import RawCompileError
from .triton_version import LEGACY_LLVM, LEGACY_LLVM_BEFORE, SUPPORTED, parse_version

TOOL = "triton-raw-opt"
TEXT_PASS = "triton-compat"
TEXT_PASSES = ("pin-device-transport", TEXT_PASS)  # in the order they may run, after the module passes
INPUT_SUFFIXES = (".ll", ".bc", ".cu")
# option (argparse dest) -> passes that read it
OPTION_USERS = {
    "prefix": ("unique-symbols",),
    "keep": ("extract-needed",),
    "keep_globals": ("extract-needed", "link-library"),
    "library": ("link-library",),
    "functions": ("abi-wrappers",),
    "for_triton": ("triton-compat",),
}
REQUIRED_OPTIONS = {"unique-symbols": ("prefix",), "extract-needed": ("keep",), "link-library": ("library",)}
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


@dataclass(frozen=True)
class Options:
    input: Path
    output: Path | None
    passes: list[str]
    prefix: str | None
    keep: set[str] | None
    keep_globals: set[str] | None
    library: Path | None
    functions: list[str] | None
    for_triton: tuple[int, int] | None
    arch: int
    verify_triton: bool

    @property
    def cpu(self) -> str:
        from triton.backends.nvidia.compiler import sm_arch_from_capability

        return sm_arch_from_capability(self.arch)


def _names(value: str) -> list[str]:
    return [n.strip() for n in value.split(",") if n.strip()]


def _triton_version(value: str) -> tuple[int, int]:
    try:
        version = parse_version(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    if version not in SUPPORTED:
        raise argparse.ArgumentTypeError(f"{value}: supported Triton versions are "
                                         f"{', '.join(f'{a}.{b}' for a, b in SUPPORTED)}")
    return version


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=TOOL, description="Run triton-raw-ext IR passes on one file.")
    p.add_argument("input", type=Path, help="input file: .ll, .bc or .cu")
    p.add_argument("-o", dest="output", type=Path, help="output file (default: stdout)")
    p.add_argument("--passes", default="", help=f"comma-separated passes, in order: {', '.join(PASSES)}")
    p.add_argument("--prefix", help="unique-symbols: prefix for every defined symbol")
    p.add_argument("--keep", type=_names, help="extract-needed: functions to keep (with what they call)")
    p.add_argument("--keep-globals", type=_names, help="extract-needed, link-library: globals kept external")
    p.add_argument("--library", type=Path, help="link-library: library to link (.ll, .bc or .cu)")
    p.add_argument("--functions", type=_names, help="abi-wrappers: functions to wrap (default: exported)")
    p.add_argument("--for-triton", type=_triton_version, help="triton-compat: Triton version (default: installed)")
    p.add_argument("--arch", type=int, default=90, help="SM number for .cu, link-library and the check")
    p.add_argument("--verify-triton", action="store_true", help="check that Triton's LLVM reads the result")
    return p


def _options(argv: list[str] | None) -> Options:
    """Parse and check the command line; argparse itself exits 2 on malformed arguments."""
    ns = _parser().parse_args(argv)
    passes = _names(ns.passes)
    unknown = [p for p in passes if p not in PASSES]
    if unknown:
        raise UsageError(f"unknown pass {', '.join(unknown)}; known passes: {', '.join(PASSES)}")
    if TEXT_PASS in passes[:-1]:
        raise UsageError(f"{TEXT_PASS} works on text and must be the last pass in --passes")
    text_passes = [p for p in passes if p in TEXT_PASSES]
    if passes[len(passes) - len(text_passes):] != text_passes:
        raise UsageError(f"{' and '.join(TEXT_PASSES)} work on text: name them after every other pass")
    for name in passes:
        for option in REQUIRED_OPTIONS.get(name, ()):
            if getattr(ns, option) is None:
                raise UsageError(f"pass {name} needs --{option.replace('_', '-')}")
    for option, users in OPTION_USERS.items():
        if getattr(ns, option) is not None and not set(users) & set(passes):
            raise UsageError(f"--{option.replace('_', '-')} is only used by {' and '.join(users)}, "
                             f"which --passes does not name")
    return Options(ns.input, ns.output, passes, ns.prefix, set(ns.keep) if ns.keep is not None else None,
                   set(ns.keep_globals) if ns.keep_globals is not None else None, ns.library, ns.functions,
                   ns.for_triton, ns.arch, ns.verify_triton)


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


def _note(pass_name: str, message: str) -> None:
    print(f"{TOOL}: {pass_name}: {message}", file=sys.stderr)


def _run_module_pass(name: str, mod: llvm.ModuleRef, opts: Options) -> None:
    """Run module pass ``name`` on ``mod`` in place and report what it did on stderr."""
    if name == "abi-wrappers":
        report = PASSES[name](mod, opts.functions)
        for w in report.wrapped:
            _note(name, f"wrapped {w.target} as {', '.join(w.words or [w.symbol])}")
        for fn, reason in report.unsupported.items():
            _note(name, f"cannot wrap {fn}: {reason}")
    elif name == "unique-symbols":
        for old, new in PASSES[name](mod, opts.prefix).items():
            _note(name, f"renamed {old} to {new}")
    elif name == "extract-needed":
        missing = PASSES[name](mod, opts.keep, opts.keep_globals or frozenset())
        if missing:
            raise PassError(f"{name}: the module does not define {', '.join(missing)}; check --keep")
    elif name == "link-library":
        library = read_module(opts.library, opts.arch)
        for fn in PASSES[name](mod, library, opts.keep_globals or frozenset(), opts.cpu):
            _note(name, f"linked {fn}")


def verify_triton(text: str, cpu: str) -> None:
    """Raise :class:`PassError` unless the installed Triton's LLVM parses ``text`` and compiles it to PTX."""
    command = [sys.executable, "-c", _VERIFY_SCRIPT, cpu]
    proc = subprocess.run(command, input=text, capture_output=True, text=True)
    if proc.returncode != 0:
        detail = "\n".join(ln for ln in proc.stderr.splitlines() if ln.strip()) or f"exit {proc.returncode}"
        raise PassError(f"Triton's LLVM cannot read this IR: {detail}\nrun the {TEXT_PASS} pass last to make "
                        f"LLVM 22.1 output readable by Triton {triton.__version__}")


def run(opts: Options) -> str:
    """Load the input, run the passes and return the resulting IR text."""
    mod = read_module(opts.input, opts.arch)
    for name in opts.passes:
        if name not in TEXT_PASSES:
            try:
                _run_module_pass(name, mod, opts)
            except ValueError as e:
                raise PassError(str(e)) from e
    text = str(mod).rstrip("\n") + "\n"
    if "pin-device-transport" in opts.passes:
        text, pinned = PASSES["pin-device-transport"](text)
        _note("pin-device-transport", f"pinned {pinned} device transport load{'s' * (pinned != 1)} to the proxy")
    if opts.passes and opts.passes[-1] == TEXT_PASS:
        legacy = LEGACY_LLVM if opts.for_triton is None else opts.for_triton < LEGACY_LLVM_BEFORE
        text = PASSES[TEXT_PASS](text, legacy_llvm=legacy)
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
