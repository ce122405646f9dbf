"""Fused AllReduce(SUM) + residual add + RMSNorm as an operator object, and its correctness check.

    op = AllReduceRMSNorm(hidden, dtype, max_tokens, group=None)
    norm_out, residual_out = op(x, residual, weight, eps)

Per rank: ``reduced = AllReduce_SUM(x)``, ``residual_out = reduced + residual``,
``norm_out = RMSNorm(residual_out) * weight``; x, residual: [T, H] (T <= max_tokens), bf16 or fp16,
fp32 arithmetic. One kernel launch per call (kernels.py); the op owns a symmetric workspace
(plan.WorkspaceLayout) that it reuses, and calls may follow each other without synchronisation
and be captured in a CUDA graph.

Run as a module from the repository root (``torchrun --nproc_per_node=N -m
tutorials.allreduce_rmsnorm.allreduce_rmsnorm``, or with ``TRITON_RAW_SHARED_GPU=1`` for N PEs on
one GPU) it checks the op against :mod:`reference` over a table of shapes, prints a
PASS/FAIL table with errors per shape and exits non-zero on any failure; ``--graph-tokens T ...``
also checks CUDA-graph capture and replay at those T. ``--json PATH`` writes the table (rank 0).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

from triton_raw_ext.knobs import wait_timeout_ms

from ..common import op_registry
from ..common.bound_launch import run_loaded
from ..common.ranks import every_rank
from .kernels import kernel_source
from .plan import (
    Algorithm,
    LaunchConfig,
    Push,
    Tuning,
    WorkspaceLayout,
    grid_cap,
    launch_config,
    programs_per_sm,
)

DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
SHARED_GPU_ENV = "TRITON_RAW_SHARED_GPU"


def _group_size(group: Any) -> int:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(group)
    if group is not None:
        raise ValueError("a group was given but torch.distributed is not initialised")
    return int(os.environ.get("WORLD_SIZE", "1"))


def parse_tuning(text: str) -> Tuning:
    """``N[:WARPS[:ROWS]]`` (programs per SM, warps, row batch; empty: the defaults) as a Tuning."""
    if not text:
        return Tuning()
    parts = text.split(":")
    if len(parts) > 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"tuning: expected N[:WARPS[:ROWS]] with integers, got {text!r}")
    names = ("programs_per_sm", "num_warps", "batch_rows")
    return Tuning(**{name: int(p) for name, p in zip(names, parts, strict=False)})


def _pes_sharing_this_gpu(world: int) -> int:
    """PEs that run on this GPU: all of them in shared-GPU mode, else one."""
    flag = os.environ.get(SHARED_GPU_ENV, "").strip().lower()
    return world if flag not in ("", "0", "false", "no", "off") else 1


class AllReduceRMSNorm:
    """The fused op for one (hidden, dtype, max_tokens, group). Construct it on every rank of the
    group (collective: it initialises NVSHMEM when needed and allocates the symmetric workspace).
    ``handle`` reaches it from the custom op ``triton_raw_ext::allreduce_rmsnorm`` (torch_op) until
    :meth:`close`.

    ``algorithm`` forces ONESHOT or TWOSHOT for every call (for tests); by default each call picks
    by message size (plan.choose_algorithm). ``tuning`` sets the communicating kernels' launch
    (plan.Tuning: programs per SM, warps, row batch); the grid is capped so that every program
    is resident (fewer programs per SM when fewer fit, plan.programs_per_sm; one per SM over all
    PEs when several share the GPU). ``push`` forces how rows reach peers (plan.Push); by default
    stores through peer pointers when every peer is reachable by load/store (one node, NVLink or
    PCIe P2P), NVSHMEM puts otherwise.
    """

    def __init__(
        self,
        hidden: int,
        dtype: torch.dtype,
        max_tokens: int,
        group: Any = None,
        algorithm: Algorithm | None = None,
        tuning: Tuning | None = None,
        push: Push | None = None,
    ) -> None:
        if dtype not in DTYPE_NAMES:
            raise ValueError(f"dtype must be torch.bfloat16 or torch.float16, got {dtype}")
        if algorithm == Algorithm.LOCAL:
            raise ValueError("algorithm=LOCAL is chosen automatically at world 1; force ONESHOT or TWOSHOT")
        self.hidden, self.dtype, self.max_tokens, self.group = hidden, dtype, max_tokens, group
        world = _group_size(group)
        self.rank = 0
        if world > 1:
            from triton_raw_ext import runtime

            runtime.init(group)
            if runtime.n_pes() != world:
                raise RuntimeError(
                    f"NVSHMEM has {runtime.n_pes()} PEs but the group has {world} ranks; "
                    f"initialise NVSHMEM over the same group"
                )
            self.rank = runtime.my_pe()
        self.world = world
        self.forced = algorithm if world > 1 else None
        elem = torch.empty((), dtype=dtype).element_size()
        self.layout = WorkspaceLayout(world, hidden, max_tokens, elem, forced=self.forced)
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.tuning = tuning or Tuning()
        self.wait_ms = wait_timeout_ms()  # the bound of the kernel's waits for peers' signals
        self._kernels: dict[tuple[int, int, int, bool], Any] = {}
        self._resident: dict[Algorithm, int] = {}
        self._plans: dict[tuple[int, Tuning], tuple[Algorithm, LaunchConfig]] = {}  # _plan's, by T and tuning
        self._sealed = False  # set once _preload has loaded every kernel a call at world > 1 may use
        self._allocate()
        self._workspace_addresses = [t.data_ptr() for t in (self.land, self.rs, self.ag, self.sig, self.counters)]
        self._workspace_aligned = self.hidden % 16 == 0 and all(a % 16 == 0 for a in self._workspace_addresses[:3])
        self.push = self._choose_push(push) if world > 1 else Push.PUTS
        if world > 1:
            self._preload()
        self.handle = op_registry.register(self)  # what torch_op's custom op takes to reach this instance

    def close(self) -> None:
        """Unregister the handle (idempotent); the workspace is freed with the last reference."""
        op_registry.unregister(self.handle)

    def _choose_push(self, forced: Push | None) -> Push:
        """STORES when every peer's copy of the workspace is mapped here (``runtime.peer``) at a distance
        that keeps 16-byte vectors; PUTS otherwise, or when forced. Every rank must get the same
        answer (it picks the kernel), so the ranks agree on it over the op's group."""
        from triton_raw_ext import runtime
        from triton_raw_ext.errors import RawRuntimeError

        reasons = []
        for pe in range(self.world):
            if pe == self.rank:
                continue
            try:
                distance = runtime.peer(self.data, pe).data_ptr() - self.data.data_ptr()
            except RawRuntimeError as exc:
                reasons.append(str(exc))
                continue
            if distance % (16 * self.data.element_size()):
                reasons.append(f"PE {pe}'s workspace is {distance} bytes away, not a multiple of 16 elements")
        reasons = [r for rank_reasons in every_rank(reasons, self.group) for r in rank_reasons]
        if forced == Push.STORES and reasons:  # raised on every rank, so none waits for the others
            raise ValueError(f"push=Push.STORES needs every peer reachable by load/store: {reasons[0]}")
        if forced is not None:
            return forced
        return Push.PUTS if reasons else Push.STORES

    def _preload(self) -> None:
        """Compile and load, before any kernel that waits on peers is enqueued, the kernel of every
        algorithm this op can pick (16-byte aligned tensors; :mod:`triton_raw_ext.kernel_loading` says why),
        and size its grid cap (plan.grid_cap); the ranks agree on the cap (the smallest), since
        program p of every rank must handle the same rows."""
        from triton.runtime import driver

        from triton_raw_ext import runtime

        props = driver.active.utils.get_device_properties(self.device.index)
        # max_shared_mem: the most a block may opt in to, 1 KiB under the SM's 228 KiB on sm_90: a safe bound per SM
        sharing = _pes_sharing_this_gpu(self.world)
        algos = {self.layout.algorithm_for(t) for t in (1, self.max_tokens)}  # one-shot up to a size, then two-shot
        for algo in sorted(algos):
            cfg = launch_config(algo, 1, self.hidden, 1, self.tuning)
            kernel = self._kernel(algo, cfg, self.hidden % 16 == 0)
            fit = programs_per_sm(kernel.n_regs, cfg.num_warps, kernel.metadata.shared, props["max_shared_mem"])
            every = every_rank((props["multiprocessor_count"], fit), self.group)
            if min(f for _, f in every) < 1:  # raised on every rank, so none waits for the others
                raise RuntimeError(f"AllReduceRMSNorm: the {algo.name} kernel (H={self.hidden}) does not fit on an SM")
            self._resident[algo] = min(grid_cap(sms, f, self.tuning.programs_per_sm, sharing) for sms, f in every)
        self._sealed = True
        runtime.host_barrier()

    def _allocate(self) -> None:
        lay = self.layout
        if self.world == 1:
            dummy = torch.empty(1, dtype=self.dtype, device=self.device)
            self.land = self.rs = self.ag = dummy
            self.sig = self.counters = torch.empty(1, dtype=torch.int64, device=self.device)
            return
        from triton_raw_ext import runtime

        self.data = runtime.zeros((max(lay.data_elements, 1),), self.dtype)
        self.land = self.data[lay.oneshot_offset :]
        self.rs = self.data[lay.rs_offset :]
        self.ag = self.data[lay.ag_offset :]
        self.sig = runtime.zeros(lay.signal_shape, torch.int64)
        self.counters = torch.zeros(lay.max_tokens, dtype=torch.int64, device=self.device)

    def algorithm_for(self, tokens: int) -> Algorithm:
        return self.layout.algorithm_for(tokens)

    def _kernel(self, algo: Algorithm, cfg: LaunchConfig, aligned: bool) -> Any:
        """The compiled and loaded kernel; at world > 1 only those :meth:`_preload` loaded (a module
        loaded while a peer's kernel waits for this rank can hang the job)."""
        key = (int(algo), cfg.num_warps, cfg.batch_rows, aligned)
        if key not in self._kernels:
            if self._sealed:
                raise ValueError(
                    "AllReduceRMSNorm: at world > 1 every tensor (x, residual, weight, out) must start at a "
                    "16-byte aligned address; pass contiguous tensors that own their storage (e.g. .clone())"
                )
            import triton
            from triton.runtime import driver

            from triton_raw_ext import kernel_loading

            target = driver.active.get_current_target()
            src = kernel_source(
                int(algo), self.world, cfg.block_h, DTYPE_NAMES[self.dtype], aligned, int(self.push), cfg.batch_rows
            )
            compiled = triton.compile(src, target=target, options={"num_warps": cfg.num_warps})
            self._kernels[key] = kernel_loading.load(compiled)
        return self._kernels[key]

    def _plan(self, tokens: int) -> tuple[Algorithm, LaunchConfig]:
        """The algorithm and launch configuration of a call of ``tokens`` rows (the same for every call of
        that size: the layout, the grid caps and the tuning are fixed once the op is built)."""
        key = (tokens, self.tuning)
        plan = self._plans.get(key)
        if plan is None:
            algo = self.layout.algorithm_for(tokens)
            plan = self._plans[key] = (algo, launch_config(algo, tokens, self.hidden, self._resident.get(algo, 1),
                                                           self.tuning))  # fmt: skip
        return plan

    def __call__(
        self,
        x: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        eps: float = 1e-6,
        out: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run on the current stream; returns (norm_out, residual_out), written into ``out`` if given.
        Every rank must call with the same T; inputs must be contiguous CUDA tensors of the op's dtype."""
        tokens = x.shape[0] if x.dim() == 2 else -1
        for name, t, shape in (
            ("x", x, (tokens, self.hidden)),
            ("residual", residual, (tokens, self.hidden)),
            ("weight", weight, (self.hidden,)),
        ):
            if (
                tuple(t.shape) != shape
                or t.dtype != self.dtype
                or not t.is_contiguous()
                or t.device != self.device
            ):
                raise ValueError(
                    f"{name}: expected a contiguous {self.dtype} tensor of shape {shape} on "
                    f"{self.device}, got {tuple(t.shape)} {t.dtype} on {t.device}"
                )
        if not 1 <= tokens <= self.max_tokens:
            raise ValueError(f"T={tokens} outside 1..max_tokens={self.max_tokens}")
        norm_out, res_out = out if out is not None else (torch.empty_like(x), torch.empty_like(x))
        for t in (norm_out, res_out):
            if (
                t.shape != x.shape
                or t.dtype != self.dtype
                or not t.is_contiguous()
                or t.device != self.device
            ):
                raise ValueError(f"out: expected contiguous {self.dtype} tensors of shape {tuple(x.shape)}")
        algo, cfg = self._plan(tokens)
        # addresses, not tensors: the launcher would ask each tensor and the driver for them (all on self.device)
        addresses = [t.data_ptr() for t in (x, residual, weight, norm_out, res_out)]
        aligned = self._workspace_aligned and not any(a % 16 for a in addresses)
        lay = self.layout
        args = (*addresses, *self._workspace_addresses, tokens, self.hidden, float(eps), self.rank, lay.max_tokens,
                lay.oneshot_rows, lay.rs_rows, self.wait_ms, self.world, int(algo), cfg.block_h, int(self.push),
                cfg.batch_rows)  # fmt: skip
        run_loaded(self._kernel(algo, cfg, aligned), (cfg.grid, 1, 1), args)
        return norm_out, res_out


# ----------------------------------------------------------------------------------------------
# Correctness check (script mode)

TOKENS = (1, 16, 64, 128, 256, 1024, 4096)
HIDDENS = (2048, 4096, 7168, 8192)
EPS = 1e-6
CALLS_PER_CASE = 3  # back to back, different inputs, no synchronisation between them


def _rank_inputs(case: int, world: int, tokens: int, hidden: int, dtype: torch.dtype, device: torch.device):
    from .reference import make_inputs

    return [make_inputs(case, r, tokens, hidden, dtype, device) for r in range(world)]


def check_case(op: AllReduceRMSNorm, case: int, tokens: int, graph: bool = False) -> dict[str, Any]:
    """Run CALLS_PER_CASE back-to-back calls (or graph replays) on poisoned outputs; compare each."""
    from .reference import compare, reference

    rows = []
    calls = []
    for call in range(CALLS_PER_CASE):
        inputs = _rank_inputs(case * CALLS_PER_CASE + call, op.world, tokens, op.hidden, op.dtype, op.device)
        calls.append(inputs)
    outs = [
        (
            torch.full((tokens, op.hidden), float("nan"), dtype=op.dtype, device=op.device),
            torch.full((tokens, op.hidden), float("nan"), dtype=op.dtype, device=op.device),
        )
        for _ in calls
    ]
    if graph:
        static_in = [t.clone() for t in calls[0][op.rank]]
        static_out = (torch.empty_like(outs[0][0]), torch.empty_like(outs[0][1]))
        op(*static_in, EPS, out=static_out)  # compile and load outside the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            op(*static_in, EPS, out=static_out)
        for inputs, (norm, res) in zip(calls, outs, strict=True):
            for dst, src in zip(static_in, inputs[op.rank], strict=True):
                dst.copy_(src)
            static_out[0].fill_(float("nan"))
            static_out[1].fill_(float("nan"))
            g.replay()
            norm.copy_(static_out[0])
            res.copy_(static_out[1])
    else:
        for inputs, o in zip(calls, outs, strict=True):
            op(*inputs[op.rank], EPS, out=o)
    torch.cuda.synchronize()
    for inputs, (norm, res) in zip(calls, outs, strict=True):
        xs = [i[0] for i in inputs]
        _, residual, weight = inputs[op.rank]
        ref_norm, ref_res = reference(xs, residual, weight, EPS)
        rows.append((compare(norm, ref_norm, op.dtype), compare(res, ref_res, op.dtype)))
    worst_norm = max(rows, key=lambda r: r[0].worst_ratio)[0]
    worst_res = max(rows, key=lambda r: r[1].worst_ratio)[1]
    return {
        "T": tokens, "H": op.hidden, "dtype": DTYPE_NAMES[op.dtype], "world": op.world,
        "algo": op.algorithm_for(tokens).name.lower(), "push": op.push.name.lower(), "graph": graph,
        "norm_max_abs": worst_norm.max_abs, "norm_max_rel": worst_norm.max_rel,
        "res_max_abs": worst_res.max_abs, "res_max_rel": worst_res.max_rel,
        "worst_ratio": max(worst_norm.worst_ratio, worst_res.worst_ratio),
        "ok": all(a.ok and b.ok for a, b in rows),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description="Correctness check of AllReduceRMSNorm (run under torchrun)")
    parser.add_argument("--tokens", type=int, nargs="*", default=list(TOKENS))
    parser.add_argument("--hidden", type=int, nargs="*", default=list(HIDDENS))
    parser.add_argument("--dtypes", nargs="*", default=["bf16", "fp16"], choices=["bf16", "fp16"])
    parser.add_argument("--algorithm", choices=["auto", "oneshot", "twoshot"], default="auto")
    parser.add_argument(
        "--graph-tokens",
        type=int,
        nargs="*",
        default=[],
        help="for these T, also check CUDA-graph capture and replay",
    )
    parser.add_argument("--push", choices=["auto", "puts", "stores"], default="auto", help="how rows reach peers")
    parser.add_argument(
        "--tuning", type=parse_tuning, default=Tuning(), metavar="N[:WARPS[:ROWS]]",
        help="programs per SM, warps, row batch (default: plan.Tuning's)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, help="write the table here (rank 0)")
    args = parser.parse_args()
    forced = None if args.algorithm == "auto" else Algorithm[args.algorithm.upper()]
    push = None if args.push == "auto" else Push[args.push.upper()]
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        from triton_raw_ext import runtime

        runtime.init()
    else:
        torch.cuda.set_device(0)
    by_name = {v: k for k, v in DTYPE_NAMES.items()}
    results = []
    case = 0
    for dtype_name in args.dtypes:
        for hidden in args.hidden:
            op = AllReduceRMSNorm(
                hidden, by_name[dtype_name], max(args.tokens), algorithm=forced,
                tuning=args.tuning, push=push,
            )  # fmt: skip
            for tokens in args.tokens:
                for graph in [False, True] if tokens in args.graph_tokens else [False]:
                    case += 1
                    row = check_case(op, case, tokens, graph)
                    row["ok"] = all(every_rank(row["ok"]))
                    results.append(row)
            del op
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:
        print(
            f"{'world':>5} {'dtype':>5} {'H':>5} {'T':>5} {'algo':>8} {'graph':>5} {'norm abs':>9} "
            f"{'norm rel':>9} {'res abs':>9} {'res rel':>9} {'err/tol':>7}  result"
        )
        for r in results:
            print(
                f"{r['world']:5d} {r['dtype']:>5} {r['H']:5d} {r['T']:5d} {r['algo']:>8} {r['graph']!s:>5} "
                f"{r['norm_max_abs']:9.2e} {r['norm_max_rel']:9.2e} {r['res_max_abs']:9.2e} "
                f"{r['res_max_rel']:9.2e} {r['worst_ratio']:7.3f}  {'PASS' if r['ok'] else 'FAIL'}"
            )
        failed = sum(not r["ok"] for r in results)
        print(f"correctness world={world}: {len(results) - failed}/{len(results)} PASS")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"world": world, "results": results}, indent=1))
    ok = all(r["ok"] for r in results)
    if world > 1:
        from triton_raw_ext import runtime

        torch.cuda.synchronize()
        runtime.finalize()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
