"""Launch description of every kernel of one layer call: pure Python, shared by the layer and aot.py.

Contract: :func:`launches` returns the kernels of one call in launch order. Each
:class:`KernelLaunch` names its runtime parameters (kernel parameter, the key of the tensor or
integer the layer binds to it, Triton signature type for ahead-of-time compilation), its
constexprs, grid, warps and stages. The keys are the buffer names of :class:`MoEConfig` plus
``logits``, ``x``, ``w1``, ``w2``, ``y`` (tensors) and ``T``, ``W``, ``me`` (integers).
``barrier_before`` marks the launches that need every rank past a barrier_all first (only
relevant when world > 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import moe_kernels as K
from moe_config import MoEConfig, Tiles, max_m_tiles, next_pow2

ROUTE_BLOCK_T = 16
PLAN_BLOCK_T = 128


@dataclass(frozen=True)
class KernelLaunch:
    """One kernel launch of a layer call."""

    name: str
    fn: Any  # triton JITFunction
    params: tuple[tuple[str, str, str], ...]  # (kernel parameter, binding key, signature type)
    constexprs: dict[str, int] = field(default_factory=dict)
    grid: tuple[int, ...] = (1,)
    num_warps: int = 4
    num_stages: int = 1
    barrier_before: bool = False

    def signature(self) -> dict[str, str]:
        """Triton signature for ASTSource: runtime parameters typed, constexprs marked."""
        sig = {p: t for p, _, t in self.params}
        sig.update({c: "constexpr" for c in self.constexprs})
        return sig


def row_block(hidden: int, cap: int = 1024) -> int:
    """Largest power of two <= cap dividing ``hidden`` (a row chunk for copy/sum loops)."""
    b = cap
    while hidden % b:
        b //= 2
    return b


def _p(name: str, key: str, sig: str) -> tuple[str, str, str]:
    return (name, key, sig)


def launches(cfg: MoEConfig, tiles: Tiles, tokens: int) -> list[KernelLaunch]:
    """The launches of one call with ``tokens`` (<= cfg.max_tokens) tokens on this rank."""
    if not 1 <= tokens <= cfg.max_tokens:
        raise ValueError(f"tokens={tokens} must be in [1, max_tokens={cfg.max_tokens}]")
    h, i, k, e_loc, t_max, w = (
        cfg.hidden,
        cfg.intermediate,
        cfg.top_k,
        cfg.local_experts,
        cfg.max_tokens,
        cfg.world,
    )
    k_p2, e_p2 = next_pow2(k), next_pow2(e_loc)
    m_tiles = max_m_tiles(cfg.pair_capacity, e_loc, tiles.block_m)
    gemm = dict(num_warps=tiles.num_warps, num_stages=tiles.num_stages)
    return [
        KernelLaunch(
            "moe_route",
            K.moe_route,
            (
                _p("logits_ptr", "logits", "*fp32"),
                _p("x_ptr", "x", "*bf16"),
                _p("x_sym", "x_sym", "*bf16"),
                _p("ids_sym", "topk_ids", "*i32"),
                _p("w_sym", "topk_w", "*fp32"),
                _p("T", "T", "i32"),
            ),
            dict(
                E=cfg.num_experts,
                E_P2=next_pow2(cfg.num_experts),
                K=k,
                K_P2=k_p2,
                H=h,
                BLOCK_T=ROUTE_BLOCK_T,
                BLOCK_H=row_block(h, 256),
            ),
            grid=(triton_cdiv(tokens, ROUTE_BLOCK_T),),
        ),
        KernelLaunch(
            "moe_plan",
            K.moe_plan,
            (
                _p("ids_sym", "topk_ids", "*i32"),
                _p("slot_ptr", "slot", "*i32"),
                _p("send_idx_sym", "send_idx", "*i32"),
                _p("send_count_sym", "send_count", "*i32"),
                _p("counters_ptr", "counters", "*i32"),
                _p("T", "T", "i32"),
                _p("W", "W", "i32"),
            ),
            dict(T_MAX=t_max, K=k, K_P2=k_p2, E_LOC=e_loc, E2_P2=next_pow2(2 * e_loc), BLOCK_T=PLAN_BLOCK_T),
            grid=(w,),
        ),
        KernelLaunch(
            "moe_dispatch",
            K.moe_dispatch,
            (
                _p("x_sym", "x_sym", "*bf16"),
                _p("ids_sym", "topk_ids", "*i32"),
                _p("w_sym", "topk_w", "*fp32"),
                _p("send_idx_sym", "send_idx", "*i32"),
                _p("send_count_sym", "send_count", "*i32"),
                _p("recv_x", "recv_x", "*bf16"),
                _p("recv_ids", "recv_ids", "*i32"),
                _p("recv_w", "recv_w", "*fp32"),
                _p("recv_n", "recv_n", "*i32"),
                _p("counters_ptr", "counters", "*i32"),
                _p("me", "me", "i32"),
            ),
            dict(T_MAX=t_max, H=h, K=k, K_P2=k_p2, E_LOC=e_loc),
            grid=(w, t_max),
            barrier_before=True,
        ),
        KernelLaunch(
            "moe_place",
            K.moe_place,
            (
                _p("recv_ids", "recv_ids", "*i32"),
                _p("recv_n", "recv_n", "*i32"),
                _p("counters_ptr", "counters", "*i32"),
                _p("sorted_row", "sorted_row", "*i32"),
                _p("inv_pos", "inv_pos", "*i32"),
                _p("me", "me", "i32"),
            ),
            dict(T_MAX=t_max, K=k, K_P2=k_p2, E_LOC=e_loc, E_P2=e_p2),
            grid=(w, t_max),
        ),
        KernelLaunch(
            "moe_l1_swiglu",
            K.moe_l1_swiglu,
            (
                _p("recv_x", "recv_x", "*bf16"),
                _p("sorted_row", "sorted_row", "*i32"),
                _p("counters_ptr", "counters", "*i32"),
                _p("w1_ptr", "w1", "*bf16"),
                _p("h_ptr", "h", "*bf16"),
            ),
            dict(
                H=h,
                INTER=i,
                E_LOC=e_loc,
                E_P2=e_p2,
                BLOCK_M=tiles.block_m,
                BLOCK_N=tiles.block_n1,
                BLOCK_K=tiles.block_k,
                M_TILES=m_tiles,
                GROUP_M=tiles.group_m,
            ),
            grid=(m_tiles * (i // tiles.block_n1),),
            **gemm,
        ),
        KernelLaunch(
            "moe_l2",
            K.moe_l2,
            (
                _p("h_ptr", "h", "*bf16"),
                _p("counters_ptr", "counters", "*i32"),
                _p("w2_ptr", "w2", "*bf16"),
                _p("y_ptr", "y_pair", "*bf16"),
            ),
            dict(
                H=h,
                INTER=i,
                E_LOC=e_loc,
                E_P2=e_p2,
                BLOCK_M=tiles.block_m,
                BLOCK_N=tiles.block_n2,
                BLOCK_K=tiles.block_k,
                M_TILES=m_tiles,
                GROUP_M=tiles.group_m,
            ),
            grid=(m_tiles * (h // tiles.block_n2),),
            **gemm,
        ),
        KernelLaunch(
            "moe_combine",
            K.moe_combine,
            (
                _p("recv_w", "recv_w", "*fp32"),
                _p("recv_n", "recv_n", "*i32"),
                _p("inv_pos", "inv_pos", "*i32"),
                _p("y_pair", "y_pair", "*bf16"),
                _p("staging", "staging", "*bf16"),
                _p("comb_sym", "comb", "*bf16"),
                _p("me", "me", "i32"),
            ),
            dict(T_MAX=t_max, H=h, K=k, K_P2=k_p2, BLOCK_H=row_block(h, 1024 // k_p2 * 4)),
            grid=(w, t_max),
        ),
        KernelLaunch(
            "moe_reduce",
            K.moe_reduce,
            (
                _p("comb_sym", "comb", "*bf16"),
                _p("slot_ptr", "slot", "*i32"),
                _p("y_ptr", "y", "*bf16"),
                _p("W", "W", "i32"),
            ),
            dict(T_MAX=t_max, H=h, W_P2=next_pow2(w), BLOCK_H=row_block(h, 2048 // next_pow2(w))),
            grid=(tokens,),
            barrier_before=True,
        ),
    ]


def triton_cdiv(a: int, b: int) -> int:
    """ceil(a / b) for positive integers."""
    return -(-a // b)
