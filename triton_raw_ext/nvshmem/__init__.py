"""NVSHMEM's device API for ``@triton.jit`` kernels: ``import triton_raw_ext.nvshmem as shm``.

Every call is NVSHMEM's device function under its name without ``nvshmem_`` / ``nvshmemx_``
(``shm.int_p`` is ``nvshmem_int_p``, ``shm.putmem_block`` is ``nvshmemx_putmem_block``), with
NVSHMEM's arguments in NVSHMEM's order and units (bytes for ``*mem`` calls, elements otherwise);
pointers are Triton pointers (or ``int64`` addresses). The constants (``CMP_EQ`` ... ``CMP_GE``,
``SIGNAL_SET``, ``SIGNAL_ADD``, ``TEAM_WORLD``, ``TEAM_SHARED``, ``TEAM_NODE``, ``TEAM_SAME_MYPE_NODE``,
``TEAM_INVALID``) carry the values of the installed NVSHMEM's headers. The calls are listed, with
their granularity, in docs/nvshmem.md; ``CALLS`` is the table they come from.

How a call maps onto a Triton program (``num_warps * 32`` threads, all running its scalar code):

- ``_block`` calls: every thread of the program takes part, as NVSHMEM's block calls require.
- ``_warp`` calls: the program's first warp makes the call, the other warps wait for it.
- per-thread calls (no suffix) with scalar and pointer arguments: thread 0 makes the call once for
  the program, the other threads wait for it, and every thread gets its result. With a tensor
  argument: once per element, by the thread that holds it.
- ``my_pe``, ``n_pes``, ``team_*`` queries, ``ptr``, ``fence`` and ``quiet``: every thread (no side
  effect to repeat; fence and quiet order the calling thread's own operations).

Collectives (barriers, syncs, broadcast, alltoall, fcollect, reductions) are made once per program
in this way, and, as in NVSHMEM, by one program per PE at a time (guard them with
``if tl.program_id(0) == 0``). The wrappers are generated `.cu` files beside this module (see
:mod:`.generate`), compiled through the plugin's ``@dialect`` like any raw function.
"""

from __future__ import annotations

import triton.language as tl

from .calls import CALLS, Call
from .constants import read_constants
from .device_call import DeviceCall

_CONSTANTS = read_constants()
globals().update({call.name: DeviceCall(call) for call in CALLS})
globals().update({name: tl.constexpr(value) for name, value in _CONSTANTS.items()})

__all__ = ["CALLS", "Call", "DeviceCall", *_CONSTANTS, *(call.name for call in CALLS)]
