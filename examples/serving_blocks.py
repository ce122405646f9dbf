"""A tensor-parallel MLP block and an expert-parallel MoE block built from the tutorial ops, compiled with
torch.compile and replayed as CUDA graphs, beside the same blocks written with torch.distributed collectives.

* MLP (tensor-parallel, tokens sharded by rank): ``AllGather(x) @ W_up`` (``AllGatherGEMMModule``), SiLU,
  ``@ W_down``, then AllReduce + residual + RMSNorm (``AllReduceRMSNormModule``). Baseline:
  ``all_gather``, two matmuls, ``all_reduce``, add, ``F.rms_norm``.
* MoE (expert-parallel): a router GEMM, then ``MegaMoEModule``. Baseline: the same router, then
  ``tutorials.megamoe.ep_baseline.ep_forward`` (``all_to_all_single`` dispatch and combine around
  ``torch._grouped_mm``).

Each block runs eager, compiled (``torch.compile(fullgraph=True)``) and as a CUDA graph captured from the
compiled module. An op that refuses capture (AllGather-GEMM built with ``push="copy_engine"`` at world > 1
raises its "cannot be captured" RuntimeError) is reported and that block's graph row falls back to the
compiled module, eager. Outputs are compared with the baseline's (relative L2 error); times are per call,
events around back-to-back calls. The baseline runs over the job's process group: NCCL with one PE per
GPU, gloo when the PEs share one GPU (``TRITON_RAW_SHARED_GPU=1``: NCCL refuses two ranks on a GPU); the
MLP baseline is also compiled over NCCL (torch.compile of gloo's collectives on CUDA tensors ends the
process).

Run from the repository root::

    python -m examples.serving_blocks
    TRITON_RAW_SHARED_GPU=1 torchrun --nproc_per_node=2 -m examples.serving_blocks --json out.json

Exits 1 when an output differs from the baseline's beyond the tolerance (prints a table on rank 0).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from tutorials.allgather_gemm import AllGatherGEMM
from tutorials.allgather_gemm.torch_op import AllGatherGEMMModule
from tutorials.allreduce_rmsnorm import AllReduceRMSNorm
from tutorials.allreduce_rmsnorm.torch_op import AllReduceRMSNormModule
from tutorials.common.ranks import every_rank
from tutorials.common.run_metadata import run_metadata
from tutorials.megamoe import MegaMoE
from tutorials.megamoe.ep_baseline import BF16Experts, ep_forward
from tutorials.megamoe.torch_op import MegaMoEModule

TOKENS_PER_RANK, HIDDEN, INTERMEDIATE_PER_RANK = 128, 1024, 1024
EXPERTS_PER_RANK, MOE_INTERMEDIATE, TOP_K, MOE_TOKENS = 4, 512, 2, 64
EPS = 1e-6
TOLERANCE = 2e-2  # relative L2 error, bf16 operands with fp32 accumulation in differing orders
CALLS = 20


def full_weight(shape: tuple[int, ...], seed: int, dev: torch.device) -> torch.Tensor:
    """The same random bf16 weight on every rank, scaled so activations stay O(1)."""
    g = torch.Generator(device=dev).manual_seed(seed)
    return (torch.randn(*shape, generator=g, device=dev) / shape[-2] ** 0.5).to(torch.bfloat16)


class MLPBlock(torch.nn.Module):
    """``forward(x_shard, residual) -> (norm_out, residual_out)`` through the tutorial ops."""

    def __init__(
        self,
        ag_gemm: AllGatherGEMM,
        norm: AllReduceRMSNorm,
        w_up: torch.Tensor,
        w_down: torch.Tensor,
        norm_weight: torch.Tensor,
    ) -> None:
        super().__init__()
        self.up = AllGatherGEMMModule(ag_gemm, w_up)
        self.norm = AllReduceRMSNormModule(norm, norm_weight, EPS)
        self.register_buffer("w_down", w_down)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        partial = F.silu(self.up(x)) @ self.w_down
        residual = residual.clone()  # the op writes the residual stream in place
        return self.norm(partial, residual), residual


class MLPBlockCollectives(torch.nn.Module):
    """:class:`MLPBlock` with torch.distributed collectives."""

    def __init__(self, w_up: torch.Tensor, w_down: torch.Tensor, norm_weight: torch.Tensor) -> None:
        super().__init__()
        for name, t in (("w_up", w_up), ("w_down", w_down), ("norm_weight", norm_weight)):
            self.register_buffer(name, t)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shards = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(shards, x)  # a list, not all_gather_into_tensor: gloo (shared GPU) runs it too
        partial = F.silu(torch.cat(shards) @ self.w_up) @ self.w_down
        dist.all_reduce(partial)
        residual = residual + partial
        return F.rms_norm(residual, (residual.shape[1],), self.norm_weight, EPS), residual


class MoEBlock(torch.nn.Module):
    """``forward(x) -> y``: router logits, then the MegaMoE layer."""

    def __init__(self, layer: MegaMoE, w_router: torch.Tensor) -> None:
        super().__init__()
        self.moe = MegaMoEModule(layer)
        self.register_buffer("w_router", w_router)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.moe(x, (x @ self.w_router).float())


class MoEBlockCollectives(torch.nn.Module):
    """:class:`MoEBlock` with ``all_to_all_single`` dispatch and combine (eager: its splits are host values)."""

    def __init__(self, w_router: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("w_router", w_router)
        self.experts = BF16Experts(w1, w2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ep_forward(x, (x @ self.w_router).float(), TOP_K, self.experts, EXPERTS_PER_RANK)


def capture(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...]) -> tuple[Callable[[], Any], str]:
    """(replay, note): a CUDA graph of ``fn`` on ``inputs`` replayed by ``replay``; when an op refuses capture
    with RuntimeError, ``fn`` itself called eagerly and the refusal as the note."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (compile, load) outside the capture, as torch.cuda.graphs asks
        fn(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            out = fn(*inputs)
    except RuntimeError as exc:
        if "cannot be captured" not in str(exc):
            raise
        torch.cuda.synchronize()
        return (lambda: fn(*inputs)), f"not captured, eager instead: {str(exc).split(':')[0]}"
    return (lambda: (graph.replay(), out)[1]), "captured"


def per_call_us(call: Callable[[], Any]) -> float:
    """Device time per call of ``CALLS`` back-to-back calls, ranks started together (slowest rank)."""
    call()
    torch.cuda.synchronize()
    dist.barrier()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(CALLS):
        call()
    end.record()
    torch.cuda.synchronize()
    return max(every_rank(begin.elapsed_time(end) / CALLS * 1e3))


def rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-12))


