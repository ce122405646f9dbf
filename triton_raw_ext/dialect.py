"""``@dialect``: registering raw CUDA device functions that ``@triton.jit`` kernels can call.

A :class:`RawFunction` is a Triton builtin (callable inside kernels, see
:mod:`triton_raw_ext.language`) that also contributes its :attr:`RawFunction.cache_key` to the
hash of every kernel that references it, so that editing the `.cu` file, a flag, the clang or CUDA
version, the NVSHMEM library or the plugin recompiles the kernel.

Contract for code generators that re-emit a kernel's globals as source: torch.compile's inductor
writes a global that is not a JIT function or a constant, and whose ``__module__`` starts with
``triton``, as ``from <__module__> import <__name__> as <global>`` into the module its compile
workers load. A RawFunction's ``__module__`` is this module and its ``__name__`` is an identifier
that encodes the function (``extern_func_name``, the stub's name, the :class:`CompileSpec`) and
ends with the first digits of :attr:`RawFunction.cache_key`; this module's ``__getattr__`` decodes
it, so the import re-creates an equal RawFunction in any process, without the stub's module (which
may be ``__main__`` or not importable there). The `.cu` must be at the same path. Because the name
changes with the cache key, caches keyed by the emitted source see every edit of the `.cu`.
"""

from __future__ import annotations

import base64
import inspect
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from triton.runtime.jit import JITCallable

from .cache import digest
from .cu_compiler import CompileSpec, RawLibrary, compile_raw_library, line_info, source_files
from .errors import RawCompileError
from .toolchain import find_clang, find_cuda_headers
from .version import code_digest

SUPPORTED_DIALECTS = ("cuda",)
SUPPORTED_LIBRARIES = ("nvshmem",)
_IMPORT_NAME = re.compile(r"__rawfn_([a-z2-7]+)_([0-9a-f]+)\Z")  # <stub>__rawfn_<base32 fields>_<key digits>
_KEY_DIGITS = 16
Stamp = tuple[int, int, int]


def stamp(path: Path) -> Stamp | None:
    """What a change of ``path`` changes: modification time, size, inode (None once it is gone)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


class _KeyContribution(JITCallable):
    """Carries a cache key into Triton's kernel hash (Triton hashes JITCallables it finds)."""

    def __init__(self, key: str) -> None:  # no super().__init__: there is no Python function
        self.hash = key
        self.used_global_vals = {}

    @property
    def cache_key(self) -> str:
        return self.hash


