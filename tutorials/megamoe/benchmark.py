"""MegaMoE benchmark: the layer (eager and CUDA graph), its grouped GEMMs alone, and torch baselines.

Layers, side by side in one run (``--impls``, default ``launches``): the call as separate launches
(rows ``megamoe_*``, with its phases alone and, bf16 at world 1, L1 and L2 as one launch:
``megamoe_fused_gemms_graph``, ``grouped_gemms_fused``) and as one persistent launch (rows
``persistent_*``; ``--knob NAME=VALUE`` sets its ``PersistentConfig`` fields for a sweep, and each
``--variant LABEL:NAME=VALUE,...`` adds a persistent layer with those fields over them, rows
``persistent_LABEL_*``). Each routing of ``--routing`` (random; skewed: one hot expert; balanced: the
same pairs for every expert, so no partial M tile where that is a multiple of it) gets fresh inputs, its
own rows and its own JSON.

Baselines, in the same run: at world 1 the torch bf16 per-expert loop (``reference.reference_bf16``); at
world > 1 (one PE per GPU, NCCL) the expert-parallel torch layer with grouped GEMMs in the layer's precision
(``ep_baseline``: ``all_to_all_single`` of the pairs, ``torch._grouped_mm`` or ``torch._scaled_grouped_mm``
with row-wise scales, ``all_to_all_single`` back; its split sizes are exchanged once, before timing), row
``torch_ep_grouped``. With ``--ceilings`` (world 1) also the GEMMs alone in torch (``gemm_baselines``):
torch's grouped GEMMs on pre-sorted pairs (``torch_grouped_gemms``) and the dense GEMMs of the same FLOPs
(``dense_gemms``, cuBLAS: the ceiling), and every row's share of the dense ceiling (``of_dense_ceiling``:
dense time / row time); in fp8 also those dense GEMMs with the layer's block scales and float32 promotion
(``dense_gemms_block_scaled``: the ceiling of the same arithmetic, ``of_dense_block_scaled``; where torch's
cuBLAS has no block scaling the JSON says so instead). With ``--world1 DIR`` (world > 1) each layer's
CUDA-graph time is divided by the world-1 time of the same per-rank load read from the JSON a world-1 run of
this script wrote into DIR (``vs_world1``, goal ``WORLD1_RATIO_GOAL``). Every layer and the baseline are
checked against the float32 reference before timing (and the graphs after): the benchmark exits 1 when one
is off by more than the correctness check allows, else 2 when the production load's persistent graph misses
its goal (``GOALS_US`` at world 1, ``GOALS_US_PER_RANK`` at world > 1, random routing) or the world-1 ratio
misses its goal, else 0.

Timing. World 1: medians of ``triton.testing.do_bench`` (L2 flushed between repeats; with ``--rounds N``
every row in turn N times, ``--rep-ms / N`` each, and the median of a row's rounds, so that variants
timed side by side see the same clocks and temperatures), or with
``--timing events`` the method of world > 1, so that the two compare: every rank runs the same
``--repeats``; each repeat synchronises the GPU, passes a barrier and times ``--inner`` back-to-back
calls with CUDA events (per call: the time / inner); the rank maximum of each repeat is kept, and the
rows are the medians of those maxima (p50/p90/p99 in ``rank_max_percentiles_ms``). Every layer is also
captured as a CUDA graph (rows ``*_graph``, the layer's time), at every world size. Achieved TFLOP/s
per GPU counts the expert-GEMM FLOPs of ``tokens * top_k`` pairs (the average load of a rank) over the row's time.

It also reports the roofline max(weight bytes / 4.27 TB/s, FLOPs / the precision's matmul rate: bf16
713 TFLOP/s, fp8 1264) of one rank (all measured on the H200, see the README; no communication) and the
fraction of it reached. JSON goes to ``--out`` (default ``$OUT`` or ``bench/results/``)::

    python -m tutorials.megamoe.benchmark                  # world 1, the production per-rank load
    python -m tutorials.megamoe.benchmark --impls launches persistent --routing random skewed --ceilings
    python -m tutorials.megamoe.benchmark --impls persistent --precision fp8 --knob num_stages=3
    python -m tutorials.megamoe.benchmark --impls persistent --precision fp8 --variant rows4:combine_rows=4 --rounds 4
    python -m tutorials.megamoe.benchmark --experts 128    # world 1, all 128 experts local
    torchrun --nproc_per_node=8 -m tutorials.megamoe.benchmark --experts 128   # the production shape
    python -m tutorials.megamoe.benchmark --impls launches persistent --timing events --out w1/
    torchrun --nproc_per_node=4 -m tutorials.megamoe.benchmark --experts 64 --impls launches persistent \
        --world1 w1/    # 16 experts per rank: the world-1 per-rank load, and the ratio to it
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from ..common.ranks import every_rank
from ..common.run_metadata import run_metadata
from ..common.timing import percentile, rank_max
from .config import MoEConfig
from .ep_baseline import dispatch_compute_combine, experts_for, plan
from .gemm_baselines import dense_block_scaled_gemms, dense_gemms, grouped_gemms
from .megamoe import IMPLS, TIMED_ROUTINGS, TOL_NORM, TOL_NORM_FP8_VS_FP32, MegaMoE, make_inputs, make_weights
from .persistent_launch import knob_overrides, persistent_config
from .reference import reference, reference_bf16

COPY_BW = 4.27e12  # bytes/s, device copy measured on the H200
# FLOP/s of a dense matmul on the H200 by operand precision: bf16 measured alone; fp8 the dense ceiling row
# (cuBLAS _scaled_mm with the production load's FLOPs as one matrix), so that fp8's roofline is its own
MATMUL_RATES = {"bf16": 713e12, "fp8": 1264e12}


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
# Rows besides each layer's ``_eager`` / ``_graph`` rows that run the expert GEMMs of a whole call, so that
# an achieved TFLOP/s (and a fraction of the roofline or of the dense ceiling) means something.
FLOP_ROWS = ("grouped_gemms", "grouped_gemms_fused", "torch_reference_bf16", "torch_ep_grouped",
             "torch_grouped_gemms", "dense_gemms", "dense_gemms_block_scaled")  # fmt: skip
# The rows of each layer the benchmark builds (``--impls``, at world 1 in bf16 the launches with L1 and L2 as
# one launch, beside a Gluon persistent layer its Triton twin), and the name of its output error.
# ``persistent_triton``: the Triton persistent kernel beside a persistent layer that runs the Gluon one.
_ROW_PREFIX = {"launches": "megamoe", "persistent": "persistent", "fused_gemms": "megamoe_fused_gemms",
               "persistent_triton": "persistent_triton"}  # fmt: skip
_ERR_NAMES = {"launches": "megamoe", "persistent": "megamoe_persistent", "fused_gemms": "megamoe_fused_gemms",
              "persistent_triton": "megamoe_persistent_triton"}  # fmt: skip
# A --variant's layer is named persistent_LABEL: its rows take that prefix, its error megamoe_persistent_LABEL
VARIANT_LABEL = re.compile(r"[a-z0-9]+")
# The production per-rank load at world 1 (H, I, E, top-k, T, world) and the goal of its persistent call as
# a CUDA graph, in us: benchmark exits 2 (goal missed) when random routing takes longer.
PRODUCTION_LOAD = (4096, 1536, 16, 8, 512, 1)
GOALS_US = {"fp8": 200.0, "bf16": 290.0}
# The same per-rank load at world > 1 (16 experts per rank): the persistent graph's goal in us, and the goal
# of every layer's graph time over its world-1 time (--world1).
GOALS_US_PER_RANK = {"fp8": 230.0}
WORLD1_RATIO_GOAL = 1.15
WARMUP_CALLS = 3  # world > 1: untimed calls of each row first (compiles, NCCL communicators)


def captured(run: Callable[[], object]) -> torch.cuda.CUDAGraph:
    """One call of ``run`` (a layer's call, or items of one) captured as a CUDA graph, after one call on a side
    stream (which compiles what it launches)."""
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        run()
    return graph


def roofline_s(weight_bytes: int, flops: int, precision: str) -> float:
    """The floor of one call: max of reading the weights once and doing the expert FLOPs in ``precision``."""
    return max(weight_bytes / COPY_BW, flops / MATMUL_RATES[precision])


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
        if dist.is_initialized():
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


def _knobs(pairs: list[str]) -> dict[str, object]:
    """PersistentConfig overrides from the ``--knob`` strings (``persistent_launch.knob_overrides``)."""
    try:
        return knob_overrides(pairs)
    except ValueError as e:
        raise SystemExit(f"--knob {e}") from None


def variants(texts: list[str], impls: list[str]) -> dict[str, dict[str, object]]:
    """The ``--variant`` strings (``LABEL:NAME=VALUE,NAME=VALUE``) as {layer name ``persistent_LABEL``: its
    PersistentConfig overrides}; SystemExit naming the string when one is not of that form, a label repeats
    or ``persistent`` is not among ``impls``."""
    out: dict[str, dict[str, object]] = {}
    for text in texts:
        label, sep, fields = text.partition(":")
        if not sep or not VARIANT_LABEL.fullmatch(label) or label == "triton":
            raise SystemExit(f"--variant {text!r}: use LABEL:NAME=VALUE,... with LABEL of [a-z0-9] other than "
                             f"'triton' (its rows: persistent_LABEL_*)")  # fmt: skip
        if f"persistent_{label}" in out:
            raise SystemExit(f"--variant {text!r}: label {label!r} given twice")
        try:
            out[f"persistent_{label}"] = knob_overrides([f for f in fields.split(",") if f])
        except ValueError as e:
            raise SystemExit(f"--variant {text!r}: {e}") from None
    if out and "persistent" not in impls:
        raise SystemExit("--variant adds persistent layers: add persistent to --impls")
    return out


def _row_prefix(name: str) -> str:
    """The rows' prefix of layer ``name`` (a --variant's: its name)."""
    return _ROW_PREFIX.get(name, name)


def _err_name(name: str) -> str:
    """The output error's name of layer ``name`` (a --variant's: megamoe_ and its name)."""
    return _ERR_NAMES.get(name, f"megamoe_{name}")


def median_of_rounds(fns: dict[str, Callable[[], object]], rep_ms: int, rounds: int,
                     measure: Callable[[Callable[[], object], int], float]) -> dict[str, float]:  # fmt: skip
    """{name: the median over ``rounds`` of ``measure(fn, rep_ms // rounds)``}, the rows taking turns each
    round (one round: each row once, for ``rep_ms``)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(measure(fn, max(1, rep_ms // rounds)))
    return {name: percentile(ms, 50) for name, ms in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--intermediate", type=int, default=1536)
    parser.add_argument("--experts", type=int, default=16, help="experts in total (world 1: all local)")
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=512, help="tokens per rank")
    parser.add_argument("--routing", nargs="+", default=["random"], choices=TIMED_ROUTINGS,
                        help="random logits, one hot expert, or every expert the same pairs (each: its own inputs, "
                             "rows and JSON)")  # fmt: skip
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp8"], help="expert GEMM operands")
    parser.add_argument("--impls", nargs="+", default=["launches"], choices=IMPLS,
                        help="MegaMoE impls timed side by side (the first one's rows are the layer's)")  # fmt: skip
    parser.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                        help="a PersistentConfig field of impl=persistent (repeat): num_stages=3")  # fmt: skip
    parser.add_argument("--variant", action="append", default=[], metavar="LABEL:NAME=VALUE,...",
                        help="impl persistent: one more persistent layer with these fields (repeat): "
                             "rows4:combine_rows=4")  # fmt: skip
    parser.add_argument("--ceilings", action="store_true",
                        help="world 1: also time torch's grouped GEMMs and the dense same-FLOPs GEMMs")  # fmt: skip
    parser.add_argument("--rep-ms", type=int, default=300, help="world 1: do_bench's time per row")
    parser.add_argument("--rounds", type=int, default=1,
                        help="world 1, do_bench: time the rows in turn this many times (rep-ms / rounds each)")
    parser.add_argument("--timing", choices=["do_bench", "events"], default="do_bench",
                        help="world 1: do_bench, or the events of world > 1 (to compare with a world > 1 run)")
    parser.add_argument("--world1", type=Path, metavar="DIR",
                        help="world > 1: a folder with this script's world-1 JSON of the same per-rank load")
    parser.add_argument("--repeats", type=int, default=20, help="world > 1: timed repeats per row")
    parser.add_argument("--inner", type=int, default=5, help="world > 1: back-to-back calls per repeat")
    parser.add_argument(
        "--out", type=Path, default=Path(os.environ.get("OUT") or "bench/results")
    )
    args = parser.parse_args(argv)
    knobs = _knobs(args.knob)
    extra = variants(args.variant, args.impls)
    if args.rounds < 1:
        raise SystemExit(f"--rounds {args.rounds}: use 1 or more")

    from triton_raw_ext import runtime as rt

    rt.init()
    world, me = rt.n_pes(), rt.my_pe()
    dev = torch.device("cuda", torch.cuda.current_device())
    h, i, e, k, t = args.hidden, args.intermediate, args.experts, args.top_k, args.tokens
    w1, w2 = make_weights(h, i, e, 5, dev)
    e_loc = e // world
    w1_loc, w2_loc = w1[me * e_loc : (me + 1) * e_loc], w2[me * e_loc : (me + 1) * e_loc]
    layers: dict[str, MegaMoE] = {}
    for impl in args.impls:  # fp8: the phases below select the fp8 kernels by their steps (bf16 kernel names)
        pc = None
        if impl == "persistent":
            cfg = MoEConfig(h, i, e, k, t, world, args.precision)
            pc = persistent_config(cfg, knobs)
        layers[impl] = MegaMoE(h, i, e, k, t, w1_loc, w2_loc, precision=args.precision, impl=impl, persistent=pc)
        if pc is not None and pc.gluon:  # its Triton twin, side by side
            twin = persistent_config(cfg, {**knobs, "gluon": False})
            layers["persistent_triton"] = MegaMoE(h, i, e, k, t, w1_loc, w2_loc, precision=args.precision,
                                                  impl=impl, persistent=twin)  # fmt: skip
        if impl == "persistent":
            for name, fields in extra.items():
                layers[name] = MegaMoE(h, i, e, k, t, w1_loc, w2_loc, precision=args.precision, impl=impl,
                                       persistent=persistent_config(cfg, {**knobs, **fields}))  # fmt: skip
    if world == 1 and args.precision == "bf16" and "launches" in layers:
        # the launches with L1 and L2 as one persistent launch (Tiles.gemm_programs), side by side
        sms = torch.cuda.get_device_properties(dev).multi_processor_count
        layers["fused_gemms"] = MegaMoE(h, i, e, k, t, w1_loc, w2_loc, gemm_programs=sms)
    failed = missed = False
    for routing in args.routing:
        result = _bench_routing(args, routing, layers, w1, w2, w1_loc, w2_loc, dev)
        failed |= bool(result["errors"])
        missed |= result.get("goal", {}).get("met") is False or result.get("vs_world1", {}).get("met") is False
    for layer in layers.values():  # collective, in the same order on every rank
        layer.close()
    rt.finalize()
    return 1 if failed else 2 if missed else 0


def _bench_routing(
    args: argparse.Namespace,
    routing: str,
    layers: dict[str, MegaMoE],
    w1: torch.Tensor,
    w2: torch.Tensor,
    w1_loc: torch.Tensor,
    w2_loc: torch.Tensor,
    dev: torch.device,
) -> dict:
    """Check every layer on fresh inputs with ``routing``, time its rows, print them and write the JSON
    (rank 0); the result (``errors``: what was off; ``goal``: the production load's verdict)."""
    from triton_raw_ext import runtime as rt

    world, me = rt.n_pes(), rt.my_pe()
    h, i, e, k, t = args.hidden, args.intermediate, args.experts, args.top_k, args.tokens
    first = args.impls[0]
    layer = layers[first]
    x, logits = make_inputs(t, h, e, routing, 100 + me, dev, top_k=k)
    outputs = {name: torch.empty_like(x) for name in layers}
    for name, each in layers.items():
        each(x, logits, out=outputs[name])
    torch.cuda.synchronize()
    ids, wts = (v.clone() for v in layer.routing(t))
    ref = reference(x, ids, wts, w1, w2)
    if world == 1:
        baseline_name, baseline = "torch_reference_bf16", functools.partial(reference_bf16, x, ids, wts, w1, w2)
    else:  # the split sizes are host values: exchanged once, here, not in the timed calls
        ep_plan = plan(logits, k, layer.cfg.local_experts)
        experts = experts_for(args.precision, w1_loc, w2_loc)
        baseline_name, baseline = "torch_ep_grouped", functools.partial(dispatch_compute_combine, x, ep_plan, experts)
    rel_errs = {_err_name(name): _rel_err(y, ref) for name, y in outputs.items()}
    rel_errs[baseline_name] = _rel_err(baseline(), ref)

    timed: dict[str, Callable[[], object]] = {}
    graphs = []
    for name, each in layers.items():
        y = outputs[name]
        prefix = _row_prefix(name)
        if name != "fused_gemms":
            timed[f"{prefix}_eager"] = lambda each=each, y=y: each(x, logits, out=y)
        if name == "launches":
            # each phase alone on the last call's data, the order keeps it valid; at world 1 then route and
            # plan alone (the graph replays below restore a whole call's state)
            bindings = each._bindings(x, logits, y)
            for phase, kernels in {**PHASES, **(SINGLE_KERNELS if world == 1 else {})}.items():
                timed[phase] = lambda kernels=kernels, b=bindings, each=each: each.run(b, t, only=kernels)
        graphs.append(captured(lambda each=each, y=y: each(x, logits, out=y)))
        timed[f"{prefix}_graph"] = graphs[-1].replay
        if name == "fused_gemms":
            fused = each._bindings(x, logits, y)
            timed["grouped_gemms_fused"] = lambda b=fused, each=each: each.run(b, t, only=("moe_gemms",))
    timed[baseline_name] = baseline
    pairs = t * k
    unavailable: dict[str, str] = {}  # rows that could not run here, and why
    if world == 1 and args.ceilings:
        timed["torch_grouped_gemms"] = grouped_gemms(x, ids, w1, w2, args.precision)
        timed["dense_gemms"] = dense_gemms(pairs, h, i, args.precision, dev)
        if args.precision == "fp8":
            block_scaled = dense_block_scaled_gemms(pairs, h, i, dev)
            try:
                block_scaled()
                timed["dense_gemms_block_scaled"] = block_scaled
            except RuntimeError as e:  # torch's cuBLAS without block scaling (before CUDA 12.9, not sm_90)
                unavailable["dense_gemms_block_scaled"] = str(e).splitlines()[0]
    rows: dict[str, float] = {}
    spread: dict[str, dict[str, float]] = {}
    if world == 1 and args.timing == "do_bench":
        medians = median_of_rounds(timed, args.rep_ms, args.rounds, _median_ms)
        rows.update({f"{name}_ms": ms for name, ms in medians.items()})
    else:
        for name, fn in timed.items():
            ms = rank_max_ms(fn, args.repeats, args.inner)
            rows[f"{name}_ms"] = percentile(ms, 50)
            spread[name] = {f"p{q}": percentile(ms, q) for q in (50, 90, 99)}
    torch.cuda.synchronize()
    # the graph replays rewrote the outputs: check them again
    rel_errs.update({f"{_err_name(name)}_graph": _rel_err(y, ref) for name, y in outputs.items()})
    if world > 1:  # the verdict and the JSON use every rank's errors
        per_rank = every_rank(rel_errs)
        rel_errs = {name: max(r[name] for r in per_rank) for name in rel_errs}
    layer_bound = TOL_NORM if args.precision == "bf16" else TOL_NORM_FP8_VS_FP32
    baseline_bound = TOL_NORM if world == 1 else layer_bound  # world > 1: the baseline runs in the precision
    failures = [
        f"{name}: relative error vs float32 {err:.2e} > {bound:.0e} (rerun its correctness check)"
        for name, err in rel_errs.items()
        for bound in [baseline_bound if name == baseline_name else layer_bound]
        if not err <= bound
    ]
    cfg = layer.cfg
    weight_bytes, flops = cfg.weight_bytes(), cfg.flops(pairs)
    tflops = {name: flops / (rows[f"{name}_ms"] * 1e-3) / 1e12 for name in timed if counts_flops(name)}
    layer_row = f"{_row_prefix(first)}_graph"
    roof_ms = roofline_s(weight_bytes, flops, args.precision) * 1e3
    fractions = {f"fraction_{name}": roof_ms / rows[f"{name}_ms"] for name in timed if counts_flops(name)}
    result = {
        **run_metadata(),
        "shape": {
            "hidden": h,
            "intermediate": i,
            "experts": e,
            "local_experts": cfg.local_experts,
            "top_k": k,
            "tokens": t,
            "world": world,
            "skewed": routing == "skewed",
            "routing": routing,
            "pairs": pairs,
        },
        "tiles": layer.tiles.__dict__ if layer.tiles else None,
        "impls": {name: {"tiles": each.tiles.__dict__ if each.tiles else None,
                         "persistent": dataclasses.asdict(each.persistent) if each.persistent else None}
                  for name, each in layers.items()},  # fmt: skip
        "precision": args.precision,
        "timing": (
            {"method": "median of triton.testing.do_bench", "rep_ms": args.rep_ms, "rounds": args.rounds}
            if world == 1 and args.timing == "do_bench"
            else {"method": "median over repeats of the rank maximum", "repeats": args.repeats, "inner": args.inner}
        ),
        "rel_err_vs_fp32": rel_errs[_err_name(first)],
        "rel_errs_vs_fp32": rel_errs,
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
            "matmul_rate": MATMUL_RATES[args.precision],
            "roofline_ms": roof_ms,
            **fractions,
        },
        "errors": failures,
    }
    if unavailable:
        result["unavailable_rows"] = unavailable
    for ceiling, key in (("dense_gemms", "of_dense_ceiling"), ("dense_gemms_block_scaled", "of_dense_block_scaled")):
        if f"{ceiling}_ms" in rows:  # the dense same-FLOPs GEMMs as a ceiling
            result[key] = {name: rows[f"{ceiling}_ms"] / rows[f"{name}_ms"] for name in timed if counts_flops(name)}
    per_rank_load = (h, i, cfg.local_experts, k, t) == PRODUCTION_LOAD[:5]
    goal_us = (GOALS_US if world == 1 else GOALS_US_PER_RANK).get(args.precision) if per_rank_load else None
    if goal_us and routing == "random" and "persistent_graph_ms" in rows:
        us = rows["persistent_graph_ms"] * 1e3
        result["goal"] = {"row": "persistent_graph", "us": us, "goal_us": goal_us, "met": us <= goal_us}
    if world > 1 and args.world1:
        result["vs_world1"] = vs_world1(result, rows, args.world1)
    if spread:
        result["rank_max_percentiles_ms"] = spread
    timed.clear()  # drop the graphs and bindings before the layers close
    graphs.clear()
    if me == 0:
        _report(result, routing, args)
    return result


def vs_world1(result: dict, rows: dict[str, float], folder: Path) -> dict:
    """Each layer's CUDA-graph time over the world-1 time of the same per-rank load, precision and routing,
    read from the newest matching JSON in ``folder``; ``met``: every ratio <= WORLD1_RATIO_GOAL (None when
    no world-1 JSON matches)."""
    shape = result["shape"]
    same = ("hidden", "intermediate", "local_experts", "top_k", "tokens", "skewed")
    found = None
    for path in sorted(folder.glob("tutorial3_megamoe_*.json")):
        d = _load_json(path)
        if d and d["shape"]["world"] == 1 and d["precision"] == result["precision"] and all(
                d["shape"][key] == shape[key] for key in same):  # fmt: skip
            found = (path, d)
    if found is None:
        return {"world1_json": None, "rows": {}, "goal_ratio": WORLD1_RATIO_GOAL, "met": None,
                "why": f"no world-1 JSON of this per-rank load and precision in {folder}"}  # fmt: skip
    path, d = found
    ratios = {}
    for name, ms in rows.items():
        alone = d["times_ms"].get(name)
        if name.endswith("_graph_ms") and alone:
            ratios[name.removesuffix("_ms")] = {"us": ms * 1e3, "world1_us": alone * 1e3, "ratio": ms / alone}
    met = all(r["ratio"] <= WORLD1_RATIO_GOAL for r in ratios.values()) if ratios else None
    return {"world1_json": str(path), "world1_timing": d["timing"], "rows": ratios, "goal_ratio": WORLD1_RATIO_GOAL,
            "met": met}  # fmt: skip


def _load_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def counts_flops(row: str) -> bool:
    """Rows that run the expert GEMMs of a whole call, so that an achieved TFLOP/s means something."""
    return row.endswith(("_eager", "_graph")) or row in FLOP_ROWS


def _report(result: dict, routing: str, args: argparse.Namespace) -> None:
    """Print the rows of one routing and write its JSON into ``args.out``."""
    shape, rows, tflops = result["shape"], result["times_ms"], result["tflops_per_gpu"]
    errs = ", ".join(f"{name} {err:.2e}" for name, err in result["rel_errs_vs_fp32"].items())
    print(
        f"shape H={shape['hidden']} I={shape['intermediate']} E={shape['experts']} (local {shape['local_experts']}) "
        f"top-k={shape['top_k']} T={shape['tokens']} world={shape['world']} {args.precision} {routing}; "
        f"rel err vs fp32: {errs}"
    )
    dense, block_scaled = result.get("of_dense_ceiling", {}), result.get("of_dense_block_scaled", {})
    for name, ms in rows.items():
        row = name.removesuffix("_ms")
        tf = f"  {tflops[row]:6.1f} TFLOP/s per GPU" if row in tflops else ""
        of_dense = f"  {dense[row]:6.1%} of dense" if row in dense else ""
        of_block = f", {block_scaled[row]:6.1%} of block-scaled dense" if row in block_scaled else ""
        print(f"  {name:30} {ms * 1e3:9.1f} us{tf}{of_dense}{of_block}")
    for row, why in result.get("unavailable_rows", {}).items():
        print(f"  {row}: not timed ({why})")
    rf = result["roofline"]
    fractions = ", ".join(f"{n.removeprefix('fraction_')} {v:.0%}" for n, v in rf.items() if n.startswith("fraction_"))
    print(f"  {'roofline (no comm.)':30} {rf['roofline_ms'] * 1e3:9.1f} us   of roofline: {fractions}")
    print(f"  {result['speedup_of']} vs {result['baseline']}: {result['speedup_vs_baseline']:.2f}x faster")
    if "goal" in result:
        g = result["goal"]
        print(f"  goal: persistent_graph {g['us']:.1f} us <= {g['goal_us']} us: {'MET' if g['met'] else 'MISSED'}")
    if "vs_world1" in result:
        v = result["vs_world1"]
        for row, r in v["rows"].items():
            print(f"  {row} vs world 1: {r['us']:.1f} / {r['world1_us']:.1f} us = {r['ratio']:.3f}x "
                  f"(goal <= {v['goal_ratio']}): {'MET' if r['ratio'] <= v['goal_ratio'] else 'MISSED'}")
        if not v["rows"]:
            print(f"  vs world 1: {v.get('why', 'no graph row matches the world-1 JSON')}")
    for failure in result["errors"]:
        print(f"  FAIL {failure}")
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = args.out / (
        f"tutorial3_megamoe_E{shape['experts']}_w{shape['world']}_{routing}_{args.precision}_{stamp}.json"
    )
    path.write_text(json.dumps(result, indent=1))
    print(f"  wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
