"""Peer-failure watchdog: a PE that dies must not leave the others spinning in a kernel forever.

Contract: while NVSHMEM is initialised with more than one PE over torch.distributed, every PE runs
a daemon thread that polls the job's key-value store (torch.distributed's default store, under a
per-init prefix) every ``poll_s`` seconds. A PE whose main thread raises an uncaught exception
posts an abort record there (via ``sys.excepthook``), and so does a PE whose teardown times out.
A PE that sees an abort record, or loses the store for ``lost_after_s`` (its host, group rank 0,
exited), writes why to stderr and ends the process with :data:`PEER_FAILED_EXIT_CODE` — a thread
blocked in a CUDA wait cannot be interrupted any other way. Stop the watchdog before a collective
teardown so that PEs leaving normally do not look like failures.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from types import TracebackType
from typing import Any

from triton_raw_ext import wait_reports

PEER_FAILED_EXIT_CODE = 86
ABORT_KEY = "abort"


class PeerWatchdog:
    """Polls ``store`` for an abort record of this init; ends the process when one appears."""

    def __init__(
        self, store: Any, token: str, rank: int, size: int, poll_s: float = 1.0, lost_after_s: float = 5.0
    ) -> None:
        import torch.distributed as dist

        self._store = dist.PrefixStore(f"triton_raw_ext/{token}/", store)
        self._rank = rank
        self._size = size
        self._poll_s = poll_s
        self._lost_after_s = lost_after_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="triton-raw-peer-watchdog", daemon=True)
        self._previous_hook = sys.excepthook
        self.aborted = False

    def start(self) -> None:
        """Start polling and post an abort record on uncaught exceptions in the main thread."""
        self._previous_hook = sys.excepthook
        sys.excepthook = self._excepthook
        self._thread.start()

    def stop(self) -> None:
        """Stop polling (returns within about ``poll_s``) and restore ``sys.excepthook``."""
        self._stop.set()
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._previous_hook
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self._poll_s + 1.0)

    def post_abort(self, reason: str) -> None:
        """Tell the other PEs to stop; best effort (the store may already be gone). Sets ``aborted``."""
        self.aborted = True
        try:
            self._store.set(ABORT_KEY, f"PE {self._rank} of {self._size}: {reason}")
        except Exception:  # the store can fail in any way while the job falls apart
            pass

    def _excepthook(
        self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        summary = "".join(traceback.format_exception_only(exc_type, exc)).strip()
        self.post_abort(f"raised {summary}")
        self._stop.set()
        self._previous_hook(exc_type, exc, tb)

    def _run(self) -> None:
        lost_since: float | None = None
        while not self._stop.wait(self._poll_s):
            try:
                failed = self._store.check([ABORT_KEY])
                reason = self._store.get(ABORT_KEY).decode(errors="replace") if failed else ""
                lost_since = None
            except Exception as exc:  # any store failure counts as losing it
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since < self._lost_after_s:
                    continue
                reason = f"lost the torch.distributed store ({exc}); group rank 0 probably exited"
                failed = True
            if failed and not self._stop.is_set():
                self._die(reason)

    def _die(self, reason: str) -> None:
        wait_reports.print_pending()  # os._exit skips atexit: a wait of this PE that expired says so first
        sys.stderr.write(
            f"triton_raw_ext.runtime: PE {self._rank} of {self._size} is ending this process (exit "
            f"{PEER_FAILED_EXIT_CODE}) because another PE failed: {reason}. NVSHMEM work cannot continue "
            f"without it; fix that PE's error (see its own output).\n"
        )
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(PEER_FAILED_EXIT_CODE)
