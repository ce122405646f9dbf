"""Routing and dispatch bookkeeping in plain torch (runs on CPU): what the kernels must compute.

Contract:

* :func:`route`: top-k experts per token by logit (ties go to the lower expert id) and weights
  = softmax over the k selected logits (equal to the full softmax renormalised over the top k).
* :func:`send_plan`: for one source rank, the deduplicated send lists: token t goes to rank r
  once if any of its experts lives on r; its slot there is its order among such tokens.
* :func:`receive_counts`: what every rank receives (rows per source, pairs per local expert).
* :func:`simulate`: the whole expert-parallel data flow (dispatch by slot, per-expert GEMMs,
  weighted partial per received row, push back by slot, sum at the source) on lists of per-rank
  tensors, so that its index arithmetic can be checked against :func:`reference.reference`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .reference import expert_forward


def route(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids int32 [T, k], weights float32 [T, k]) from logits [T, E]; ids in descending logit order."""
    if logits.dim() != 2 or not 1 <= top_k <= logits.shape[1]:
        raise ValueError(
            f"route: logits must be [T, E] with 1 <= top_k <= E, got {tuple(logits.shape)}, {top_k}"
        )
    lg = logits.float()
    # Stable descending sort puts equal logits in ascending expert order, matching the kernel.
    vals, ids = torch.sort(lg, dim=1, descending=True, stable=True)
    vals, ids = vals[:, :top_k], ids[:, :top_k]
    return ids.to(torch.int32), torch.softmax(vals, dim=1)


@dataclass(frozen=True)
class SendPlan:
    """One source rank's dispatch bookkeeping (what the plan kernel writes)."""

    slot: torch.Tensor  # int32 [T, W]: slot of token t at rank r, or -1 when t does not go to r
    send_idx: torch.Tensor  # int32 [W, T]: token ids per destination in slot order, -1 padded
    send_count: torch.Tensor  # int32 [W]


def owners(ids: torch.Tensor, local_experts: int) -> torch.Tensor:
    """Owning rank of each global expert id."""
    return torch.div(ids.long(), local_experts, rounding_mode="floor")


def send_plan(ids: torch.Tensor, local_experts: int, world: int) -> SendPlan:
    """Deduplicated per-destination send lists of one source rank with top-k ids ``ids`` [T, k]."""
    t = ids.shape[0]
    own = owners(ids, local_experts)
    sent = torch.stack([(own == r).any(dim=1) for r in range(world)], dim=1)  # [T, W]
    slot = torch.where(
        sent, torch.cumsum(sent.int(), dim=0) - 1, torch.full_like(sent, -1, dtype=torch.int64)
    )
    send_idx = torch.full((world, t), -1, dtype=torch.int32)
    for r in range(world):
        tokens = torch.nonzero(sent[:, r]).flatten()
        send_idx[r, : tokens.numel()] = tokens.int()
    return SendPlan(slot.int(), send_idx, sent.sum(dim=0).int())


def receive_counts(ids_per_rank: list[torch.Tensor], local_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows [W_dst, W_src], pairs [W_dst, local_experts]): deduplicated rows and per-expert pairs."""
    world = len(ids_per_rank)
    rows = torch.zeros(world, world, dtype=torch.int64)
    pairs = torch.zeros(world, local_experts, dtype=torch.int64)
    for src, ids in enumerate(ids_per_rank):
        rows[:, src] = send_plan(ids, local_experts, world).send_count.long()
        flat = ids.long().flatten()
        pairs.view(-1).index_add_(0, flat, torch.ones_like(flat))
    return rows, pairs


def simulate(
    xs: list[torch.Tensor],
    ids_per_rank: list[torch.Tensor],
    weights_per_rank: list[torch.Tensor],
    w1: torch.Tensor,
    w2: torch.Tensor,
) -> list[torch.Tensor]:
    """Per-rank outputs [T, H] (float32) of the expert-parallel algorithm the kernels implement.

    ``w1`` [E, H, 2I] and ``w2`` [E, I, H] hold all experts; rank r uses its block of them.
    Raises if any (token, expert) pair is received twice or never.
    """
    world = len(xs)
    num_experts = w1.shape[0]
    e_loc = num_experts // world
    t_max = max(x.shape[0] for x in xs)
    h = xs[0].shape[1]
    plans = [send_plan(ids, e_loc, world) for ids in ids_per_rank]
    comb = [torch.full((world, t_max, h), float("nan")) for _ in range(world)]
    seen = [torch.zeros(ids.shape, dtype=torch.int64) for ids in ids_per_rank]
    for me in range(world):
        for src in range(world):
            n = int(plans[src].send_count[me])
            toks = plans[src].send_idx[me, :n].long()  # pulled rows, in slot order
            rows = xs[src][toks].float()
            ids = ids_per_rank[src][toks].long()
            wts = weights_per_rank[src][toks].float()
            partial = torch.zeros(n, h)
            for k in range(ids.shape[1]):
                local = ids[:, k] - me * e_loc
                for e in range(e_loc):
                    sel = torch.nonzero(local == e).flatten()
                    if sel.numel():
                        out = expert_forward(
                            rows[sel], w1[me * e_loc + e].float(), w2[me * e_loc + e].float()
                        )
                        partial[sel] += wts[sel, k : k + 1] * out
                        seen[src][toks[sel], k] += 1
            comb[src][me, :n] = partial  # the push into the source's symmetric buffer
    outs = []
    for src in range(world):
        if not torch.equal(seen[src], torch.ones_like(seen[src])):
            counts = seen[src].unique().tolist()
            raise AssertionError(f"rank {src}: some (token, expert) pairs were computed {counts} times")
        slot = plans[src].slot.long()
        y = torch.zeros(xs[src].shape[0], h)
        for r in range(world):
            m = slot[:, r] >= 0
            y[m] += comb[src][r, slot[m, r]]
        outs.append(y)
    return outs