class RawFunction:
    """One raw CUDA device function of a `.cu` file, callable from ``@triton.jit`` and ``@gluon.jit`` code."""

    __triton_builtin__ = True
    __triton_aggregate__ = True
    # Triton >= 3.8 hashes an aggregate's annotations; the key itself comes from hash_attrs.
    extern_func_name: str
    spec: CompileSpec

    def __init__(self, name: str, spec: CompileSpec, python_name: str) -> None:
        self.extern_func_name = name
        self.spec = spec
        self.__qualname__ = python_name
        self.source_stamps: dict[Path, Stamp | None] = {}  # the files the last cache_key read (source_watch)

    @property
    def __name__(self) -> str:
        """An identifier this module's ``__getattr__`` turns back into this function (see the module
        docstring); it ends with the first digits of :attr:`cache_key`."""
        spec = self.spec
        fields = [self.extern_func_name, self.__qualname__, str(spec.source), list(spec.clang_flags),
                  [str(d) for d in spec.include_dirs], list(spec.defines), spec.library, [str(p) for p in spec.libs]]
        payload = base64.b32encode(json.dumps(fields).encode()).decode().rstrip("=").lower()
        return f"{self.__qualname__}__rawfn_{payload}_{self.cache_key[:_KEY_DIGITS]}"

    @classmethod
    def from_name(cls, name: str) -> RawFunction:
        """The RawFunction whose ``__name__`` is ``name``, re-created from the fields it encodes."""
        match = _IMPORT_NAME.search(name)
        if match is None:
            raise ValueError(f"{name!r} is not the name of a raw function")
        payload = match.group(1).upper()
        payload += "=" * (-len(payload) % 8)
        extern, python_name, source, flags, dirs, defines, library, libs = json.loads(base64.b32decode(payload))
        spec = CompileSpec(Path(source), tuple(flags), tuple(Path(d) for d in dirs), tuple(defines), library,
                           tuple(Path(lib) for lib in libs))
        return cls(extern, spec, python_name)

    def __repr__(self) -> str:
        return f"<raw cuda function {self.extern_func_name} from {self.spec.source}>"

    @property
    def cache_key(self) -> str:
        """Digest of the sources (with local includes), flags, toolchain, NVSHMEM and plugin."""
        if not self.spec.source.is_file():
            raise RawCompileError(f"raw function {self.extern_func_name}: {self.spec.source} no longer exists")
        read = sorted(source_files(self.spec)) + list(self.spec.libs)
        self.source_stamps = {path: stamp(path) for path in read}  # before reading: a later write shows
        parts: list[str | bytes] = [code_digest(), find_clang().identity, str(find_cuda_headers())]
        parts += [repr((self.spec.clang_flags, [str(d) for d in self.spec.include_dirs], self.spec.defines,
                        line_info()))]
        for path in read:
            parts += [str(path), path.read_bytes()]
        if self.spec.library == "nvshmem":
            from .knobs import nvshmem_transports
            from .nvshmem_install import find_nvshmem, identity

            parts += [identity(find_nvshmem()), nvshmem_transports()]
        return digest(*parts)

    @property
    def hash_attrs(self) -> list[_KeyContribution]:
        """What Triton's dependency finder hashes for this object (it is an aggregate to Triton)."""
        return [_KeyContribution(self.cache_key)]

    def library(self, arch: int) -> RawLibrary:
        """The compiled library for ``sm_<arch>`` (cached on disk and in memory)."""
        return compile_raw_library(self.spec, self.cache_key, arch)

    def __call__(self, *args, _semantic=None):
        if _semantic is None:
            raise RawCompileError(
                f"raw function {self.extern_func_name} can only be called inside a @triton.jit or @gluon.jit function"
            )
        from .language import emit_call

        return emit_call(self, list(args), _semantic)


# clang flags the plugin sets itself: a user's copy would change what is produced or for which GPU.
_OWN_FLAGS = {
    "-E": "preprocesses only", "-S": "writes assembly", "-c": "is already set", "-o": "names the output",
    "-x": "sets the language (cuda)", "-emit-llvm": "is already set", "--cuda-gpu-arch": "is set per kernel target",
    "--offload-arch": "is set per kernel target", "--cuda-host-only": "compiles host code",
    "--cuda-device-only": "is already set", "-fsyntax-only": "produces nothing", "-M": "writes dependencies",
}  # fmt: skip


def _as_tuple(value: str | Iterable[str] | None, argument: str) -> tuple[str, ...]:
    """``value`` as a tuple of strings; anything but strings is an error naming ``argument``."""
    if value is None:
        return ()
    items = (value,) if isinstance(value, (str, Path)) else tuple(value)
    bad = [item for item in items if not isinstance(item, (str, Path))]
    if bad:
        raise RawCompileError(f"@dialect {argument}= takes strings; got {bad[0]!r} ({type(bad[0]).__name__})")
    return tuple(str(item) for item in items)


def _defines(value: Mapping[str, object] | Iterable[str] | None) -> tuple[str, ...]:
    """``-D`` macros: ``["TILE=128", "FAST"]`` or ``{"TILE": 128, "FAST": None}`` (values become text)."""
    if isinstance(value, Mapping):
        for name, setting in value.items():
            if not isinstance(setting, (str, int, float, type(None))) or isinstance(setting, bool):
                raise RawCompileError(f"@dialect defines={{{name!r}: {setting!r}}}: a macro value must be a string "
                                      f"or a number (or None for a bare -D{name})")
        return tuple(name if setting is None else f"{name}={setting}" for name, setting in value.items())
    return _as_tuple(value, "defines")


