"""Shapes of one MegaMoE layer and the buffers it needs: pure Python, no GPU.

Contract: :class:`MoEConfig` validates a layer's shape for a world of ``world`` ranks (experts are
split into contiguous blocks of ``local_experts`` per rank; rank r owns experts
``[r * local_experts, (r + 1) * local_experts)``). :meth:`MoEConfig.symmetric_buffers` and
:meth:`MoEConfig.local_buffers` list every workspace tensor (name, shape, dtype name) with upper
bounds that hold for any routing, so one allocation serves every call with at most
``max_tokens`` tokens. :func:`choose_tiles` picks the grouped-GEMM tiles from the expected rows
per expert (:func:`choose_tiles_fp8` for ``precision="fp8"``).

Precisions: ``"bf16"`` (bf16 operands) and ``"fp8"`` (float8 e4m3 operands with one float32 scale per
token and 128 channels for activations, per 128 x 128 block for weights; H and I multiples of 128).
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"bfloat16": 2, "float32": 4, "int32": 4, "int64": 8, "float8_e4m3fn": 1}
ROW_ALIGN = 64  # H and I must be multiples of this (GEMM K/N tiles and 16-byte row copies)
PRECISIONS = ("bf16", "fp8")
# Buffers whose contents carry over from call to call (zero when allocated, never poisoned); the last
# four are the persistent kernel's (persistent_launch.persistent_buffers).
STATE_BUFFERS = ("gemm_sched", "barrier_arrived", "barrier_epoch", "sched", "call_epoch", "plan_flag", "comb_flag")
FP8_BLOCK = 128  # fp8: one scale per 128 channels of a token, per 128 x 128 block of a weight matrix


@dataclass(frozen=True)
class MoEConfig:
    """One layer: hidden H, intermediate I, E experts in total, top-k, tokens per rank, world size."""

    hidden: int
    intermediate: int
    num_experts: int
    top_k: int
    max_tokens: int
    world: int = 1
    precision: str = "bf16"

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"MoEConfig.precision={self.precision!r}: use one of {PRECISIONS}")
        for name in ("hidden", "intermediate", "num_experts", "top_k", "max_tokens", "world"):
            if getattr(self, name) < 1:
                raise ValueError(f"MoEConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("hidden", "intermediate"):
            if getattr(self, name) % ROW_ALIGN:
                raise ValueError(f"MoEConfig.{name}={getattr(self, name)} must be a multiple of {ROW_ALIGN}")
            if self.precision == "fp8" and getattr(self, name) % FP8_BLOCK:
                raise ValueError(
                    f"MoEConfig.{name}={getattr(self, name)} must be a multiple of {FP8_BLOCK} for "
                    f"precision='fp8' (one scale per {FP8_BLOCK} channels); pad it or use precision='bf16'"
                )
        if self.num_experts % self.world:
            raise ValueError(
                f"num_experts={self.num_experts} must be divisible by world={self.world} (even split)"
            )
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k={self.top_k} exceeds num_experts={self.num_experts}")
        if self.num_experts > 1024:
            raise ValueError(
                f"num_experts={self.num_experts} > 1024: the routing kernel holds a row of logits"
            )

    @property
    def local_experts(self) -> int:
        """Experts owned by each rank."""
        return self.num_experts // self.world

    @property
    def recv_rows(self) -> int:
        """Token rows a rank can receive: ``max_tokens`` from each source rank (deduplicated per rank)."""
        return self.world * self.max_tokens

    @property
    def pair_capacity(self) -> int:
        """Upper bound on (token, local expert) pairs a rank computes in one call."""
        return self.recv_rows * min(self.top_k, self.local_experts)

    @property
    def operand_dtype(self) -> str:
        """dtype name of the GEMM operands the layer moves and stores (tokens, received rows, h)."""
        return "bfloat16" if self.precision == "bf16" else "float8_e4m3fn"

    def _scales(self, name: str, rows: int, cols: int) -> list[tuple[str, tuple[int, ...], str]]:
        """fp8: the float32 scale buffer of a [rows, cols] operand buffer (one per 128 columns); bf16: none."""
        return [(name, (rows, cols // FP8_BLOCK), "float32")] if self.precision == "fp8" else []

    def symmetric_buffers(self) -> list[tuple[str, tuple[int, ...], str]]:
        """Buffers peers read or write (allocated with NVSHMEM, same shape on every rank)."""
        t, w, k, h = self.max_tokens, self.world, self.top_k, self.hidden
        return [
            ("x_sym", (t, h), self.operand_dtype),  # this rank's tokens, pulled by the ranks owning their experts
            *self._scales("x_scale", t, h),  # fp8: their scales, pulled with them
            ("topk_ids", (t, k), "int32"),  # global expert ids per token
            ("topk_w", (t, k), "float32"),  # routing weights per token
            ("send_idx", (w, t), "int32"),  # per destination rank: the token ids it must pull, in slot order
            ("send_count", (w,), "int32"),  # per destination rank: how many
            ("comb", (w, t, h), "bfloat16"),  # [owner rank, slot] partial outputs pushed back by the owners
            ("barrier_arrived", (w,), "int64"),  # per PE: the last barrier it arrived at (moe_barrier)
        ]

    @property
    def gemm_sched_len(self) -> int:
        """Length of ``gemm_sched``: 2 + the M tiles of 16-row tiles (the smallest a tl.dot takes)."""
        return 2 + max_m_tiles(self.pair_capacity, self.local_experts, 16)

    def local_buffers(self) -> list[tuple[str, tuple[int, ...], str]]:
        """Buffers only this rank touches."""
        r, k, h, p = self.recv_rows, self.top_k, self.hidden, self.pair_capacity
        return [
            ("slot", (self.max_tokens, self.world), "int32"),  # slot of token t at rank r, or -1
            ("recv_x", (r, h), self.operand_dtype),  # received rows at [src * max_tokens + slot]
            *self._scales("recv_xs", r, h),
            ("recv_ids", (r, k), "int32"),
            ("recv_w", (r, k), "float32"),
            ("recv_n", (self.world,), "int32"),  # rows received from each source rank
            ("counters", (2 * self.local_experts,), "int32"),  # per local expert: pair count, then cursor
            ("sorted_row", (p,), "int32"),  # pair -> received row, grouped by local expert
            ("inv_pos", (r, k), "int32"),  # (received row, k) -> pair position
            ("h", (p, self.intermediate), self.operand_dtype),  # SwiGLU output per pair
            *self._scales("h_scale", p, self.intermediate),
            ("y_pair", (p, h), "bfloat16"),  # expert output per pair
            ("gemm_sched", (self.gemm_sched_len,), "int32"),  # moe_gemms' work counters (Tiles.gemm_programs)
            ("staging", (r, h), "bfloat16"),  # weighted partial per received row before the push
            ("barrier_epoch", (1,), "int64"),  # barriers this rank has passed (moe_barrier)
        ]

    @staticmethod
    def nbytes(buffers: list[tuple[str, tuple[int, ...], str]]) -> int:
        """Total bytes of a buffer list."""
        total = 0
        for _, shape, dtype in buffers:
            n = 1
            for d in shape:
                n *= d
            total += n * DTYPE_BYTES[dtype]
        return total

    def weight_bytes(self) -> int:
        """Bytes of this rank's expert weights (L1 [H, 2I] and L2 [I, H] per local expert; fp8: + scales)."""
        n = self.local_experts * 3 * self.hidden * self.intermediate
        return n * 2 if self.precision == "bf16" else n + n // FP8_BLOCK**2 * 4

    def flops(self, pairs: int) -> int:
        """FLOPs of the expert GEMMs for ``pairs`` (token, expert) pairs."""
        return 2 * pairs * 3 * self.hidden * self.intermediate


