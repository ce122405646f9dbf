"""The ledger of symmetric-heap allocations: which are live, and how many were made and freed.

Contracts:

* An allocation is recorded once (:func:`record`) and leaves the ledger once: through :func:`release`
  when its last tensor is collected, or :func:`take_outstanding` at finalize, whichever comes first;
  the later one finds nothing to do. The ledger makes no NVSHMEM call: whoever takes an allocation
  out frees its memory.
* Safe from any thread (a lock of its own, taken inside ``lifecycle.LOCK`` when callers hold that).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any


@dataclass
class Allocation:
    """One ``nvshmem_malloc``: its address, size and device, and the init (``serial``) it belongs to."""

    ptr: int
    nbytes: int
    device: int
    serial: int
    freed: bool = False
    buffer: weakref.ref[Any] | None = None  # the device buffer that owns it, while one does (peer views)


_lock = threading.Lock()
_live: dict[int, Allocation] = {}
_stats = {"allocated": 0, "freed": 0}


def record(alloc: Allocation) -> None:
    """Enter a new allocation as live."""
    with _lock:
        _live[alloc.ptr] = alloc
        _stats["allocated"] += 1


def lookup(ptr: int) -> Allocation | None:
    """The live allocation that starts at ``ptr``, or None."""
    with _lock:
        return _live.get(ptr)


def release(alloc: Allocation) -> bool:
    """Take ``alloc`` out of the ledger; False when it already was (then do not free it again)."""
    with _lock:
        if alloc.freed:
            return False
        alloc.freed = True
        _live.pop(alloc.ptr, None)
        _stats["freed"] += 1
        return True


def take_outstanding(serial: int) -> list[int]:
    """Take every live allocation of init ``serial`` out of the ledger; their pointers in allocation order."""
    with _lock:
        ptrs = [ptr for ptr, alloc in _live.items() if alloc.serial == serial]
        for ptr in ptrs:
            _live.pop(ptr).freed = True
            _stats["freed"] += 1
        return ptrs


def heap_stats() -> dict[str, int]:
    """Counts of symmetric allocations: ``allocated`` and ``freed`` since import, ``live`` now."""
    with _lock:
        return {"allocated": _stats["allocated"], "freed": _stats["freed"], "live": len(_live)}
