"""Launch description of every kernel of one layer call: pure Python, shared by the layer and aot.py.

Contract: :func:`launches` returns the kernels of one call in launch order. Each
:class:`KernelLaunch` names its runtime parameters (kernel parameter, the key of the tensor or
integer the layer binds to it), its constexprs, grid, warps and stages; the parameters' types are
those of what is bound (for ahead-of-time compiles: ``megamoe.meta_bindings``). The keys are the
buffer names of :class:`MoEConfig` plus ``logits``, ``x``, ``y`` and the weights of
``quant.expert_weights`` (``w1``, ``w2`` for bf16; ``w1q``, ``w1s``, ``w2q``, ``w2s`` for fp8)
(tensors) and ``T``, ``W``, ``me``, ``wait_ms`` (integers).
``barrier_before`` marks the launches that need every rank past a barrier first (only relevant
when world > 1): :func:`barrier_launch`, whose waits are bounded, unlike NVSHMEM's stream barrier.
``step`` names what a launch does in the call, after the bf16 kernel of that step, so the same names
select a step in either precision. At world 1 the plan moves no token
rows (:func:`_local`): L1 binds its A rows to ``x`` (fp8: ``x_sym``/``x_scale``), the combine binds
its staging rows to ``y``, and there is no reduce.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import kernels as K
from . import kernels_fp8 as KF
from .config import FP8_BLOCK, MoEConfig, Tiles, max_m_tiles, next_pow2

ROUTE_BLOCK_T = 16
ROUTE_CHUNK = 512  # at most this many columns of x per route program
COMBINE_CHUNK = 1024  # at most this many output columns per combine program
PLAN_BLOCK_T = 128


@dataclass(frozen=True)
class KernelLaunch:
    """One kernel launch of a layer call."""

    name: str
    fn: Any  # triton JITFunction
    params: tuple[tuple[str, str | None], ...]  # (kernel parameter, binding key; None passes None)
    constexprs: dict[str, int] = field(default_factory=dict)
    grid: tuple[int, ...] = (1,)
    num_warps: int = 4
    num_stages: int = 1
    barrier_before: bool = False
    step: str = ""  # the step of a call this launch performs, named after its bf16 kernel ("": ``name``)

    def __post_init__(self) -> None:
        if not self.step:
            object.__setattr__(self, "step", self.name)

    def arguments(self, bindings: Mapping[str, Any]) -> list[Any]:
        """The kernel's runtime arguments, in order, from a call's ``bindings`` (key -> tensor or integer)."""
        return [None if key is None else bindings[key] for _, key in self.params]


def install_descriptor_scratch(device: Any) -> None:
    """Give Triton a scratch allocator on ``device`` (torch's caching allocator, so CUDA-graph capture
    works): device-side TMA descriptors (``Tiles.tma``) live in it. Process-wide, like
    ``triton.set_allocator`` itself."""
    import torch
    import triton

    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device=device))


def row_block(hidden: int, cap: int = 1024) -> int:
    """Largest power of two <= cap dividing ``hidden`` (a row chunk for copy/sum loops)."""
    b = cap
    while hidden % b:
        b //= 2
    return b


def _check_tokens(cfg: MoEConfig, tokens: int) -> None:
    if not 1 <= tokens <= cfg.max_tokens:
        raise ValueError(f"tokens={tokens} must be in [1, max_tokens={cfg.max_tokens}]")


def _gemm(
    cfg: MoEConfig, tiles: Tiles, n: int, block_n: int, **blocks: int
) -> tuple[dict[str, int], dict[str, Any]]:
    """(constexprs, launch options) of a grouped GEMM with ``n`` output columns in tiles of ``block_n``;
    ``blocks``: the kernel's tile constexprs besides BLOCK_M."""
    constexprs = _gemm_constexprs(cfg, tiles, **blocks)
    grid = (constexprs["M_TILES"] * (n // block_n),)
    return constexprs, dict(grid=grid, num_warps=tiles.num_warps, num_stages=tiles.num_stages)


def _gemm_constexprs(cfg: MoEConfig, tiles: Tiles, **blocks: int) -> dict[str, int]:
    """The constexprs every grouped-GEMM kernel takes (shapes, BLOCK_M, the M-tile bound and order),
    with the kernel's own ``blocks``."""
    return dict(
        H=cfg.hidden,
        INTER=cfg.intermediate,
        E_LOC=cfg.local_experts,
        E_P2=next_pow2(cfg.local_experts),
        BLOCK_M=tiles.block_m,
        **blocks,
        M_TILES=max_m_tiles(cfg.pair_capacity, cfg.local_experts, tiles.block_m),
        GROUP_M=tiles.group_m,
    )


def _l1_params(cfg: MoEConfig) -> tuple[tuple[str, str], ...]:
    """Runtime parameters of the bf16 L1 (``moe_l1_swiglu``), which ``moe_gemms`` starts with."""
    return (
        ("recv_x", "x" if _local(cfg) else "recv_x"),
        ("sorted_row", "sorted_row"),
        ("counters_ptr", "counters"),
        ("w1_ptr", "w1"),
        ("h_ptr", "h"),
    )


def barrier_launch(cfg: MoEConfig) -> KernelLaunch:
    """The barrier between the phases of a call at world > 1 (before each ``barrier_before`` launch) and in
    ``MegaMoE.close``: one program; each PE raises its word on every peer, then waits for every peer's,
    each wait bounded by ``wait_ms`` (moe-device.cu ``moe_barrier``)."""
    return KernelLaunch(
        "moe_barrier",
        K.moe_barrier_kernel,
        (
            ("arrived_sym", "barrier_arrived"),
            ("epoch_ptr", "barrier_epoch"),
            ("me", "me"),
            ("W", "W"),
            ("wait_ms", "wait_ms"),
        ),
        num_warps=1,
    )


def _plan(cfg: MoEConfig) -> KernelLaunch:
    e_loc, k = cfg.local_experts, cfg.top_k
    return KernelLaunch(
        "moe_plan",
        K.moe_plan,
        (
            ("ids_sym", "topk_ids"),
            ("slot_ptr", "slot"),
            ("send_idx_sym", "send_idx"),
            ("send_count_sym", "send_count"),
            ("counters_ptr", "counters"),
            ("T", "T"),
            ("W", "W"),
        ),
        dict(
            T_MAX=cfg.max_tokens,
            K=k,
            K_P2=next_pow2(k),
            E_LOC=e_loc,
            E2_P2=next_pow2(2 * e_loc),
            BLOCK_T=PLAN_BLOCK_T,
        ),
        grid=(cfg.world,),
    )


def _place(cfg: MoEConfig) -> KernelLaunch:
    e_loc, k = cfg.local_experts, cfg.top_k
    return KernelLaunch(
        "moe_place",
        K.moe_place,
        (
            ("recv_ids", "recv_ids"),
            ("recv_n", "recv_n"),
            ("counters_ptr", "counters"),
            ("sorted_row", "sorted_row"),
            ("inv_pos", "inv_pos"),
            ("me", "me"),
        ),
        dict(T_MAX=cfg.max_tokens, K=k, K_P2=next_pow2(k), E_LOC=e_loc, E_P2=next_pow2(e_loc)),
        grid=(cfg.world, cfg.max_tokens),
    )


def _combine_and_reduce(cfg: MoEConfig, tokens: int) -> list[KernelLaunch]:
    """Combine, then (world > 1) reduce. At world 1 the combine writes y itself: its staging row is
    the token's row (one source, slots in token order) and nothing needs to cross ranks."""
    return [_combine(cfg)] if _local(cfg) else [_combine(cfg), _reduce(cfg, tokens)]


def _local(cfg: MoEConfig) -> bool:
    """World 1: every expert is local, so token rows are read where they are and nothing is pushed."""
    return cfg.world == 1


def _combine(cfg: MoEConfig) -> KernelLaunch:
    """Program (source rank, slot, chunk of COMBINE_CHUNK columns): more programs than rows alone,
    each summing top-k rows of its columns; at world > 1 each pushes its chunk."""
    h, k, k_p2 = cfg.hidden, cfg.top_k, next_pow2(cfg.top_k)
    chunk = row_block(h, COMBINE_CHUNK)
    return KernelLaunch(
        "moe_combine",
        K.moe_combine,
        (
            ("recv_w", "recv_w"),
            ("recv_n", "recv_n"),
            ("inv_pos", "inv_pos"),
            ("y_pair", "y_pair"),
            ("staging", "y" if _local(cfg) else "staging"),
            ("comb_sym", "comb"),
            ("me", "me"),
        ),
        dict(
            T_MAX=cfg.max_tokens,
            H=h,
            K=k,
            K_P2=k_p2,
            BLOCK_H=row_block(chunk, 1024 // k_p2 * 4),
            H_CHUNK=chunk,
            PUSH=not _local(cfg),
        ),
        grid=(cfg.world, cfg.max_tokens, h // chunk),
    )


def _reduce(cfg: MoEConfig, tokens: int) -> KernelLaunch:
    h, w = cfg.hidden, cfg.world
    return KernelLaunch(
        "moe_reduce",
        K.moe_reduce,
        (
            ("comb_sym", "comb"),
            ("slot_ptr", "slot"),
            ("y_ptr", "y"),
            ("W", "W"),
        ),
        dict(T_MAX=cfg.max_tokens, H=h, W_P2=next_pow2(w), BLOCK_H=row_block(h, 2048 // next_pow2(w))),
        grid=(tokens,),
        barrier_before=True,
    )


def _route_constexprs(cfg: MoEConfig) -> dict[str, int]:
    return dict(
        E=cfg.num_experts,
        E_P2=next_pow2(cfg.num_experts),
        K=cfg.top_k,
        K_P2=next_pow2(cfg.top_k),
        H=cfg.hidden,
        BLOCK_T=ROUTE_BLOCK_T,
    )


def _route_chunk(cfg: MoEConfig) -> int:
    """Columns of x each route program copies or quantizes: a (T/16) x (H/chunk) grid keeps the SMs
    busy where T/16 programs alone (32 at 512 tokens) would each stream whole rows. fp8: whole scale
    blocks."""
    return row_block(cfg.hidden, max(ROUTE_CHUNK, FP8_BLOCK) if cfg.precision == "fp8" else ROUTE_CHUNK)


def _dispatch_constexprs(cfg: MoEConfig) -> dict[str, int]:
    k = cfg.top_k
    return dict(
        T_MAX=cfg.max_tokens, H=cfg.hidden, K=k, K_P2=next_pow2(k), E_LOC=cfg.local_experts, PULL_ROWS=not _local(cfg)
    )


def _gemms(cfg: MoEConfig, tiles: Tiles) -> list[KernelLaunch]:
    """bf16 L1 (SwiGLU epilogue) and L2, one launch each."""
    h, i = cfg.hidden, cfg.intermediate
    l1, l1_opts = _gemm(cfg, tiles, i, tiles.block_n1, BLOCK_N=tiles.block_n1, BLOCK_K=tiles.block_k, TMA=tiles.tma_l1)
    l2, l2_opts = _gemm(
        cfg, tiles, h, tiles.block_n2, BLOCK_N=tiles.block_n2, BLOCK_K=tiles.block_k, TMA=tiles.tma_l2,
        PAIRS=cfg.pair_capacity,
    )
    return [
        KernelLaunch("moe_l1_swiglu", K.moe_l1_swiglu, _l1_params(cfg), l1, **l1_opts),
        KernelLaunch(
            "moe_l2",
            K.moe_l2,
            (
                ("h_ptr", "h"),
                ("counters_ptr", "counters"),
                ("w2_ptr", "w2"),
                ("y_ptr", "y_pair"),
            ),
            l2,
            **l2_opts,
        ),
    ]


def _fused_gemms(cfg: MoEConfig, tiles: Tiles) -> list[KernelLaunch]:
    """bf16 L1 and L2 as one persistent launch of ``tiles.gemm_programs`` programs (``moe_gemms``)."""
    constexprs = _gemm_constexprs(
        cfg, tiles, BLOCK_N1=tiles.block_n1, BLOCK_N2=tiles.block_n2, BLOCK_K=tiles.block_k, TMA1=tiles.tma_l1,
        TMA2=tiles.tma_l2, PAIRS=cfg.pair_capacity,
    )  # fmt: skip
    m_tiles = constexprs["M_TILES"]
    if m_tiles + 2 > cfg.gemm_sched_len:
        raise ValueError(f"block_m={tiles.block_m}: moe_gemms needs block_m >= 16")
    if tiles.tma_l2:  # TMA reads of h written by generic stores of other programs need a proxy fence
        raise ValueError("Tiles.gemm_programs (one persistent GEMM launch) needs tma_l2=False")
    constexprs["SCHED_P2"] = next_pow2(m_tiles + 2)
    return [
        KernelLaunch(
            "moe_gemms",
            K.moe_gemms,
            (
                *_l1_params(cfg),
                ("w2_ptr", "w2"),
                ("y_ptr", "y_pair"),
                ("sched_ptr", "gemm_sched"),
            ),
            constexprs,
            grid=(tiles.gemm_programs,),
            num_warps=tiles.num_warps,
            num_stages=tiles.num_stages,
        )
    ]


def launches(cfg: MoEConfig, tiles: Tiles, tokens: int) -> list[KernelLaunch]:
    """The launches of one call with ``tokens`` (<= cfg.max_tokens) tokens on this rank, in
    ``cfg.precision`` (fp8: :func:`launches_fp8`)."""
    if cfg.precision == "fp8":
        return launches_fp8(cfg, tiles, tokens)
    _check_tokens(cfg, tokens)
    h = cfg.hidden
    return [
        KernelLaunch(
            "moe_route",
            K.moe_route,
            (
                ("logits_ptr", "logits"),
                ("x_ptr", "x"),
                ("x_sym", "x_sym"),
                ("ids_sym", "topk_ids"),
                ("w_sym", "topk_w"),
                ("T", "T"),
            ),
            dict(
                _route_constexprs(cfg),
                BLOCK_H=row_block(_route_chunk(cfg), 256),
                H_CHUNK=_route_chunk(cfg),
                COPY_X=not _local(cfg),
            ),
            grid=(triton_cdiv(tokens, ROUTE_BLOCK_T), 1 if _local(cfg) else h // _route_chunk(cfg)),
        ),
        _plan(cfg),
        KernelLaunch(
            "moe_dispatch",
            K.moe_dispatch,
            (
                ("x_sym", "x_sym"),
                ("ids_sym", "topk_ids"),
                ("w_sym", "topk_w"),
                ("send_idx_sym", "send_idx"),
                ("send_count_sym", "send_count"),
                ("recv_x", "recv_x"),
                ("recv_ids", "recv_ids"),
                ("recv_w", "recv_w"),
                ("recv_n", "recv_n"),
                ("counters_ptr", "counters"),
                ("me", "me"),
            ),
            _dispatch_constexprs(cfg),
            grid=(cfg.world, cfg.max_tokens),
            barrier_before=True,
        ),
        _place(cfg),
        *(_fused_gemms(cfg, tiles) if tiles.gemm_programs else _gemms(cfg, tiles)),
        *_combine_and_reduce(cfg, tokens),
    ]


def launches_fp8(cfg: MoEConfig, tiles: Tiles, tokens: int) -> list[KernelLaunch]:
    """The launches of one fp8 call (``cfg.precision == "fp8"``): the fp8 kernels of route, dispatch and
    both GEMMs, the shared plan, place, combine and reduce. Each fp8 launch's ``step`` is the bf16
    kernel it stands in for. ``tiles`` must have block_k = block_n1 = 128 (:func:`choose_tiles_fp8`)."""
    if cfg.precision != "fp8":
        raise ValueError(f"launches_fp8 needs a MoEConfig with precision='fp8', got {cfg.precision!r}")
    if tiles.gemm_programs:
        raise ValueError("Tiles.gemm_programs (one persistent GEMM launch) is bf16 only; set it to 0 for fp8")
    if tiles.tma:
        raise ValueError(
            "Tiles.tma_l1/tma_l2 are for the bf16 GEMMs; the fp8 GEMMs load with pointers (set both False)"
        )
    if (tiles.block_k, tiles.block_n1) != (FP8_BLOCK, FP8_BLOCK):
        raise ValueError(
            f"fp8 tiles need block_k = block_n1 = {FP8_BLOCK} (one scale block per K step and per h tile), "
            f"got block_k={tiles.block_k}, block_n1={tiles.block_n1}; use config.choose_tiles_fp8"
        )
    _check_tokens(cfg, tokens)
    h, i = cfg.hidden, cfg.intermediate
    l1, l1_opts = _gemm(cfg, tiles, i, FP8_BLOCK)
    l2, l2_opts = _gemm(cfg, tiles, h, tiles.block_n2, BLOCK_N=tiles.block_n2)
    return [
        KernelLaunch(
            "moe_route_fp8",
            KF.moe_route_fp8,
            (
                ("logits_ptr", "logits"),
                ("x_ptr", "x"),
                ("x_sym", "x_sym"),
                ("xs_sym", "x_scale"),
                ("ids_sym", "topk_ids"),
                ("w_sym", "topk_w"),
                ("T", "T"),
            ),
            dict(_route_constexprs(cfg), H_CHUNK=_route_chunk(cfg)),
            grid=(triton_cdiv(tokens, ROUTE_BLOCK_T), h // _route_chunk(cfg)),
            step="moe_route",
        ),
        _plan(cfg),
        KernelLaunch(
            "moe_dispatch_fp8",
            KF.moe_dispatch_fp8,
            (
                ("x_sym", "x_sym"),
                ("xs_sym", "x_scale"),
                ("ids_sym", "topk_ids"),
                ("w_sym", "topk_w"),
                ("send_idx_sym", "send_idx"),
                ("send_count_sym", "send_count"),
                ("recv_x", "recv_x"),
                ("recv_xs", "recv_xs"),
                ("recv_ids", "recv_ids"),
                ("recv_w", "recv_w"),
                ("recv_n", "recv_n"),
                ("counters_ptr", "counters"),
                ("me", "me"),
            ),
            _dispatch_constexprs(cfg),
            grid=(cfg.world, cfg.max_tokens),
            barrier_before=True,
            step="moe_dispatch",
        ),
        _place(cfg),
        KernelLaunch(
            "moe_l1_swiglu_fp8",
            KF.moe_l1_swiglu_fp8,
            (
                ("recv_x", "x_sym" if _local(cfg) else "recv_x"),
                ("recv_xs", "x_scale" if _local(cfg) else "recv_xs"),
                ("sorted_row", "sorted_row"),
                ("counters_ptr", "counters"),
                ("w1q_ptr", "w1q"),
                ("w1s_ptr", "w1s"),
                ("h_ptr", "h"),
                ("hs_ptr", "h_scale"),
            ),
            l1,
            **l1_opts,
            step="moe_l1_swiglu",
        ),
        KernelLaunch(
            "moe_l2_fp8",
            KF.moe_l2_fp8,
            (
                ("h_ptr", "h"),
                ("hs_ptr", "h_scale"),
                ("counters_ptr", "counters"),
                ("w2q_ptr", "w2q"),
                ("w2s_ptr", "w2s"),
                ("y_ptr", "y_pair"),
            ),
            l2,
            **l2_opts,
            step="moe_l2",
        ),
        *_combine_and_reduce(cfg, tokens),
    ]


def triton_cdiv(a: int, b: int) -> int:
    """ceil(a / b) for positive integers."""
    return -(-a // b)
