"""On-disk cache for the plugin's own artifacts (compiled `.cu` libraries, NVSHMEM subsets).

Contract: every artifact lives under :func:`cache_dir` in a folder named by its key. Writers take a
per-key :class:`filelock.FileLock`, build into a temporary file in the same folder and publish it
with :func:`os.replace`, so concurrent compilers produce one entry, readers never see a partial
file, and a writer killed midway leaves only a stray temporary file that the next writer ignores.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock, Timeout

LOCK_WAIT_TOOL_RUNS = 3  # a waiter outlasts the builder's tool runs (each bounded by tool_timeout_s)


def cache_dir() -> Path:
    """``$TRITON_RAW_CACHE_DIR``, else ``<Triton's cache dir>/raw_ext``."""
    from .knobs import knobs

    override = knobs.cache_dir
    if override:
        root = Path(override)
    else:
        from triton import knobs

        root = Path(knobs.cache.dir) / "raw_ext"
    root.mkdir(parents=True, exist_ok=True)
    return root


def digest(*parts: str | bytes) -> str:
    """A sha256 hex digest over the parts, each length-prefixed so that boundaries matter."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def get_or_build(kind: str, key: str, files: tuple[str, ...], build: Callable[[Path], None]) -> Path:
    """Return the folder of artifact ``kind/key``, building it once if any of ``files`` is missing.

    ``build(folder)`` must create every name in ``files`` inside ``folder`` (use
    :func:`write_atomic`). It runs under the entry's file lock; other processes wait for it.
    """
    folder = cache_dir() / kind / key
    if all((folder / name).is_file() for name in files):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    from .knobs import tool_timeout_s

    lock = FileLock(str(folder) + ".lock", timeout=LOCK_WAIT_TOOL_RUNS * tool_timeout_s())
    try:
        lock.acquire()
    except Timeout as e:
        raise RuntimeError(f"waited {lock.timeout:g} s for {lock.lock_file}, held by a process building the same "
                           f"{kind} entry; if that process is gone, delete the lock file") from e
    try:
        if not all((folder / name).is_file() for name in files):
            build(folder)
            missing = [name for name in files if not (folder / name).is_file()]
            if missing:
                raise RuntimeError(f"cache builder for {kind} did not write {missing} in {folder}")
    finally:
        lock.release()
    return folder
