"""On-disk cache for the plugin's own artifacts (compiled `.cu` libraries, NVSHMEM subsets).

Contract: every artifact lives under :func:`cache_dir` in a folder named by its key. Writers take a
per-key :class:`filelock.FileLock`, build into a temporary file in the same folder and publish it
with :func:`os.replace`, so concurrent compilers produce one entry, readers never see a partial
file, and a writer killed midway leaves only a stray temporary file that the next writer ignores.
Each entry's files are recorded with their sha256 in :data:`DIGESTS_FILE`, written last; a reader
that finds a file missing or changed (truncated, overwritten, a build stopped midway) rebuilds the
entry with a one-line warning instead of failing on it. A write that fails because the disk is full
or the folder cannot be written raises :class:`RawCompileError` naming the cache folder and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from .errors import RawCompileError

LOCK_WAIT_TOOL_RUNS = 3  # a waiter outlasts the builder's tool runs (each bounded by tool_timeout_s)
DIGESTS_FILE = "digests.json"  # {file name: sha256} of an entry's files
_UNWRITABLE = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)
_checked: dict[tuple[Path, tuple[str, ...]], tuple] = {}  # (entry, files) found intact -> their (size, mtime)


def cache_dir() -> Path:
    """``$TRITON_RAW_CACHE_DIR``, else ``<Triton's cache dir>/raw_ext``."""
    from .knobs import knobs

    override = knobs.cache_dir
    if override:
        root = Path(override)
    else:
        from triton import knobs

        root = Path(knobs.cache.dir) / "raw_ext"
    with writing_to(root):
        root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def writing_to(root: Path) -> Iterator[None]:
    """Turn a failed write under ``root`` (no space, read-only, no permission) into :class:`RawCompileError`
    naming the folder and the fix. Errors about other paths pass through unchanged."""
    try:
        yield
    except OSError as e:
        if e.errno not in _UNWRITABLE or (e.filename is not None and not Path(e.filename).is_relative_to(root)):
            raise
        where = f" ({e.filename})" if e.filename else ""
        raise RawCompileError(
            f"cannot write the triton-raw-ext cache in {root}: {e.strerror}{where}; free space there, or set "
            f"TRITON_RAW_CACHE_DIR (triton_raw_ext.knobs.cache_dir) to a writable folder with room"
        ) from e


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
    with writing_to(path.parent):
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _recorded(folder: Path) -> dict[str, str] | None:
    """The digests recorded for an entry's files ({} before its first build), None when unreadable."""
    try:
        recorded = json.loads((folder / DIGESTS_FILE).read_text())
    except FileNotFoundError:
        return {}
    except ValueError:
        return None
    return recorded if isinstance(recorded, dict) else None


def _damage(folder: Path, files: tuple[str, ...]) -> str | None:
    """Why ``files`` of the entry in ``folder`` cannot be used: ``""`` when they were never built, a
    reason when they are incomplete or differ from their recorded digests, None when they are intact."""
    paths = [folder / name for name in (*files, DIGESTS_FILE)]
    stamps = tuple((p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else (-1, -1) for p in paths)
    if _checked.get((folder, files)) == stamps:
        return None
    recorded = _recorded(folder)
    if recorded is None:
        return f"{DIGESTS_FILE} is not readable"
    present = [(folder / name).is_file() for name in files]
    if not any(present) and not any(name in recorded for name in files):
        return ""
    for name, is_present in zip(files, present, strict=True):
        if not is_present:
            return f"{name} is missing"
        if recorded.get(name) != _file_sha256(folder / name):
            return f"{name} does not match its recorded digest"
    _checked[folder, files] = stamps
    return None


def get_or_build(kind: str, key: str, files: tuple[str, ...], build: Callable[[Path], None]) -> Path:
    """Return the folder of artifact ``kind/key``, building it if it is missing or damaged.

    ``build(folder)`` must create every name in ``files`` inside ``folder`` (use
    :func:`write_atomic`). It runs under the entry's file lock; other processes wait for it. A damaged
    entry (see the module docstring) is deleted and built again, with a warning naming its folder.
    """
    root = cache_dir()
    folder = root / kind / key
    if _damage(folder, files) is None:
        return folder
    from .knobs import tool_timeout_s

    lock = FileLock(str(folder) + ".lock", timeout=LOCK_WAIT_TOOL_RUNS * tool_timeout_s())
    with writing_to(root):
        folder.mkdir(parents=True, exist_ok=True)
        try:
            lock.acquire()
        except Timeout as e:
            raise RuntimeError(f"waited {lock.timeout:g} s for {lock.lock_file}, held by a process building the "
                               f"same {kind} entry; if that process is gone, delete the lock file") from e
        try:
            damage = _damage(folder, files)
            if damage is not None:
                if damage:
                    warnings.warn(f"triton-raw-ext: rebuilding the damaged cache entry {folder}: {damage}",
                                  stacklevel=2)
                for name in files:
                    (folder / name).unlink(missing_ok=True)
                build(folder)
                missing = [name for name in files if not (folder / name).is_file()]
                if missing:
                    raise RuntimeError(f"cache builder for {kind} did not write {missing} in {folder}")
                digests = (_recorded(folder) or {}) | {name: _file_sha256(folder / name) for name in files}
                write_atomic(folder / DIGESTS_FILE, json.dumps(digests))
        finally:
            lock.release()
    return folder
