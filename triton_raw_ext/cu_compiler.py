"""Compiling one `.cu` source into a raw library Triton can link: anonymous NVPTX bitcode, passes.

Pipeline for (source, arch): clang -> NVPTX bitcode with NVSHMEM references left as declarations
-> `abi-wrappers` -> `unique-symbols` (prefix from the source key) -> `triton-compat` -> ``lib.ll``
plus ``signature.json`` (exported functions, ABI types, purity, the element types of pointer
results, which integer results are unsigned, NVSHMEM symbols used, user libraries). The user
libraries of ``libs=`` go through `triton-compat` into ``user<i>.ll`` beside it, unrenamed: the raw
code calls them by name. Results are cached on disk under ``raw_lib/<key>`` and in memory.

clang compiles with ``-fgpu-rdc``: without it, clang makes an explicit template instantiation
internal (the device code would be the whole program) and drops it when nothing in the file calls
it. When an exported function returns a pointer or integers, the source is compiled a second time
with debug info and no optimisation, for :mod:`triton_raw_ext.debug_types` to read the pointee and
the signedness that the IR does not keep. A source with
``library="nvshmem"`` that includes NVSHMEM's own headers is compiled with them precompiled
(:mod:`triton_raw_ext.nvshmem_headers`). The bitcode has line tables unless Triton's own line
information is off (:func:`line_info`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import llvmlite.binding as llvm
from triton import knobs as triton_knobs

from triton_raw_ext.passes import abi_wrappers, triton_compat, unique_symbols
from triton_raw_ext.passes.abi_wrappers import SCALAR_BITS, WrappedFunction
from triton_raw_ext.passes.module_io import declared_functions, load

from .cache import digest, get_or_build, write_atomic
from .debug_types import pointee_types, result_leaves
from .errors import RawCompileError
from .knobs import run_tool
from .nvshmem_headers import includes_nvshmem_headers, precompiled_header
from .nvshmem_install import NVSHMEM_PREFIXES, find_nvshmem
from .toolchain import find_clang, find_cuda_headers

INCLUDE_DIR = Path(__file__).parent / "include"
_QUOTE_INCLUDE = re.compile(rb'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


@dataclass(frozen=True)
class CompileSpec:
    """Everything that decides what a `.cu` file compiles to, except the target SM."""

    source: Path
    clang_flags: tuple[str, ...] = ()
    include_dirs: tuple[Path, ...] = ()
    defines: tuple[str, ...] = ()
    library: str | None = None
    libs: tuple[Path, ...] = ()  # the user's device bitcode (or .ll) the functions may call


SIGNATURE_FILE = "signature.json"
_SYMBOL_PREFIX = re.compile(r"^rawext_[0-9a-f]{12}_")


def symbol_prefix(key: str) -> str:
    """The prefix that `unique-symbols` gives every symbol a raw library defines (``key``: the library's)."""
    return f"rawext_{key[:12]}_"


def source_symbol(symbol: str) -> str:
    """The name in the `.cu` of a symbol of a raw library (the symbol without :func:`symbol_prefix`)."""
    return _SYMBOL_PREFIX.sub("", symbol)


def user_library_name(index: int) -> str:
    """File name, in a raw library's cache folder, of the Triton-ready copy of ``spec.libs[index]``."""
    return f"user{index}.ll"


@dataclass(frozen=True)
class RawLibrary:
    """A compiled raw library for one SM: the `.ll` file Triton links and what it exports.

    Beside it, ``signature.json`` lists under ``"libs"`` the user libraries (``user<i>.ll``) that
    Triton links right after it (:func:`triton_raw_ext.backend_hook.raw_libraries`).
    """

    path: Path
    functions: dict[str, WrappedFunction]  # symbol in the .cu -> wrapper info
    unsupported: dict[str, str]  # symbol in the .cu -> why Triton cannot call it
    pointees: dict[str, str]  # symbol in the .cu -> element type (triton.language name) of its pointer result
    unsigned: dict[str, list[int]]  # symbol in the .cu -> its result's fields (0: a scalar) that are unsigned ints


DEBUG_FLAGS = ("-g", "--cuda-noopt-device-debug", "-Xclang", "-disable-llvm-passes")
INTEGER_ABIS = ("i8", "i16", "i32", "i64")
_OPT_LEVEL = re.compile(r"-O\w*")


def source_files(spec: CompileSpec) -> set[Path]:
    """``spec.source`` and every file it reaches through ``#include "..."``, each looked up beside the file
    that includes it, then in ``spec.include_dirs``."""
    seen: set[Path] = set()
    pending = [spec.source]
    while pending:
        source = pending.pop()
        if source in seen:
            continue
        seen.add(source)
        for name in _QUOTE_INCLUDE.findall(source.read_bytes()):
            for folder in (source.parent, *spec.include_dirs):
                candidate = (folder / name.decode()).resolve()
                if candidate.is_file():
                    pending.append(candidate)
                    break
    return seen


def line_info() -> bool:
    """Whether raw code carries line tables: yes, as Triton's kernels do, unless Triton's own switch for
    its kernels, ``TRITON_DISABLE_LINE_INFO`` (``triton.knobs.compilation.disable_line_info``), is set."""
    return not triton_knobs.compilation.disable_line_info


def clang_options(spec: CompileSpec, arch: int) -> list[str]:
    """clang's command line for ``spec`` on ``sm_<arch>``, up to its input: shared by the compile and the
    precompiled NVSHMEM headers it may use. ``library="nvshmem"`` puts NVSHMEM's include folder on the search path.

    Line tables (``.file``/``.loc`` into the `.cu`) are on when :func:`line_info` says so, before
    ``spec.clang_flags`` (a ``-g0`` there turns them off); off, ``-g0`` comes after every flag.
    """
    clang, cuda = find_clang(), find_cuda_headers()
    nvshmem = ["-isystem", str(find_nvshmem().include_dir)] if spec.library == "nvshmem" else []
    includes = [f"-I{d}" for d in spec.include_dirs]
    defines = [f"-D{d}" for d in spec.defines]
    # On by default, as Triton's own line info: measured cost within noise (< 0.04 s CPU per kernel, PTX +10 %).
    user = _user_flags(spec.clang_flags)
    flags = ("-gline-tables-only", *user) if line_info() else (*user, "-g0")
    return clang.argv(
        "-x", "cuda", "--cuda-device-only", "-emit-llvm", "-c", "-O3", "-std=c++17",
        f"--cuda-gpu-arch=sm_{arch}", f"--cuda-path={cuda.root}", "-nocudalib", "-Wno-unknown-cuda-version",
        "-fcuda-short-ptr", "-fgpu-rdc", "-fno-discard-value-names",
        "-isystem", str(INCLUDE_DIR / "stubs"), "-isystem", str(INCLUDE_DIR), *cuda.include_flags(), *nvshmem,
        *includes, *defines, *flags,
    )  # fmt: skip


def _user_flags(flags: tuple[str, ...]) -> list[str]:
    """``clang_flags`` as clang gets them: a final ``-O0`` becomes ``-Xclang -disable-llvm-passes``.

    Both leave clang's output unoptimised, but -O0 also marks every function ``optnone noinline``,
    which keeps Triton's optimizer from inlining the raw call; a ``__noinline__`` helper stays one.
    """
    levels = [flag for flag in flags if _OPT_LEVEL.fullmatch(flag)]
    if not levels or levels[-1] != "-O0":
        return list(flags)
    return [flag for flag in flags if flag not in levels] + ["-Xclang", "-disable-llvm-passes"]


def clang_command(spec: CompileSpec, arch: int, output: Path, extra: tuple[str, ...] = ()) -> list[str]:
    """The clang command line compiling ``spec`` to NVPTX bitcode for ``sm_<arch>``, ``extra`` last.

    A source that includes ``<nvshmem.h>`` or ``<nvshmemx.h>`` (see :func:`source_files`) gets
    NVSHMEM's precompiled header, which this builds first when it is not cached; it needs
    ``library="nvshmem"``, else :class:`RawCompileError` says so. The header is precompiled without
    the source's include folders and defines, and without ``extra``: clang accepts those on top of
    it (:data:`DEBUG_FLAGS` included), so one precompiled header per SM and ``clang_flags`` serves
    every source and the debug compile.
    """
    pch: list[str] = []
    if includes_nvshmem_headers(source_files(spec)):
        if spec.library != "nvshmem":
            raise RawCompileError(
                f"{spec.source} includes NVSHMEM's headers but its @dialect does not say library=\"nvshmem\"; "
                f"add library=\"nvshmem\" so that NVSHMEM's include folder is searched and NVSHMEM is linked"
            )
        headers_only = dataclasses.replace(spec, include_dirs=(), defines=())
        pch = ["-include-pch", str(precompiled_header(clang_options(headers_only, arch)))]
    return [*clang_options(spec, arch), *pch, *extra, str(spec.source), "-o", str(output)]


def _run_clang(spec: CompileSpec, arch: int, output: Path, extra: tuple[str, ...] = ()) -> None:
    cmd = clang_command(spec, arch, output, extra)
    proc = run_tool("clang", cmd, f"on {spec.source}", RawCompileError)
    if proc.returncode != 0:
        fix = ""
        if "-include-pch" in cmd and "since the precompiled header" in proc.stderr:  # a header changed in place
            fix = f"\nDelete {Path(cmd[cmd.index('-include-pch') + 1]).parent}; the next compile precompiles it again"
        raise RawCompileError(f"clang failed to compile {spec.source} for sm_{arch}:\n{proc.stderr.strip()}\n"
                              f"command: {' '.join(cmd)}{fix}")


def _check_library(spec: CompileSpec, nvshmem_symbols: list[str]) -> None:
    if nvshmem_symbols and spec.library != "nvshmem":
        raise RawCompileError(
            f"{spec.source} calls NVSHMEM ({', '.join(nvshmem_symbols[:4])}) but its @dialect does not say "
            f'library="nvshmem"; add library="nvshmem" so that NVSHMEM is linked into the kernel'
        )


def compile_to_module(spec: CompileSpec, arch: int, workdir: Path | None = None,
                      extra: tuple[str, ...] = ()) -> llvm.ModuleRef:
    """Compile ``spec`` for ``sm_<arch>`` with :func:`clang_command` and parse the bitcode.

    No passes run: the module is clang's output, with NVSHMEM, libdevice and ``vprintf`` left as
    declarations. ``extra`` flags go last (:data:`DEBUG_FLAGS`: the debug build that
    :mod:`~triton_raw_ext.debug_types` reads). The bitcode goes to a temporary folder inside
    ``workdir`` (default: the system's temporary folder) that is deleted before returning. Raises
    :class:`RawCompileError` if clang fails, ValueError if its output is not valid IR.
    """
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        bitcode = Path(tmp) / "raw.bc"
        _run_clang(spec, arch, bitcode, extra)
        return load(bitcode)


def _build(spec: CompileSpec, arch: int, key: str, folder: Path) -> None:
    mod = compile_to_module(spec, arch, folder)
    nvshmem = sorted(f.name for f in declared_functions(mod) if f.name.startswith(NVSHMEM_PREFIXES))
    _check_library(spec, nvshmem)
    report = abi_wrappers(mod)
    pointer_results = [w.target for w in report.wrapped if w.ret == "ptr"]
    integer_results = [w for w in report.wrapped if set(_result_abis(w)) & set(INTEGER_ABIS)]
    debug_ir = str(compile_to_module(spec, arch, folder, DEBUG_FLAGS)) if pointer_results or integer_results else ""
    pointees = pointee_types(debug_ir, pointer_results)
    declared = result_leaves(debug_ir, [w.target for w in integer_results])
    unsigned = {w.target: fields for w in integer_results if (fields := _unsigned_fields(w, declared.get(w.target)))}
    prefix = symbol_prefix(key)
    unique_symbols(mod, prefix)
    functions = {
        w.target: {"target": prefix + w.target, "symbol": prefix + w.symbol, "ret": w.ret,
                   "params": w.params, "pure": w.pure, "fields": w.fields, "words": [prefix + s for s in w.words]}
        for w in report.wrapped
    }  # fmt: skip
    signature = {"source": str(spec.source), "arch": arch, "functions": functions, "unsupported": report.unsupported,
                 "pointees": pointees, "unsigned": unsigned, "nvshmem_symbols": nvshmem}  # fmt: skip
    for index, path in enumerate(spec.libs):
        write_atomic(folder / user_library_name(index), triton_compat(str(_user_library(path))))
    signature["libs"] = [user_library_name(i) for i in range(len(spec.libs))]
    write_atomic(folder / "lib.ll", triton_compat(str(mod)))
    write_atomic(folder / SIGNATURE_FILE, json.dumps(signature, indent=1))


def _result_abis(w: WrappedFunction) -> list[str]:
    """The ABI types of a function's result as it crosses: its fields for a struct, else the one type."""
    return [abi for abi, _, _ in w.fields] if w.ret == "struct" else [w.ret]


def _unsigned_fields(w: WrappedFunction, declared: list[str | None] | None) -> list[int]:
    """Indices into :func:`_result_abis` of the integers that the declaration (``declared``, from
    :func:`~triton_raw_ext.debug_types.result_leaves`) makes unsigned; none when the two layouts differ."""
    abis = _result_abis(w)
    if declared is None or len(declared) != len(abis):
        return []
    return [i for i, (abi, name) in enumerate(zip(abis, declared, strict=True))
            if name and abi in INTEGER_ABIS and name == f"uint{SCALAR_BITS[abi]}"]  # fmt: skip


def _user_library(path: Path) -> llvm.ModuleRef:
    """Parse one of ``libs=`` (NVPTX bitcode or text IR), naming the file when it is not usable."""
    try:
        mod = load(path)
    except ValueError as e:
        raise RawCompileError(f"libs= entry {path} is not LLVM bitcode or IR: {e}") from e
    if not mod.triple.startswith("nvptx64"):
        raise RawCompileError(f"libs= entry {path} targets {mod.triple or 'no triple'}, not nvptx64-nvidia-cuda; "
                              f"compile it for the GPU (clang -x cuda --cuda-device-only -emit-llvm -c)")
    return mod


@functools.lru_cache(maxsize=256)
def compile_raw_library(spec: CompileSpec, source_key: str, arch: int) -> RawLibrary:
    """Compile (or fetch from the cache) ``spec`` for ``sm_<arch>``.

    ``source_key`` must change whenever anything that affects the output changes (see
    :func:`triton_raw_ext.dialect.RawFunction.cache_key`); it names the cache entry.
    """
    key = digest(source_key, str(arch))
    files = ("lib.ll", SIGNATURE_FILE, *(user_library_name(i) for i in range(len(spec.libs))))
    folder = get_or_build("raw_lib", key, files, lambda f: _build(spec, arch, key, f))
    sig = json.loads((folder / SIGNATURE_FILE).read_text())
    functions = {
        name: WrappedFunction(f["target"], f["symbol"], f["ret"], [tuple(p) for p in f["params"]], f["pure"],
                              [tuple(x) for x in f["fields"]], f["words"])
        for name, f in sig["functions"].items()
    }
    return RawLibrary(folder / "lib.ll", functions, sig["unsupported"], sig["pointees"], sig["unsigned"])