def _clang_flags(value: Iterable[str] | None) -> tuple[str, ...]:
    # nvcc's -lineinfo is clang's -gline-tables-only; clang would take it for a linker input and ignore it.
    flags = tuple("-gline-tables-only" if flag == "-lineinfo" else flag for flag in _as_tuple(value, "clang_flags"))
    for flag in flags:
        if " " in flag.strip() and flag.strip().startswith("-"):
            raise RawCompileError(f"@dialect clang_flags=[{flag!r}]: one flag per list item "
                                  f"(clang_flags={flag.split()!r})")
        own = next((f for f in _OWN_FLAGS if flag == f or flag.startswith(f + "=")
                    or (f.startswith("--") and flag.startswith(f))), None)
        if own is not None:
            raise RawCompileError(f"@dialect clang_flags: {flag!r} is not allowed: the plugin's clang command "
                                  f"{_OWN_FLAGS[own]}; remove it")
    return flags


def dialect(
    name: str = "cuda",
    file: str | None = None,
    library: str | None = None,
    extern_func_name: str | None = None,
    clang_flags: Iterable[str] | None = None,
    include_dirs: Iterable[str] | None = None,
    defines: Mapping[str, object] | Iterable[str] | None = None,
    libs: Iterable[str] | None = None,
) -> Callable[[Callable], RawFunction]:
    """Register the decorated Python stub as the raw function ``extern_func_name`` of ``file``.

    ``file`` (and relative ``include_dirs``) are resolved against the folder of the Python file
    that defines the stub. ``library="nvshmem"`` lets the function call NVSHMEM's device API; the
    kernel then links NVSHMEM's device bitcode. ``libs`` (paths resolved like ``file``) are the
    user's NVPTX device libraries (``.bc`` or ``.ll``) the source calls into: each kernel links only
    the functions it still needs from them, before Triton's optimizer, so they inline like the
    raw code. ``defines`` is a list of ``NAME`` / ``NAME=VALUE`` strings or a mapping of names to
    values (numbers become their text). Errors in the arguments raise :class:`RawCompileError` at
    decoration time; compile errors at the kernel's first compile.
    """
    if name not in SUPPORTED_DIALECTS:
        raise RawCompileError(f"unknown dialect {name!r}; supported: {', '.join(SUPPORTED_DIALECTS)}")
    if library is not None and library not in SUPPORTED_LIBRARIES:
        raise RawCompileError(
            f"unknown library {library!r}; supported: {', '.join(SUPPORTED_LIBRARIES)} (or leave it out)"
        )
    if not file:
        raise RawCompileError('@dialect needs file="<name>.cu", the CUDA source that defines the function')
    if not isinstance(file, (str, Path)):
        raise RawCompileError(f'@dialect file= takes the path of the .cu source as a string (file="<name>.cu"); '
                              f"got {file!r} ({type(file).__name__})")
    flags, define_flags = _clang_flags(clang_flags), _defines(defines)

    def register(stub: Callable) -> RawFunction:
        here = Path(inspect.getsourcefile(stub) or stub.__code__.co_filename).resolve().parent
        source = (here / file).resolve()
        if source.is_dir():
            raise RawCompileError(f"@dialect on {stub.__qualname__}: file {file!r} is a folder ({source}); "
                                  f"name the .cu source inside it")
        if not source.is_file():
            raise RawCompileError(
                f"@dialect on {stub.__qualname__}: file {file!r} not found (looked for {source}); "
                f"the path is relative to the folder of the Python file that defines {stub.__qualname__}"
            )
        dirs = tuple((here / d).resolve() for d in _as_tuple(include_dirs, "include_dirs"))
        user_libs = tuple((here / lib).resolve() for lib in _as_tuple(libs, "libs"))
        for lib in user_libs:
            if not lib.is_file() or lib.suffix not in (".bc", ".ll"):
                raise RawCompileError(
                    f"@dialect on {stub.__qualname__}: libs entry {lib} is not a .bc or .ll file; give NVPTX "
                    f"device bitcode (clang -x cuda --cuda-device-only -emit-llvm -c), relative to the folder of "
                    f"the Python file that defines {stub.__qualname__}"
                )
        spec = CompileSpec(source, flags, dirs, define_flags, library, user_libs)
        return RawFunction(extern_func_name or stub.__name__, spec, stub.__name__)

    return register


def __getattr__(name: str) -> RawFunction:
    """``from triton_raw_ext.dialect import <RawFunction.__name__>``: the function re-created."""
    if _IMPORT_NAME.search(name) is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return RawFunction.from_name(name)
