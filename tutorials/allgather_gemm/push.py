"""How a call of AllGatherGEMM pushes its shard to the peers: the choice of path, the device epoch
state, and the arithmetic the kernels share with the host. Pure Python: tested on CPU.

Two paths (``AllGatherGEMM(..., push=...)``):

* ``"copy_engine"``: the copy engine pushes on a side stream and stream memory writes raise the
  peers' flags to a HOST epoch. No SM is used, but the epoch is baked into the enqueued work, so a
  replayed CUDA graph would repeat it: eager only.
* ``"sm"``: the GEMM's own programs push first (``ag_push_shard`` in ``ag_push-device.cu``). The
  epoch lives in device memory (:data:`STATE_EPOCH` of the operator's state words) and is advanced by
  the call's kernel, so N replays of a captured call are N calls.

Why the GEMM's programs and not a kernel on a side stream or extra programs: a program pushes before
it ever waits, and the work is claimed chunk by chunk from a ticket counter, so the push of a shard
completes as soon as ANY program of the sender's kernel runs; programs not yet scheduled hold no
chunk. No program waits on work that is not scheduled, whatever the grid, on one GPU per rank or
with several PEs sharing a GPU (each PE's grid fits at once there, see ``SPARE_SMS_PER_SHARING_PE``).
A side-stream kernel, or extra programs of the GEMM, would need SMs that the spinning GEMM programs
may all hold.

``"auto"`` takes ``"sm"`` while a CUDA graph is captured, and eagerly ``"sm"`` from
:data:`SM_PUSH_MIN_WORLD` ranks on for shards up to :data:`SM_PUSH_MAX_SHARD_BYTES` (the push delays
the local tiles, which is cheap only when the shard is small and the copy engine has several peers to
serve one after the other), ``"copy_engine"`` otherwise. Once the operator has been captured, the host
no longer knows the device epoch (it advances on every replay), so every later call of that operator
takes the SM path.
"""

from __future__ import annotations

from typing import Literal

from .schedule import WORKSPACE_BUFFERS

Push = Literal["auto", "copy_engine", "sm"]
PUSH_CHOICES: tuple[str, ...] = ("auto", "copy_engine", "sm")

# Eager "auto": SM push from this many ranks on, up to this many bytes of A shard per rank
# (m_per_rank * k * 2), copy engine otherwise. Measured with `benchmark --push both` on one H200 shared by
# the PEs, shards of 0.5 to 64 MiB: at 2 PEs the copy engine is faster at every size (sm/copy_engine
# 1.1-1.36); at 4 PEs the SM push is faster up to 2 MiB (0.55 at 0.5 MiB, 0.84 at 2 MiB), the copy engine
# from 8 MiB (README, Benchmark). The multi-GPU run re-measures it over NVLink.
SM_PUSH_MIN_WORLD = 4
SM_PUSH_MAX_SHARD_BYTES = 2 * 1024 * 1024
# Bytes a warp claims at once: a multiple of the 16-byte vector, small enough that a 2 MB shard gives
# every warp of a full-GPU grid work, large enough that the ticket atomics stay rare.
PUSH_CHUNK_BYTES = 16 * 1024

# The operator's int32 state words in device memory (ag_push-device.cu reads the same layout):
STATE_EPOCH = 0  # calls completed: the next call's epoch is this + 1, the same on every rank
STATE_TICKETS = 1  # chunks claimed in the running call (then over-claimed once per warp); reset after it
STATE_EXITED = 2  # warps that finished claiming in the running call; the last one resets and advances
STATE_DONE = 3  # + j: chunks pushed to the j-th destination of push_order; the last one raises its flag


def state_words(world: int) -> int:
    """Number of int32 state words of an operator at ``world``."""
    return STATE_DONE + max(world - 1, 0)


def buffer_of(epoch: int) -> int:
    """Workspace buffer that call ``epoch`` (1, 2, ...) fills: alternating, so a peer one call ahead
    writes the other buffer."""
    return epoch % WORKSPACE_BUFFERS


def buffer_row_offset(epoch: int, world: int, m_per_rank: int) -> int:
    """First row of call ``epoch``'s buffer in the workspace seen as one [2 * world * m_per_rank, k]
    matrix (how the SM kernel selects the buffer on the device)."""
    return buffer_of(epoch) * world * m_per_rank


def chunks_per_destination(shard_bytes: int) -> int:
    """Chunks of :data:`PUSH_CHUNK_BYTES` (the last may be shorter) a shard is pushed in."""
    return -(-shard_bytes // PUSH_CHUNK_BYTES)


def chunk_of_ticket(ticket: int, rank: int, world: int, shard_bytes: int) -> tuple[int, int, int] | None:
    """(destination, first byte, bytes) of ticket ``ticket`` of ``rank``'s push, None past the last.

    Tickets run destination by destination in :func:`schedule.push_order`, so each destination gets
    the shard in the order of its need; the device function claims them with the same arithmetic.
    """
    chunks = chunks_per_destination(shard_bytes)
    if ticket >= chunks * (world - 1):
        return None
    j, i = divmod(ticket, chunks)
    first = i * PUSH_CHUNK_BYTES
    return (rank - 1 - j) % world, first, min(PUSH_CHUNK_BYTES, shard_bytes - first)


def choose_push(requested: str, world: int, capturing: bool, shard_bytes: int, host_epoch_known: bool,
                what: str = "AllGatherGEMM.__call__") -> str:
    """The path (``"sm"`` or ``"copy_engine"``) of one call, or ``"none"`` at world 1 (no peer).

    Raises RuntimeError naming ``what`` when ``"copy_engine"`` is requested while a CUDA graph is
    captured. ``host_epoch_known``: False once an ``"auto"`` operator was captured (replays advance the
    device epoch behind the host's back), which keeps it on the SM path.
    """
    if requested not in PUSH_CHOICES:
        raise ValueError(f"push must be one of {', '.join(PUSH_CHOICES)}, got {requested!r}")
    if world == 1:
        return "none"
    if requested == "copy_engine":
        if capturing:
            raise RuntimeError(
                f"{what} with push='copy_engine' cannot be captured in a CUDA graph at world > 1: its epoch is "
                "a host value that a replay would repeat, so its ready checks would pass on stale flags. "
                "Build the operator with push='sm' or push='auto' to capture it.")
        return "copy_engine"
    if requested == "sm" or capturing or not host_epoch_known:
        return "sm"
    return "sm" if world >= SM_PUSH_MIN_WORLD and shard_bytes <= SM_PUSH_MAX_SHARD_BYTES else "copy_engine"
