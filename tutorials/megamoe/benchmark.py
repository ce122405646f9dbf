"""MegaMoE benchmark: the layer (eager and CUDA graph), its grouped GEMMs alone, and a torch baseline.

Baselines, in the same run: at world 1 the torch bf16 per-expert loop (``reference.reference_bf16``);
at world > 1 (one PE per GPU, NCCL) the expert-parallel torch layer ``ep_reference.ep_forward``
(routing, ``all_to_all_single`` of the pairs, per-expert bf16 matmuls + SwiGLU, ``all_to_all_single``
back, weighted sum at the source). Both are checked against the float32 reference before timing; the
benchmark exits 1 when the layer or the baseline is off by more than the correctness check allows.

Timing. World 1: medians of ``triton.testing.do_bench`` (L2 flushed between repeats). World > 1:
every rank runs the same ``--repeats``; each repeat synchronises the GPU, passes a barrier and times
``--inner`` back-to-back calls with CUDA events (per call: the time / inner); the rank maximum of each
repeat is kept, and the rows are the medians of those maxima (p50/p90/p99 in ``rank_max_percentiles_ms``).
The CUDA graph runs at world 1 only. Achieved TFLOP/s per GPU counts the expert-GEMM FLOPs of
``tokens * top_k`` pairs (the average load of a rank) over the row's time.

It also reports the roofline max(weight bytes / 4.27 TB/s, FLOPs / 713 TFLOP/s) of one rank (both
measured on the H200, see the README; no communication) and the fraction of it reached. JSON goes to
``--out`` (default ``$OUT`` or ``bench/results/``)::

    python -m tutorials.megamoe.benchmark                  # world 1, the production per-rank load
    python -m tutorials.megamoe.benchmark --experts 128    # world 1, all 128 experts local
    torchrun --nproc_per_node=8 -m tutorials.megamoe.benchmark --experts 128   # the production shape
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from ..common.ranks import every_rank
from ..common.run_metadata import run_metadata
from ..common.timing import percentile, rank_max
from .ep_reference import ep_forward
from .megamoe import TOL_NORM, TOL_NORM_FP8_VS_FP32, MegaMoE, make_inputs, make_weights
from .reference import reference, reference_bf16

COPY_BW = 4.27e12  # bytes/s, device copy measured on the H200
MATMUL_RATE = 713e12  # FLOP/s, bf16 matmul measured on the H200


# Phases of one call, each re-runnable alone on the data the previous call left (plan zeroes the
# counters that dispatch fills, so the first phase starts at route). At world > 1 they run without the
# call's barriers: with the same inputs every repeat, each rank rewrites the values its peers read.
PHASES = {
    "route_to_place": ("moe_route", "moe_plan", "moe_dispatch", "moe_place"),
    "grouped_gemms": ("moe_l1_swiglu", "moe_l2", "moe_gemms"),
    "combine_reduce": ("moe_combine", "moe_reduce"),
}
# World 1: the two kernels of route_to_place that can rerun alone without changing what the next call
# reads (route rewrites the same routing, plan re-zeroes the counters the call's dispatch fills).
SINGLE_KERNELS = {"route_alone": ("moe_route",), "plan_alone": ("moe_plan",)}
# Rows that do the expert GEMMs of a whole call, so that an achieved TFLOP/s means something.
FLOP_ROWS = ("megamoe_eager", "megamoe_graph", "grouped_gemms", "torch_reference_bf16", "torch_ep_alltoall",
             "megamoe_graph_persistent", "grouped_gemms_persistent")  # fmt: skip
WARMUP_CALLS = 3  # world > 1: untimed calls of each row first (compiles, NCCL communicators)


def _graph(layer: MegaMoE, x: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> torch.cuda.CUDAGraph:
    """One call of ``layer`` captured as a CUDA graph (warmed up on the capture stream first)."""
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        layer(x, logits, out=y)
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        layer(x, logits, out=y)
    return graph


def roofline_s(weight_bytes: int, flops: int) -> float:
    """The floor of one call: max of reading the weights once and doing the expert FLOPs."""
    return max(weight_bytes / COPY_BW, flops / MATMUL_RATE)


def _median_ms(fn: Callable[[], object], rep_ms: int) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=10, rep=rep_ms, return_mode="median"))


def rank_max_ms(fn: Callable[[], object], repeats: int, inner: int) -> list[float]:
    """Per repeat, the maximum over ranks of one call's time in ms (collective: every rank calls it
    with the same ``repeats`` and ``inner``; see the module docstring for the method)."""
    import torch.distributed as dist

    for _ in range(WARMUP_CALLS):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    mine = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        dist.barrier()
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        mine.append(start.elapsed_time(end) / inner)
    return rank_max(every_rank(mine))


def _rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.float() - ref).norm() / ref.norm())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--intermediate", type=int, default=1536)
    parser.add_argument("--experts", type=int, default=16, help="experts in total (world 1: all local)")
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=512, help="tokens per rank")
    parser.add_argument("--skewed", action="store_true", help="one hot expert instead of random routing")
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp8"], help="expert GEMM operands")
    parser.add_argument("--rep-ms", type=int, default=300, help="world 1: do_bench's time per row")
    parser.add_argument("--repeats", type=int, default=20, help="world > 1: timed repeats per row")
    parser.add_argument("--inner", type=int, default=5, help="world > 1: back-to-back calls per repeat")
    parser.add_argument(
        "--out", type=Path, default=Path(os.environ.get("OUT") or "bench/results")
    )
    args = parser.parse_args(argv)

    from triton_raw_ext import runtime as rt

    rt.init()
    world, me = rt.n_pes(), rt.my_pe()
    dev = torch.device("cuda", torch.cuda.current_device())
    h, i, e, k, t = args.hidden, args.intermediate, args.experts, args.top_k, args.tokens
    w1, w2 = make_weights(h, i, e, 5, dev)
    e_loc = e // world
    w1_loc, w2_loc = w1[me * e_loc : (me + 1) * e_loc], w2[me * e_loc : (me + 1) * e_loc]
    layer = MegaMoE(
        h, i, e, k, t, w1_loc, w2_loc, precision=args.precision
    )  # fp8: the phases below select the fp8 kernels by their steps (named after the bf16 kernels)
    x, logits = make_inputs(t, h, e, args.skewed, 100 + me, dev)
    y = torch.empty_like(x)
    layer(x, logits, out=y)
    torch.cuda.synchronize()
    ids, wts = (v.clone() for v in layer.routing(t))
    ref = reference(x, ids, wts, w1, w2)
    rel_err = _rel_err(y, ref)
    if world == 1:
        baseline_name, baseline = "torch_reference_bf16", functools.partial(reference_bf16, x, ids, wts, w1, w2)
    else:
        baseline_name, baseline = "torch_ep_alltoall", functools.partial(ep_forward, x, logits, k, w1_loc, w2_loc)
    baseline_err = _rel_err(baseline(), ref)
    bindings = layer._bindings(x, logits, y)

    timed: dict[str, Callable[[], object]] = {"megamoe_eager": lambda: layer(x, logits, out=y)}
    # each phase alone on the last call's data, the order keeps it valid; at world 1 then route and plan
    # alone (the graph replays below restore a whole call's state)
    for phase, kernels in {**PHASES, **(SINGLE_KERNELS if world == 1 else {})}.items():
        timed[phase] = lambda kernels=kernels: layer.run(bindings, t, only=kernels)
    graph = persistent = None
    if world == 1:
        graph = _graph(layer, x, logits, y)
        timed["megamoe_graph"] = graph.replay
        if args.precision == "bf16":  # the same layer with L1 and L2 as one persistent launch, side by side
            sms = torch.cuda.get_device_properties(dev).multi_processor_count
            persistent = MegaMoE(h, i, e, k, t, w1_loc, w2_loc, gemm_programs=sms)
            y_persistent = torch.empty_like(x)
            graph_persistent = _graph(persistent, x, logits, y_persistent)
            p_bindings = persistent._bindings(x, logits, y_persistent)
            timed["megamoe_graph_persistent"] = graph_persistent.replay
            timed["grouped_gemms_persistent"] = lambda: persistent.run(p_bindings, t, only=("moe_gemms",))
    timed[baseline_name] = baseline
    rows: dict[str, float] = {}
    spread: dict[str, dict[str, float]] = {}
    for name, fn in timed.items():
        if world == 1:
            rows[f"{name}_ms"] = _median_ms(fn, args.rep_ms)
        else:
            ms = rank_max_ms(fn, args.repeats, args.inner)
            rows[f"{name}_ms"] = percentile(ms, 50)
            spread[name] = {f"p{q}": percentile(ms, q) for q in (50, 90, 99)}
    torch.cuda.synchronize()
    graph_err = _rel_err(y, ref) if graph is not None else None
    rel_errs = {"megamoe": rel_err, baseline_name: baseline_err}
    if persistent is not None:
        rel_errs["megamoe_persistent"] = _rel_err(y_persistent, ref)
    if world > 1:  # the verdict and the JSON use every rank's errors
        per_rank = every_rank(rel_errs)
        rel_errs = {name: max(r[name] for r in per_rank) for name in rel_errs}
    bounds = {"megamoe": TOL_NORM if args.precision == "bf16" else TOL_NORM_FP8_VS_FP32, baseline_name: TOL_NORM}
    if persistent is not None:
        bounds["megamoe_persistent"] = TOL_NORM
    failures = [
        f"{name}: relative error vs float32 {rel_errs[name]:.2e} > {bound:.0e} (rerun its correctness check)"
        for name, bound in bounds.items()
        if not rel_errs[name] <= bound
    ]
    pairs = t * k
    weight_bytes, flops = layer.cfg.weight_bytes(), layer.cfg.flops(pairs)
    tflops = {name: flops / (rows[f"{name}_ms"] * 1e-3) / 1e12 for name in FLOP_ROWS if f"{name}_ms" in rows}
    layer_row = "megamoe_graph" if graph is not None else "megamoe_eager"
    roof_ms = roofline_s(weight_bytes, flops) * 1e3
    result = {
        **run_metadata(),
        "shape": {
            "hidden": h,
            "intermediate": i,
            "experts": e,
            "local_experts": e_loc,
            "top_k": k,
            "tokens": t,
            "world": world,
            "skewed": args.skewed,
            "pairs": pairs,
        },
        "tiles": layer.tiles.__dict__,
        "precision": args.precision,
        "timing": (
            {"method": "median of triton.testing.do_bench", "rep_ms": args.rep_ms}
            if world == 1
            else {"method": "median over repeats of the rank maximum", "repeats": args.repeats, "inner": args.inner}
        ),
        "rel_err_vs_fp32": rel_errs["megamoe"],
        "baseline": baseline_name,
        "baseline_rel_err_vs_fp32": rel_errs[baseline_name],
        "times_ms": rows,
        "tflops_per_gpu": tflops,
        "speedup_vs_baseline": rows[f"{baseline_name}_ms"] / rows[f"{layer_row}_ms"],
        "speedup_of": layer_row,
        "roofline": {
            "weight_bytes": weight_bytes,
            "flops": flops,
            "copy_bw": COPY_BW,
            "matmul_rate": MATMUL_RATE,
            "roofline_ms": roof_ms,
            "fraction_eager": roof_ms / rows["megamoe_eager_ms"],
            "fraction_gemms_only": roof_ms / rows["grouped_gemms_ms"],
        },
        "errors": failures,
    }
    if world > 1:
        result["rank_max_percentiles_ms"] = spread
    if graph is not None:
        result["graph_rel_err_vs_fp32"] = graph_err
        result["roofline"]["fraction_graph"] = roof_ms / rows["megamoe_graph_ms"]
    if persistent is not None:
        result["persistent_rel_err_vs_fp32"] = rel_errs["megamoe_persistent"]
        result["persistent_tiles"] = persistent.tiles.__dict__
        result["roofline"]["fraction_graph_persistent"] = roof_ms / rows["megamoe_graph_persistent_ms"]
    timed.clear()  # the layer's symmetric tensors must be dropped at close() on every rank
    bindings = graph = p_bindings = graph_persistent = None
    layer.close()
    if persistent is not None:
        persistent.close()
    if me == 0:
        print(
            f"shape H={h} I={i} E={e} (local {e_loc}) top-k={k} T={t} world={world} {args.precision} "
            f"{'skewed' if args.skewed else 'random'}; rel err vs fp32: layer {rel_errs['megamoe']:.2e}, "
            f"{baseline_name} {rel_errs[baseline_name]:.2e}"
        )
        for name, ms in rows.items():
            tf = tflops.get(name.removesuffix("_ms"))
            print(f"  {name:26} {ms * 1e3:9.1f} us" + (f"  {tf:6.1f} TFLOP/s per GPU" if tf else ""))
        rf = result["roofline"]
        fractions = ", ".join(
            f"{name.removeprefix('fraction_')} {v:.0%}" for name, v in rf.items() if name.startswith("fraction_")
        )
        print(f"  {'roofline (no comm.)':26} {roof_ms * 1e3:9.1f} us   of roofline: {fractions}")
        print(f"  {layer_row} vs {baseline_name}: {result['speedup_vs_baseline']:.2f}x faster")
        for failure in failures:
            print(f"  FAIL {failure}")
        args.out.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = (
            args.out
            / f"tutorial3_megamoe_E{e}_w{world}_{'skewed' if args.skewed else 'random'}_{args.precision}_{stamp}.json"
        )
        path.write_text(json.dumps(result, indent=1))
        print(f"  wrote {path}")
    rt.finalize()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
