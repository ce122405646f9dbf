"""NVSHMEM host runtime for kernels built with triton_raw_ext.

Importing this package is cheap: it neither imports torch.distributed nor builds anything. The
host helper is built (once, cached) by :func:`init` or :func:`load_host`. See docs/runtime.md.
"""

from .build import load_host
from .heap import heap_stats
from .lifecycle import (
    TeardownTimeout,
    barrier_all,
    cumodule_init,
    finalize,
    host_barrier,
    init,
    is_initialized,
    my_pe,
    n_pes,
    pes_per_gpu,
    quiet,
)
from .memory import empty, peer, zeros
from .watchdog import PEER_FAILED_EXIT_CODE

__all__ = [
    "PEER_FAILED_EXIT_CODE",
    "TeardownTimeout",
    "barrier_all",
    "cumodule_init",
    "empty",
    "finalize",
    "heap_stats",
    "host_barrier",
    "init",
    "is_initialized",
    "load_host",
    "my_pe",
    "n_pes",
    "peer",
    "pes_per_gpu",
    "quiet",
    "zeros",
]
