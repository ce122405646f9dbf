"""The expert-parallel MoE layer a torch user would write: the distributed baseline of the benchmark.

Contract of :func:`ep_forward` (collective over ``group``; every rank calls it with its own tokens):
y [T, H] in x's dtype for this rank's tokens x [T, H] and router logits [T, E], where this rank
owns experts ``[rank * E/W, (rank + 1) * E/W)`` with weights ``w1_local`` [E/W, H, 2I] and
``w2_local`` [E/W, I, H] (same layout as ``MegaMoE``). The math is :func:`reference.reference`'s:
y[t] = sum_k w[t, k] * L2_e(SwiGLU(L1_e(x[t]))), routed by :func:`routing.route`; the expert
GEMMs and SwiGLU run in the dtype of the inputs (bf16 in the benchmark), the weighted sum in float32.

Data flow, one row per (token, expert) pair, as the common all-to-all dispatchers do (no
deduplication of a token sent to several experts of one rank):

1. route, then sort the pairs by global expert id: this groups them by destination rank and, within
   it, by local expert;
2. exchange the pair counts per (destination, local expert) with ``all_to_all_single`` (equal splits
   of E/W), so each rank knows how many rows it gets from each source for each of its experts;
3. exchange the rows with ``all_to_all_single`` (uneven splits; the host reads the counts);
4. group the received rows by local expert, run one L1 -> SwiGLU -> L2 per expert;
5. send the outputs back with ``all_to_all_single`` (splits swapped), weight and sum them on the
   source rank.

Works with any backend that implements ``all_to_all_single`` for the tensors' device: NCCL for CUDA
tensors, gloo for CPU tensors (the CPU test runs this exact code over gloo).
"""

from __future__ import annotations

from typing import Any

import torch

from .reference import expert_forward
from .routing import route


def ep_forward(
    x: torch.Tensor,
    logits: torch.Tensor,
    top_k: int,
    w1_local: torch.Tensor,
    w2_local: torch.Tensor,
    group: Any = None,
) -> torch.Tensor:
    """This rank's MoE output (see the module docstring); torch.distributed must be initialised."""
    import torch.distributed as dist

    if not dist.is_initialized():
        raise RuntimeError(
            "ep_forward needs torch.distributed: call init_process_group() (torchrun sets the environment) first"
        )
    world = dist.get_world_size(group)
    e_loc = w1_local.shape[0]
    if x.dim() != 2 or tuple(logits.shape) != (x.shape[0], world * e_loc) or w2_local.shape[0] != e_loc:
        raise ValueError(
            f"ep_forward: x [T, H], logits [T, {world} ranks x {e_loc} local experts], w1/w2 with {e_loc} "
            f"experts expected; got x {tuple(x.shape)}, logits {tuple(logits.shape)}, w1 {tuple(w1_local.shape)}, "
            f"w2 {tuple(w2_local.shape)}"
        )
    hidden = x.shape[1]
    ids, weights = route(logits, top_k)
    flat = ids.flatten().long()  # pair p = token * top_k + j
    order = torch.argsort(flat, stable=True)  # by destination rank, then by local expert
    token_of_pair = torch.div(order, top_k, rounding_mode="floor")
    send_counts = torch.bincount(flat, minlength=world * e_loc)  # [destination, local expert]
    recv_counts = torch.empty_like(send_counts)  # [source, my local expert]
    dist.all_to_all_single(recv_counts, send_counts, group=group)
    send_matrix, recv_matrix = send_counts.view(world, e_loc), recv_counts.view(world, e_loc)
    send_splits, recv_splits = send_matrix.sum(1).tolist(), recv_matrix.sum(1).tolist()

    received = x.new_empty(sum(recv_splits), hidden)
    dist.all_to_all_single(received, x[token_of_pair], recv_splits, send_splits, group=group)
    local_expert = torch.arange(e_loc, device=x.device).repeat(world)
    by_expert = torch.argsort(torch.repeat_interleave(local_expert, recv_counts), stable=True)
    rows = received[by_expert]
    outputs = torch.empty_like(rows)
    start = 0
    for e, n in enumerate(recv_matrix.sum(0).tolist()):
        if n:
            outputs[start : start + n] = expert_forward(rows[start : start + n], w1_local[e], w2_local[e])
        start += n
    back = torch.empty_like(received)
    back[by_expert] = outputs

    returned = x.new_empty(flat.numel(), hidden)  # the pairs' outputs, in send order
    dist.all_to_all_single(returned, back, send_splits, recv_splits, group=group)
    y = torch.zeros(x.shape[0], hidden, dtype=torch.float32, device=x.device)
    y.index_add_(0, token_of_pair, weights.flatten()[order][:, None] * returned.float())
    return y.to(x.dtype)
