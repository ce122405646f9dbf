"""Pure-Python logic of tutorial 2: shape checks, tile order, configs, workspace sizes.

Nothing here touches a GPU, so all of it is tested on CPU. :func:`tile_coords` is the reference
for the kernel's ``_tile_coords`` (kept in the same arithmetic, line for line).
"""

from __future__ import annotations

from dataclasses import dataclass

SUPPORTED_DTYPES = ("bfloat16", "float16")
ELEMENT_BYTES = 2
TMA_ALIGN_BYTES = 16
SMEM_LIMIT_BYTES = 227 * 1024  # per-block opt-in limit of sm_90
# Call e fills buffer e % 2: a peer may run one call ahead without a barrier (see allgather_gemm.py).
WORKSPACE_BUFFERS = 2


@dataclass(frozen=True)
class GemmConfig:
    """Tile shape and pipelining of the consumer GEMM."""

    block_m: int = 128
    block_n: int = 256
    block_k: int = 64
    group_m: int = 8
    num_stages: int = 3
    num_warps: int = 8
    flatten: bool = False
    epilogue_subtile: bool = True

    def smem_bytes(self) -> int:
        """Shared memory the kernel needs: pipelined A and B stages plus the C staging tile."""
        stages = self.num_stages * (self.block_m * self.block_k + self.block_k * self.block_n)
        c_tile = self.block_m * self.block_n // (2 if self.epilogue_subtile else 1)
        return (stages + c_tile) * ELEMENT_BYTES

    def describe(self) -> str:
        return (f"{self.block_m}x{self.block_n}x{self.block_k} g{self.group_m} s{self.num_stages} "
                f"w{self.num_warps}{' flat' if self.flatten else ''}{' sub' if self.epilogue_subtile else ''}")


DEFAULT_CONFIG = GemmConfig()
# Candidates the benchmark times side by side (each must fit in shared memory).
CANDIDATE_CONFIGS = (
    GemmConfig(),
    GemmConfig(flatten=True),
    GemmConfig(num_stages=4),
    GemmConfig(block_m=128, block_n=128, block_k=64, num_stages=4, num_warps=4, epilogue_subtile=False),
    GemmConfig(block_m=256, block_n=128, block_k=64, num_stages=3, num_warps=8),
)


def check_shapes(m_per_rank: int, n: int, k: int, config: GemmConfig) -> None:
    """Raise ValueError unless the kernel's contract holds for these sizes and tiles."""
    if min(m_per_rank, n, k) <= 0:
        raise ValueError(f"sizes must be positive, got m_per_rank={m_per_rank}, n={n}, k={k}")
    if m_per_rank % config.block_m:
        raise ValueError(
            f"m_per_rank={m_per_rank} is not a multiple of BLOCK_M={config.block_m}: a tile must not span two "
            f"ranks' shards; pad the shard or pick a config with a smaller block_m"
        )
    for name, size in (("k", k), ("n", n)):
        if (size * ELEMENT_BYTES) % TMA_ALIGN_BYTES:
            raise ValueError(f"{name}={size}: TMA needs row strides that are multiples of 16 bytes "
                             f"({TMA_ALIGN_BYTES // ELEMENT_BYTES} elements)")
    if config.smem_bytes() > SMEM_LIMIT_BYTES:
        raise ValueError(f"config {config.describe()} needs {config.smem_bytes()} B of shared memory, "
                         f"over the {SMEM_LIMIT_BYTES} B limit")


def tile_coords(tile: int, rank: int, world: int, m_tiles_per_rank: int, num_pid_n: int,
                group_m: int) -> tuple[int, int, int]:
    """(pid_m, pid_n, src) of linear tile ``tile`` for ``rank``.

    Shards are visited one after the other, the local one first, then ranks ``rank+1, rank+2, ...``
    (tiles ``[s * T, (s + 1) * T)`` with ``T = m_tiles_per_rank * num_pid_n`` belong to rank
    ``(rank + s) % world``). Within a shard, tiles are grouped ``group_m`` rows at a time for L2
    reuse of B; the last group of a shard may be shorter, so no group straddles two shards.
    """
    tiles_per_shard = m_tiles_per_rank * num_pid_n
    step, in_shard = divmod(tile, tiles_per_shard)
    group_size = group_m * num_pid_n
    first_m = (in_shard // group_size) * group_m
    rows = min(m_tiles_per_rank - first_m, group_m)
    in_group = in_shard % group_size
    pid_n = in_group // rows
    src = (rank + step) % world
    pid_m = src * m_tiles_per_rank + first_m + in_group % rows
    return pid_m, pid_n, src


def push_order(rank: int, world: int) -> list[int]:
    """Destinations in the order ``rank`` pushes its shard to them.

    Rank ``d`` consumes sources in the order ``d, d+1, ...``, so it needs ``rank`` after
    ``(rank - d) % world`` other shards: pushing to ``rank-1`` first, then ``rank-2``, ... serves
    each destination in the order of its need.
    """
    return [(rank - step) % world for step in range(1, world)]


def workspace_bytes(m_per_rank: int, k: int, world: int) -> int:
    """Symmetric bytes per rank at world > 1: two gathered-A buffers (used by epoch parity) plus one
    int32 ready flag per rank (16-B aligned)."""
    gathered = WORKSPACE_BUFFERS * world * m_per_rank * k * ELEMENT_BYTES
    flags = -(-world * 4 // TMA_ALIGN_BYTES) * TMA_ALIGN_BYTES
    return gathered + flags


def gemm_flops(m_per_rank: int, n: int, k: int, world: int) -> float:
    """Floating-point operations of one rank's GEMM (2 per multiply-add)."""
    return 2.0 * world * m_per_rank * n * k
