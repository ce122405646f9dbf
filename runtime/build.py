"""Build host-side ``.cu`` helpers into shared libraries with nvcc and load them with ctypes.

Contract of :func:`load_host`:

* The library is built once per key into the plugin cache (``cache_dir()/host_lib/<key>``) under a
  file lock, published by an atomic rename, so concurrent processes build it once and all load the
  same file. The key covers the ``.cu`` bytes, the headers (``*.h``, ``*.cuh``) in its folder, the
  nvcc version, the nvcc flags and the NVSHMEM version.
* A library prebuilt by the top-level ``CMakeLists.txt`` (in ``$TRITON_RAW_PREBUILT_DIR``, else the
  source checkout's ``build/``) is used instead when its manifest says it was built from the same
  source, NVSHMEM version and nvcc release with the same ``rdc`` setting.
* Every library links ``libnvshmem_host.so.3`` by its file name (the wheels ship no unversioned
  symlink) with an rpath to NVSHMEM's ``lib/``. Relocatable device code (``-rdc=true`` plus the
  static ``libnvshmem_device.a``) is added only with ``rdc=True``: it is needed only when the
  helper's *own kernels* call NVSHMEM device functions; host calls (``nvshmemx_*_on_stream``,
  ``nvshmem_malloc``, ...) and plain kernels do not need it.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from triton_raw_ext.cache import digest, get_or_build
from triton_raw_ext.errors import RawRuntimeError
from triton_raw_ext.knobs import run_tool
from triton_raw_ext.nvshmem_install import find_nvshmem

CACHE_KIND = "host_lib"
DEFAULT_RDC_ARCH = "sm_90"
DEFAULT_CUDA_HOME = "/usr/local/cuda"
_BASE_FLAGS = ("-O2", "-std=c++17", "-Xcompiler", "-fPIC", "-shared")


@dataclass(frozen=True)
class HostBuild:
    """Everything that determines one host library: the inputs of its cache key."""

    source: Path
    name: str
    flags: tuple[str, ...]
    nvcc: str
    nvcc_version: str
    nvshmem_version: str
    rdc: bool

    @property
    def library_name(self) -> str:
        return f"lib{self.name}.so"

    def source_digest(self) -> str:
        """sha256 over the ``.cu`` file and the headers next to it."""
        headers = sorted(p for p in self.source.parent.iterdir() if p.suffix in (".h", ".cuh"))
        return digest(*(part for p in [self.source, *headers] for part in (p.name, p.read_bytes())))

    def key(self) -> str:
        return digest(self.source_digest(), self.nvcc_version, " ".join(self.flags), self.nvshmem_version)

    def command(self, output: Path) -> list[str]:
        return [self.nvcc, *self.flags, "-o", str(output), str(self.source)]


def find_nvcc() -> str:
    """nvcc: ``$TRITON_RAW_NVCC``, else ``nvcc`` on PATH, else ``$CUDA_HOME/bin/nvcc``, else "
    "/usr/local/cuda."""
    override = os.environ.get("TRITON_RAW_NVCC")
    if override:
        if not Path(override).is_file():
            raise RawRuntimeError(f"TRITON_RAW_NVCC={override} does not exist; point it at an nvcc binary")
        return override
    on_path = shutil.which("nvcc")
    if on_path:
        return on_path
    for home in (os.environ.get("CUDA_HOME"), DEFAULT_CUDA_HOME):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    raise RawRuntimeError(
        "nvcc was not found (TRITON_RAW_NVCC, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin); it is needed to "
        "build host helpers: install the CUDA toolkit (or the nvidia-cuda-nvcc wheel) and put nvcc on PATH, "
        "or prebuild the libraries with `cmake -S . -B build && cmake --build build`"
    )