@dataclass(frozen=True)
class Tiles:
    """Grouped-GEMM tiles: rows per tile (shared by L1 and L2), L1 N (per gate/up half), L2 N, K;
    ``group_m``: M tiles walked together, M fastest inside the group (L2 reuse of A rows and weights)."""

    block_m: int
    block_n1: int
    block_n2: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int = 4
    tma_l1: bool = False  # bf16 only: L1's weight tiles through device-side TMA descriptors
    tma_l2: bool = False  # bf16 only: L2's h and weight tiles through device-side TMA descriptors
    gemm_programs: int = 0  # bf16 only: > 0 runs L1 and L2 as one persistent launch of this many programs

    @property
    def tma(self) -> bool:
        """Either GEMM loads through TMA descriptors (they need ``install_descriptor_scratch``)."""
        return self.tma_l1 or self.tma_l2


def choose_tiles(rows_per_expert: float, hidden: int, intermediate: int) -> Tiles:
    """Tiles for an expected load of ``rows_per_expert`` (average pairs per local expert).

    Few rows per expert waste most of a 128-row tile, so small loads use 64-row tiles. Big loads use
    tiles of 128 rows, N 128 per gate/up half in L1 and 256 in L2, K 32, 6 stages, groups of 8 M tiles:
    best of the sweep in bench/results/2026-11-29-1xH200-t3-tile-sweep/; narrower N where the 64-aligned
    dimensions do not divide. L1 loads its weight tiles through TMA, L2 does not: faster each way in
    bench/results/2026-11-29-1xH200-t3-tma-sweep/.
    """
    if intermediate % 64 or hidden % 64:
        raise ValueError(f"hidden={hidden}, intermediate={intermediate} do not divide into the GEMM tiles")
    if rows_per_expert <= 96:
        return Tiles(64, 64, 128 if hidden % 128 == 0 else 64, 64, num_warps=4, num_stages=3)
    block_n1 = 128 if intermediate % 128 == 0 else 64
    block_n2 = next(n for n in (256, 128, 64) if hidden % n == 0)
    return Tiles(128, block_n1, block_n2, 32, num_warps=8, num_stages=6, group_m=8, tma_l1=True)


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (>= 1)."""
    return 1 << max(0, (n - 1).bit_length())


def max_m_tiles(pair_capacity: int, local_experts: int, block_m: int) -> int:
    """Upper bound on sum over experts of ceil(rows_e / block_m) when sum(rows_e) <= pair_capacity."""
    return min(pair_capacity, pair_capacity // block_m + local_experts)


def choose_tiles_fp8(rows_per_expert: float, hidden: int, intermediate: int) -> Tiles:
    """fp8 grouped-GEMM tiles: K 128 and L1 N 128 (one scale block each), 64 rows, 8 warps.

    Each K step keeps its scaled product next to the accumulators, so register pressure decides:
    ptxas (sm_90a) gives L1 at 128 rows 255 registers and 84 B of spill stores, at 64 rows with 4
    warps 64 B, at 64 rows with 8 warps 174 registers and none; L2 64 x 256 with 8 warps 205 and none
    (128 x 256: 352 B spilled). The first H200 run (128-row L1, 128 x 256 L2, both spilling) took
    245 + 203 us; these tiles are not yet timed (``tune_gemms.py --precision fp8`` sweeps them).
    """
    if hidden % FP8_BLOCK or intermediate % FP8_BLOCK:
        raise ValueError(
            f"hidden={hidden}, intermediate={intermediate}: fp8 needs multiples of {FP8_BLOCK} (the scale block)"
        )
    block_n2 = 256 if hidden % 256 == 0 else FP8_BLOCK
    return Tiles(64, FP8_BLOCK, block_n2, FP8_BLOCK, num_warps=8, num_stages=3 if rows_per_expert <= 96 else 4)
