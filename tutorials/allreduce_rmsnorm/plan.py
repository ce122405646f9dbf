"""Pure-Python planning for the fused AllReduce + residual + RMSNorm op: no GPU, no NVSHMEM.

Contracts (all tested on CPU in test/test_tutorial_1_plan.py):

* :func:`choose_algorithm` picks ``LOCAL`` at world 1 (the all-reduce of one rank is the identity),
  ``ONESHOT`` for messages up to :func:`oneshot_max_bytes`, ``TWOSHOT`` above. The choice depends
  only on (world, tokens, hidden, element size), so every rank makes the same choice.
* :class:`WorkspaceLayout` describes the op's symmetric workspace: element offsets of the three
  landing regions inside one symmetric data tensor and the shape of the signal tensor. Every region
  has two halves selected by the parity of the per-row epoch (see the README, "Reuse without races").
* :func:`launch_config` gives the grid, warps and row batch: one program per row at world 1, at most
  ``resident_programs`` programs (each looping over rows) when programs wait on other ranks, so that
  every program of every rank can be resident at once and the waits cannot deadlock. That cap is
  :func:`grid_cap` of the SMs and of :func:`programs_per_sm`, how many programs of the compiled
  kernel fit on one SM at once; :class:`Tuning` holds the launch choices, :class:`Push` how rows
  reach peers.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass


class Algorithm(enum.IntEnum):
    """The kernel's ``ALGO`` constexpr."""

    LOCAL = 0  # world 1: reduced = x, no communication
    ONESHOT = 1  # every rank pushes its row to every peer; every rank reduces every row
    TWOSHOT = 2  # reduce-scatter (row t owned by rank t % world) then all-gather of the reduced row


class Push(enum.IntEnum):
    """The kernel's ``PUSH`` constexpr: how a program sends rows to peers."""

    PUTS = 0  # NVSHMEM non-blocking block puts, one nvshmem_quiet: works for any peer NVSHMEM reaches
    STORES = 1  # vector stores through the peer's mapped memory (nvshmem_ptr): peers reachable by load/store


# Cost model for the one-shot/two-shot switch (README, "Choosing the algorithm"). Per call, one-shot
# sends (W-1)*M bytes per rank in one hop; two-shot sends 2*(W-1)/W*M in two hops with a wait
# between them. One-shot wins while its extra bytes cost less than the extra hop.
HOP_LATENCY_S = 3e-6  # one put-with-signal + wait across NVLink, seconds (an estimate, not measured)
LINK_BYTES_PER_S = 4.0e11  # per-GPU NVLink bandwidth one way on H100/H200 class parts (bytes/s)
MAX_WARPS_WAITING = 8  # warps of a program that waits on peers (plan.waiting_warps)

# Per-SM limits of sm_90 (H100/H200; CUDA occupancy calculator): registers are allocated per warp in
# units of 256, shared memory per block with 1 KiB reserved by the system.
SM_REGISTERS = 65536
SM_MAX_WARPS = 64
SM_MAX_PROGRAMS = 32
REGISTER_UNIT = 256
SHARED_RESERVED_PER_PROGRAM = 1024


def oneshot_max_bytes(world: int) -> float:
    """Largest message (bytes per rank) sent one-shot; infinite at world <= 2 (equal traffic)."""
    if world < 1:
        raise ValueError(f"world must be >= 1, got {world}")
    extra_fraction = (world - 1) * (1 - 2 / world)  # extra bytes of one-shot, in units of M
    if extra_fraction <= 0:
        return math.inf
    return HOP_LATENCY_S * LINK_BYTES_PER_S / extra_fraction


def choose_algorithm(world: int, tokens: int, hidden: int, elem_bytes: int) -> Algorithm:
    """The algorithm for one call; identical on every rank for identical arguments."""
    if world == 1:
        return Algorithm.LOCAL
    return (
        Algorithm.ONESHOT if tokens * hidden * elem_bytes <= oneshot_max_bytes(world) else Algorithm.TWOSHOT
    )


