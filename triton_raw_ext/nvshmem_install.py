"""Where NVSHMEM is installed: headers, host library, device bitcode, version.

Search order: ``$NVSHMEM_HOME``, then the ``nvidia-nvshmem-cu13``/``-cu12`` wheel (``nvidia/nvshmem``
on ``sys.path``). Device bitcode for a target SM is chosen as ``libnvshmem_device_sm_<arch>.bc``,
then the closest lower SM that ships, then the unified ``libnvshmem_device.bc``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .cache import cache_dir, write_atomic
from .errors import RawCompileError

# Names of NVSHMEM's device API and internals: what a raw library or kernel IR leaves undefined for
# the NVSHMEM link to resolve.
NVSHMEM_PREFIXES = ("nvshmem_", "nvshmemx_", "nvshmemi_")

INSTALL_HINT = (
    "install the NVSHMEM wheel (`pip install nvidia-nvshmem-cu13`, or `nvidia-nvshmem-cu12` for CUDA 12) "
    "or point NVSHMEM_HOME at an NVSHMEM installation (a folder with include/ and lib/)"
)


@dataclass(frozen=True)
class NvshmemInstall:
    """One NVSHMEM installation."""

    root: Path

    @property
    def include_dir(self) -> Path:
        return self.root / "include"

    @property
    def lib_dir(self) -> Path:
        return self.root / "lib"

    @property
    def version(self) -> tuple[int, int, int]:
        return _read_version(self.include_dir)

    @property
    def version_str(self) -> str:
        return ".".join(map(str, self.version))

    @property
    def host_library(self) -> Path:
        for name in ("libnvshmem_host.so.3", "libnvshmem_host.so"):
            path = self.lib_dir / name
            if path.is_file():
                return path
        raise RawCompileError(f"NVSHMEM at {self.root} has no lib/libnvshmem_host.so.3; {INSTALL_HINT}")

    def device_bitcodes(self) -> dict[int | None, Path]:
        """Shipped device bitcode files: SM number -> path, and None -> the unified file."""
        found: dict[int | None, Path] = {}
        for path in self.lib_dir.glob("libnvshmem_device*.bc"):
            m = re.fullmatch(r"libnvshmem_device(?:_sm_(\d+))?\.bc", path.name)
            if m:
                found[int(m.group(1)) if m.group(1) else None] = path
        return found

    def bitcode_for(self, arch: int) -> Path:
        """The device bitcode to link for compute capability ``arch`` (e.g. 90)."""
        shipped = self.device_bitcodes()
        per_sm = sorted((sm for sm in shipped if sm is not None and sm <= arch), reverse=True)
        if per_sm:
            return shipped[per_sm[0]]
        if None in shipped:
            return shipped[None]
        listing = ", ".join(p.name for p in shipped.values()) or "none"
        raise RawCompileError(
            f"NVSHMEM {self.version_str} at {self.root} ships no device bitcode usable for sm_{arch} "
            f"(found: {listing}); install an NVSHMEM wheel that supports sm_{arch}"
        )


def _read_version(include_dir: Path) -> tuple[int, int, int]:
    header = include_dir / "non_abi" / "nvshmem_version.h"
    if not header.is_file():
        raise RawCompileError(f"{header} is missing: the NVSHMEM installation is incomplete; {INSTALL_HINT}")
    text = header.read_text()
    parts = []
    for field in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"#define\s+NVSHMEM_VENDOR_{field}_VERSION\s+(\d+)", text)
        if not m:
            raise RawCompileError(f"cannot read NVSHMEM_VENDOR_{field}_VERSION from {header}")
        parts.append(int(m.group(1)))
    return parts[0], parts[1], parts[2]


def _candidate_roots() -> list[Path]:
    roots = []
    env = os.environ.get("NVSHMEM_HOME")
    if env:
        roots.append(Path(env))
    for entry in sys.path:
        roots.append(Path(entry or ".") / "nvidia" / "nvshmem")
    return roots


@functools.lru_cache(maxsize=1)
def _find_cached() -> NvshmemInstall | None:
    for root in _candidate_roots():
        if (root / "include" / "nvshmem.h").is_file() and (root / "lib").is_dir():
            return NvshmemInstall(root.resolve())
    return None


def find_nvshmem(required: bool = True) -> NvshmemInstall | None:
    """The NVSHMEM installation in use, or None (``required=False``) when there is none."""
    install = _find_cached()
    if install is None and required:
        env = os.environ.get("NVSHMEM_HOME")
        where = f"NVSHMEM_HOME={env} has no include/nvshmem.h" if env else "no NVSHMEM installation found"
        raise RawCompileError(f"{where}; {INSTALL_HINT}")
    return install


def file_digest(path: Path) -> str:
    """sha256 of a (large) file, memoised on disk by path, size and mtime."""
    st = path.stat()
    return _file_digest(str(path.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    memo = cache_dir() / "file_digests" / hashlib.sha256(f"{path}|{size}|{mtime_ns}".encode()).hexdigest()
    if memo.is_file() and re.fullmatch(r"[0-9a-f]{64}", known := memo.read_text()):
        return known  # anything else is a damaged memo: computed again below
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    memo.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(memo, h.hexdigest())
    return h.hexdigest()


def identity(install: NvshmemInstall) -> str:
    """A string that changes whenever the installation's device bitcode or version changes."""
    files = sorted(install.device_bitcodes().values())
    return install.version_str + ";" + ";".join(f"{p.name}={file_digest(p)}" for p in files)