def run_block(
    name: str,
    block: torch.nn.Module,
    baseline: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    compile_baseline: bool,
) -> list[dict[str, Any]]:
    """One row per variant of ``block`` (eager, compiled, graph) and of ``baseline``: error vs the baseline's
    eager output (the first output of a tuple), µs per call, a note."""
    first = lambda out: out[0] if isinstance(out, tuple) else out  # noqa: E731
    want = first(baseline(*inputs))
    compiled = torch.compile(block, fullgraph=True)
    replay, note = capture(compiled, inputs)
    variants: list[tuple[str, Callable[[], Any], str]] = [
        ("ops eager", lambda: block(*inputs), ""),
        ("ops compiled", lambda: compiled(*inputs), ""),
        ("ops graph", replay, note),
        ("collectives eager", lambda: baseline(*inputs), dist.get_backend()),
    ]
    if compile_baseline:
        base_compiled = torch.compile(baseline)
        variants.append(("collectives compiled", lambda: base_compiled(*inputs), dist.get_backend()))
    rows = []
    for variant, call, why in variants:
        err = max(every_rank(rel_error(first(call()), want)))
        rows.append(
            {
                "block": name,
                "variant": variant,
                "rel_err": err,
                "ok": err <= TOLERANCE,
                "us_per_call": per_call_us(call),
                "note": why,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the rows and the run metadata here (rank 0)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("serving_blocks: no CUDA GPU visible; nothing run")
        return 0
    from triton_raw_ext import runtime

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 and not dist.is_initialized():
        # one process: a group of one, so that the baseline's collectives run as they do at world > 1
        torch.cuda.set_device(0)
        dist.init_process_group("cpu:gloo,cuda:nccl", store=dist.HashStore(), rank=0, world_size=1)
    runtime.init()  # torch.distributed from torchrun's environment, then NVSHMEM
    world, rank = dist.get_world_size(), dist.get_rank()
    dev = torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator(device=dev).manual_seed(100 + rank)

    inter = INTERMEDIATE_PER_RANK
    w_up = full_weight((HIDDEN, world * inter), 1, dev)[:, rank * inter : (rank + 1) * inter].contiguous()
    w_down = full_weight((world * inter, HIDDEN), 2, dev)[rank * inter : (rank + 1) * inter].contiguous()
    norm_weight = torch.ones(HIDDEN, dtype=torch.bfloat16, device=dev)
    x = torch.randn(TOKENS_PER_RANK, HIDDEN, generator=g, device=dev).to(torch.bfloat16)
    residual = torch.randn(
        world * TOKENS_PER_RANK, HIDDEN, generator=torch.Generator(device=dev).manual_seed(3), device=dev
    ).to(torch.bfloat16)
    ag_gemm = AllGatherGEMM(TOKENS_PER_RANK, inter, HIDDEN, torch.bfloat16)
    norm = AllReduceRMSNorm(HIDDEN, torch.bfloat16, world * TOKENS_PER_RANK)
    rows = run_block(
        "mlp",
        MLPBlock(ag_gemm, norm, w_up, w_down, norm_weight),
        MLPBlockCollectives(w_up, w_down, norm_weight),
        (x, residual),
        # gloo's collectives (PEs sharing a GPU) crash the process under torch.compile: compile over NCCL only
        compile_baseline="nccl" in dist.get_backend(),
    )

    experts = EXPERTS_PER_RANK * world
    w_router = full_weight((HIDDEN, experts), 4, dev)
    w1 = full_weight((experts, HIDDEN, 2 * MOE_INTERMEDIATE), 5, dev)[rank * EXPERTS_PER_RANK :][:EXPERTS_PER_RANK]
    w2 = full_weight((experts, MOE_INTERMEDIATE, HIDDEN), 6, dev)[rank * EXPERTS_PER_RANK :][:EXPERTS_PER_RANK]
    w1, w2 = w1.contiguous(), w2.contiguous()
    tokens = torch.randn(MOE_TOKENS, HIDDEN, generator=g, device=dev).to(torch.bfloat16)
    with MegaMoE(HIDDEN, MOE_INTERMEDIATE, experts, TOP_K, MOE_TOKENS, w1, w2) as layer:
        rows += run_block(
            "moe", MoEBlock(layer, w_router), MoEBlockCollectives(w_router, w1, w2), (tokens,), compile_baseline=False
        )
        torch.cuda.synchronize()
    ag_gemm.close()
    norm.close()
    ok = all(r["ok"] for r in rows)
    if rank == 0:
        print(f"serving blocks, world {world}")
        print(f"{'block':5} {'variant':20} {'rel err':>9} {'us/call':>9}  result  note")
        for r in rows:
            print(
                f"{r['block']:5} {r['variant']:20} {r['rel_err']:9.2e} {r['us_per_call']:9.1f}  "
                f"{'PASS' if r['ok'] else 'FAIL':6}  {r['note']}"
            )
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({**run_metadata(), "world": world, "rows": rows, "ok": ok}, indent=1))
    torch.cuda.synchronize()
    runtime.finalize()
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