def oneshot_max_rows(world: int, hidden: int, elem_bytes: int, max_tokens: int) -> int:
    """Rows the one-shot landing region must hold: the most tokens a one-shot call can have."""
    limit = oneshot_max_bytes(world)
    if math.isinf(limit):
        return max_tokens
    return min(max_tokens, int(limit // (hidden * elem_bytes)))


@dataclass(frozen=True)
class WorkspaceLayout:
    """The op's symmetric workspace for (world, hidden, max_tokens, element size, forced algorithm).

    Data tensor (elements of the op's dtype), regions back to back, each ``[2 parities, ...]``:
      * one-shot landing ``[2, world, oneshot_rows, hidden]``: slot (p, src, row) holds rank src's x row;
      * reduce-scatter landing ``[2, world, rs_rows, hidden]``: slot (p, src, row // world) on the
        owner of ``row`` (rank ``row % world``) holds rank src's x row;
      * all-gather landing ``[2, ag_rows, hidden]``: slot (p, row) holds the owner's reduced row.
    Signal tensor (int64) ``[2, world + 1, max_tokens]``: index src < world for one-shot/RS pushes
    from src, index world for the all-gather. Counter tensor (int64, local) ``[max_tokens]``.
    A region is empty when no call can use it; nothing is allocated at world 1.
    """

    world: int
    hidden: int
    max_tokens: int
    elem_bytes: int
    forced: Algorithm | None = None

    def __post_init__(self) -> None:
        for name in ("world", "hidden", "max_tokens", "elem_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.forced is not None and (self.world == 1 or self.forced == Algorithm.LOCAL):
            raise ValueError("forcing an algorithm needs world > 1 and ONESHOT or TWOSHOT")

    def algorithm_for(self, tokens: int) -> Algorithm:
        """The algorithm of a call with ``tokens`` rows (the forced one, if any)."""
        if not 1 <= tokens <= self.max_tokens:
            raise ValueError(f"tokens={tokens} outside 1..max_tokens={self.max_tokens}")
        if self.forced is not None:
            return self.forced
        return choose_algorithm(self.world, tokens, self.hidden, self.elem_bytes)

    @property
    def oneshot_rows(self) -> int:
        if self.world == 1 or self.forced == Algorithm.TWOSHOT:
            return 0
        if self.forced == Algorithm.ONESHOT:
            return self.max_tokens
        return oneshot_max_rows(self.world, self.hidden, self.elem_bytes, self.max_tokens)

    @property
    def rs_rows(self) -> int:
        """Rows one rank owns at most, ceil(max_tokens / world), when two-shot can run; else 0."""
        if self.algorithm_for(self.max_tokens) != Algorithm.TWOSHOT:
            return 0  # choose_algorithm is monotone in tokens: the largest call decides
        return -(-self.max_tokens // self.world)

    @property
    def ag_rows(self) -> int:
        return self.max_tokens if self.rs_rows else 0

    @property
    def oneshot_offset(self) -> int:
        return 0

    @property
    def rs_offset(self) -> int:
        return self.oneshot_offset + 2 * self.world * self.oneshot_rows * self.hidden

    @property
    def ag_offset(self) -> int:
        return self.rs_offset + 2 * self.world * self.rs_rows * self.hidden

    @property
    def data_elements(self) -> int:
        """Elements of the symmetric data tensor."""
        return self.ag_offset + 2 * self.ag_rows * self.hidden

    @property
    def signal_shape(self) -> tuple[int, int, int]:
        return (2, self.world + 1, self.max_tokens)

    @property
    def symmetric_bytes(self) -> int:
        """Symmetric heap bytes per PE (data + signals), without allocator padding; 0 at world 1."""
        if self.world == 1:
            return 0
        return self.data_elements * self.elem_bytes + math.prod(self.signal_shape) * 8


@dataclass(frozen=True)
class Tuning:
    """Launch choices of the communicating kernels.

    ``programs_per_sm``: the most programs per SM (fewer when fewer fit: :func:`programs_per_sm`);
    ``num_warps``: warps per program (``None``: :func:`waiting_warps`); ``batch_rows``: rows a
    one-shot program pushes and finishes at once. The defaults were the fastest at world 2 on two
    H200s (bench/results/2026-11-29-2xH200-t1-tuning-sweep/): many small programs beat few large
    ones, and batching rows in a program gained nothing once programs were small.
    """

    programs_per_sm: int = 8
    num_warps: int | None = None
    batch_rows: int = 1

    def __post_init__(self) -> None:
        if self.programs_per_sm < 1:
            raise ValueError(f"programs_per_sm must be >= 1, got {self.programs_per_sm}")
        if self.num_warps is not None and self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"num_warps must be a power of two from 1 to 16, got {self.num_warps}")
        if self.batch_rows not in (1, 2, 4, 8):
            raise ValueError(f"batch_rows must be 1, 2, 4 or 8, got {self.batch_rows}")


DEFAULT_TUNING = Tuning()


@dataclass(frozen=True)
class LaunchConfig:
    grid: int
    num_warps: int
    block_h: int
    batch_rows: int


def block_size(hidden: int) -> int:
    """The row tile: the whole row, rounded up to a power of two."""
    if hidden < 1:
        raise ValueError(f"hidden must be >= 1, got {hidden}")
    return 1 << (hidden - 1).bit_length()


def local_warps(block_h: int) -> int:
    """Warps for the world-1 kernel: 16 bytes per load per thread, at least 2 vector loads per thread."""
    return max(1, min(16, block_h // 512))


def waiting_warps(block_h: int) -> int:
    """Warps of a program that waits on peers: 32 elements of a row per thread up to 4 warps (H 4096),
    then 64 per thread up to 8 warps (H 16384), where ptxas (sm_90a) still spills nothing."""
    if block_h <= 4096:
        return max(1, block_h // 1024)
    return min(MAX_WARPS_WAITING, block_h // 2048)


def launch_config(
    algo: Algorithm, tokens: int, hidden: int, resident_programs: int, tuning: Tuning = DEFAULT_TUNING
) -> LaunchConfig:
    """Grid, warps and row batch for one call. ``resident_programs``: programs this rank may keep
    resident (:func:`grid_cap`); needed only when programs wait."""
    if tokens < 1:
        raise ValueError(f"tokens must be >= 1, got {tokens}")
    block_h = block_size(hidden)
    if algo == Algorithm.LOCAL:
        return LaunchConfig(grid=tokens, num_warps=local_warps(block_h), block_h=block_h, batch_rows=1)
    if resident_programs < 1:
        raise ValueError(f"resident_programs must be >= 1, got {resident_programs}")
    return LaunchConfig(
        grid=min(tokens, resident_programs),
        num_warps=tuning.num_warps or waiting_warps(block_h),
        block_h=block_h,
        batch_rows=tuning.batch_rows if algo == Algorithm.ONESHOT else 1,
    )


def programs_per_sm(n_regs: int, num_warps: int, shared_bytes: int, shared_per_sm: int) -> int:
    """Programs of a kernel (``n_regs`` registers per thread, ``num_warps``, ``shared_bytes`` of shared
    memory per program) that one SM holds at once; 0 when not even one fits."""
    if n_regs < 1 or num_warps < 1 or shared_bytes < 0:
        raise ValueError(f"bad kernel resources: n_regs={n_regs}, num_warps={num_warps}, shared={shared_bytes}")
    regs_per_warp = -(-n_regs * 32 // REGISTER_UNIT) * REGISTER_UNIT
    by_regs = (SM_REGISTERS // regs_per_warp) // num_warps
    by_warps = SM_MAX_WARPS // num_warps
    by_shared = shared_per_sm // (shared_bytes + SHARED_RESERVED_PER_PROGRAM)
    return min(by_regs, by_warps, by_shared, SM_MAX_PROGRAMS)


def grid_cap(sms: int, fit: int, programs_per_sm: int, sharing: int) -> int:
    """Programs one rank may launch so that all of them, on every PE sharing the GPU, are resident at
    once: ``min(programs_per_sm, fit)`` per SM (``fit``: :func:`programs_per_sm` of the kernel), but
    one per SM over all ``sharing`` PEs when several share the GPU (MPS does not promise to put
    programs of different processes on one SM: with 8 per SM the check of 2 PEs sharing a GPU hung)."""
    if min(sms, fit, programs_per_sm, sharing) < 1:
        raise ValueError(f"grid_cap: every argument must be >= 1, got {sms=} {fit=} {programs_per_sm=} {sharing=}")
    per_sm = 1 if sharing > 1 else min(programs_per_sm, fit)
    return max(1, sms * per_sm // sharing)


def effective_bytes(tokens: int, hidden: int, elem_bytes: int) -> int:
    """Bytes the op must move through memory per rank at least: read x, residual and weight, write
    norm_out and residual_out (what the README's TB/s figures count)."""
    return (4 * tokens * hidden + hidden) * elem_bytes