@functools.lru_cache(maxsize=8)
def nvcc_version(nvcc: str) -> str:
    """The ``release X.Y, VX.Y.Z`` line of ``nvcc --version``."""
    try:
        out = subprocess.run(
            [nvcc, "--version"], capture_output=True, text=True, timeout=60, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise RawRuntimeError(
            f"`{nvcc} --version` failed ({exc}); check the CUDA toolkit installation"
        ) from exc
    for line in out.splitlines():
        if "release" in line:
            return line.strip()
    return out.strip()


def nvcc_release(version_line: str) -> str:
    """``X.Y.Z`` from nvcc's version line (``... release 13.0, V13.0.88`` -> ``13.0.88``)."""
    return version_line.rsplit("V", 1)[-1].strip() if ", V" in version_line else version_line


def describe_build(
    source: Path, name: str | None, rdc: bool, arch: str | None, extra_flags: tuple[str, ...]
) -> HostBuild:
    """The :class:`HostBuild` for a ``.cu`` file; checks inputs, finds nvcc and NVSHMEM."""
    if not source.is_file():
        raise RawRuntimeError(f"host helper source {source} does not exist; pass the path of a .cu file")
    install = find_nvshmem()
    nvcc = find_nvcc()
    flags = list(_BASE_FLAGS)
    if rdc or arch:
        flags.append(f"-arch={arch or DEFAULT_RDC_ARCH}")
    if rdc:
        flags.append("-rdc=true")
    flags += [f"-I{install.include_dir}", *extra_flags, f"-L{install.lib_dir}"]
    if rdc:
        flags.append("-lnvshmem_device")
    flags += ["-l:libnvshmem_host.so.3", "-Xlinker", f"-rpath,{install.lib_dir}"]
    return HostBuild(
        source=source.resolve(),
        name=name or source.stem,
        flags=tuple(flags),
        nvcc=nvcc,
        nvcc_version=nvcc_version(nvcc),
        nvshmem_version=install.version_str,
        rdc=rdc,
    )


def compile_into(build: HostBuild, folder: Path) -> None:
    """Run nvcc to produce ``folder/lib<name>.so`` atomically; raise with nvcc's output on failure."""
    tmp = folder / f".{build.library_name}.{os.getpid()}.tmp"
    cmd = build.command(tmp)
    try:
        proc = run_tool("nvcc", cmd, f"building {build.source}", RawRuntimeError)
    except RawRuntimeError:
        tmp.unlink(missing_ok=True)
        raise
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        output = (proc.stderr + proc.stdout).strip()
        raise RawRuntimeError(
            f"nvcc failed to build host helper {build.source} (exit {proc.returncode}); fix the source:\n"
            f"{output}\ncommand: {' '.join(cmd)}"
        )
    os.replace(tmp, folder / build.library_name)


def prebuilt_dirs() -> list[Path]:
    """Folders searched for CMake-prebuilt libraries, in order."""
    dirs = []
    env = os.environ.get("TRITON_RAW_PREBUILT_DIR")
    if env:
        dirs.append(Path(env))
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "CMakeLists.txt").is_file():
        dirs.append(checkout / "build")
    return dirs


def read_manifest(path: Path) -> dict[str, str]:
    """``key=value`` lines of a prebuilt library's manifest (written by CMakeLists.txt)."""
    entries = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            entries[key.strip()] = value.strip()
    return entries


def find_prebuilt(build: HostBuild) -> Path | None:
    """A prebuilt ``lib<name>.so`` whose manifest matches ``build``, or None."""
    wanted = {
        "source_sha256": hashlib.sha256(build.source.read_bytes()).hexdigest(),
        "nvshmem_version": build.nvshmem_version,
        "nvcc_version": nvcc_release(build.nvcc_version),
        "rdc": "1" if build.rdc else "0",
    }
    for folder in prebuilt_dirs():
        lib = folder / build.library_name
        manifest = folder / f"{build.library_name}.manifest"
        if (
            lib.is_file()
            and manifest.is_file()
            and all(read_manifest(manifest).get(k) == v for k, v in wanted.items())
        ):
            return lib
    return None


def build_host(
    path: str | os.PathLike[str],
    name: str | None = None,
    *,
    rdc: bool = False,
    arch: str | None = None,
    extra_flags: tuple[str, ...] | str = (),
) -> Path:
    """The path of the shared library for ``path``: prebuilt if up to date, else cached/built.

    ``extra_flags`` is a sequence of flags, or one string split as a shell would (``"-O3 -g"``)."""
    flags = tuple(shlex.split(extra_flags)) if isinstance(extra_flags, str) else tuple(extra_flags)
    build = describe_build(Path(path), name, rdc, arch, flags)
    prebuilt = find_prebuilt(build)
    if prebuilt is not None:
        return prebuilt
    folder = get_or_build(CACHE_KIND, build.key(), (build.library_name,), lambda f: compile_into(build, f))
    return folder / build.library_name


def load_host(
    path: str | os.PathLike[str],
    name: str | None = None,
    *,
    rdc: bool = False,
    arch: str | None = None,
    extra_flags: tuple[str, ...] | str = (),
) -> ctypes.CDLL:
    """Build (once) and load a host ``.cu`` helper; returns the ``ctypes.CDLL``.

    ``name`` names the library (``lib<name>.so``; default: the file's stem). ``rdc=True`` compiles
    relocatable device code and links ``libnvshmem_device.a`` (only for kernels that call NVSHMEM
    device functions; ``arch`` then defaults to sm_90). ``extra_flags`` (a sequence, or one string
    split as a shell would) go to nvcc before the link flags. Raises :class:`RawRuntimeError` with
    nvcc's output when the build fails.
    """
    library = build_host(path, name, rdc=rdc, arch=arch, extra_flags=extra_flags)
    try:
        return ctypes.CDLL(str(library))
    except OSError as exc:
        raise RawRuntimeError(
            f"built {library} but could not load it ({exc}); delete it to force a rebuild, and check that "
            f"NVSHMEM's lib/ folder still exists"
        ) from exc
