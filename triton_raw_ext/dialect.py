"""``@dialect``: registering raw CUDA device functions that ``@triton.jit`` kernels can call.

A :class:`RawFunction` is a Triton builtin (callable inside kernels, see
:mod:`triton_raw_ext.language`) that also contributes its :attr:`RawFunction.cache_key` to the
hash of every kernel that references it, so that editing the `.cu` file, a flag, the clang or CUDA
version, the NVSHMEM library or the plugin recompiles the kernel.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from triton.runtime.jit import JITCallable

from .cache import digest
from .cu_compiler import CompileSpec, RawLibrary, compile_raw_library
from .errors import RawCompileError
from .toolchain import find_clang, find_cuda_headers
from .version import code_digest

SUPPORTED_DIALECTS = ("cuda",)
SUPPORTED_LIBRARIES = ("nvshmem",)
_QUOTE_INCLUDE = re.compile(rb'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


class _KeyContribution(JITCallable):
    """Carries a cache key into Triton's kernel hash (Triton hashes JITCallables it finds)."""

    def __init__(self, key: str) -> None:  # no super().__init__: there is no Python function
        self.hash = key
        self.used_global_vals = {}

    @property
    def cache_key(self) -> str:
        return self.hash


def _local_includes(source: Path, include_dirs: tuple[Path, ...], seen: set[Path]) -> None:
    """Add ``source`` and every ``#include "..."`` it reaches in the user's folders to ``seen``."""
    if source in seen:
        return
    seen.add(source)
    for name in _QUOTE_INCLUDE.findall(source.read_bytes()):
        for folder in (source.parent, *include_dirs):
            candidate = (folder / name.decode()).resolve()
            if candidate.is_file():
                _local_includes(candidate, include_dirs, seen)
                break


class RawFunction:
    """One raw CUDA device function of a `.cu` file, callable from ``@triton.jit`` code."""

    __triton_builtin__ = True
    __triton_aggregate__ = True
    # Triton >= 3.8 hashes an aggregate's annotations; the key itself comes from hash_attrs.
    extern_func_name: str
    spec: CompileSpec

    def __init__(self, name: str, spec: CompileSpec, python_name: str) -> None:
        self.extern_func_name = name
        self.spec = spec
        self.__name__ = python_name
        self.__qualname__ = python_name

    def __repr__(self) -> str:
        return f"<raw cuda function {self.extern_func_name} from {self.spec.source}>"

    @property
    def cache_key(self) -> str:
        """Digest of the sources (with local includes), flags, toolchain, NVSHMEM and plugin."""
        if not self.spec.source.is_file():
            raise RawCompileError(f"raw function {self.extern_func_name}: {self.spec.source} no longer exists")
        files: set[Path] = set()
        _local_includes(self.spec.source, self.spec.include_dirs, files)
        parts: list[str | bytes] = [code_digest(), find_clang().identity, str(find_cuda_headers())]
        parts += [repr((self.spec.clang_flags, [str(d) for d in self.spec.include_dirs], self.spec.defines))]
        for path in sorted(files) + list(self.spec.libs):
            parts += [str(path), path.read_bytes()]
        if self.spec.library == "nvshmem":
            from .nvshmem_install import find_nvshmem, identity

            parts.append(identity(find_nvshmem()))
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
                f"raw function {self.extern_func_name} can only be called inside a @triton.jit function"
            )
        from .language import emit_call

        return emit_call(self, list(args), _semantic)


def _as_tuple(value: str | Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def dialect(
    name: str = "cuda",
    file: str | None = None,
    library: str | None = None,
    extern_func_name: str | None = None,
    clang_flags: Iterable[str] | None = None,
    include_dirs: Iterable[str] | None = None,
    defines: Iterable[str] | None = None,
    libs: Iterable[str] | None = None,
) -> Callable[[Callable], RawFunction]:
    """Register the decorated Python stub as the raw function ``extern_func_name`` of ``file``.

    ``file`` (and relative ``include_dirs``) are resolved against the folder of the Python file
    that defines the stub. ``library="nvshmem"`` lets the function call NVSHMEM's device API; the
    kernel then links NVSHMEM's device bitcode. ``libs`` (paths resolved like ``file``) are the
    user's NVPTX device libraries (``.bc`` or ``.ll``) the source calls into: each kernel links only
    the functions it still needs from them, before Triton's optimizer, so they inline like the
    raw code. Errors in the arguments raise
    :class:`RawCompileError` at decoration time; compile errors at the kernel's first compile.
    """
    if name not in SUPPORTED_DIALECTS:
        raise RawCompileError(f"unknown dialect {name!r}; supported: {', '.join(SUPPORTED_DIALECTS)}")
    if library is not None and library not in SUPPORTED_LIBRARIES:
        raise RawCompileError(
            f"unknown library {library!r}; supported: {', '.join(SUPPORTED_LIBRARIES)} (or leave it out)"
        )
    if not file:
        raise RawCompileError('@dialect needs file="<name>.cu", the CUDA source that defines the function')

    def register(stub: Callable) -> RawFunction:
        here = Path(inspect.getsourcefile(stub) or stub.__code__.co_filename).resolve().parent
        source = (here / file).resolve()
        if not source.is_file():
            raise RawCompileError(
                f"@dialect on {stub.__qualname__}: file {file!r} not found (looked for {source}); "
                f"the path is relative to the folder of the Python file that defines {stub.__qualname__}"
            )
        dirs = tuple((here / d).resolve() for d in _as_tuple(include_dirs))
        user_libs = tuple((here / lib).resolve() for lib in _as_tuple(libs))
        for lib in user_libs:
            if not lib.is_file() or lib.suffix not in (".bc", ".ll"):
                raise RawCompileError(
                    f"@dialect on {stub.__qualname__}: libs entry {lib} is not a .bc or .ll file; give NVPTX "
                    f"device bitcode (clang -x cuda --cuda-device-only -emit-llvm -c), relative to the folder of "
                    f"the Python file that defines {stub.__qualname__}"
                )
        spec = CompileSpec(source, _as_tuple(clang_flags), dirs, _as_tuple(defines), library, user_libs)
        return RawFunction(extern_func_name or stub.__name__, spec, stub.__name__)

    return register
