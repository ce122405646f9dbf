"""The persistent fp8 call's GEMM items alone, in Triton and in Gluon, on the state a real call leaves.

A persistent call (``impl="persistent"``, world 1) routes and dispatches the production load, then this runs
only its L1 and L2 items again (``item_begin`` = ``L1_START``, ``item_end`` = ``COMBINE_START``; the counters
of the rows landed, of the layout and of the route items restored before each launch, since the kernel's last
program zeroes them), twice: with the Triton kernel and with the Gluon one (``gluon_persistent``, the
``gluon`` knob, with ``fast_accum``: the Triton kernel's sums in the tensor cores, not promoted per K block).
It checks that both write the same h, h scales and y_pair for every pair (poisoned before each), then times
each as a CUDA graph (including its few-word counter copy) beside the whole call, Triton's and Gluon's::

    python -m tutorials.megamoe.gemm_phase [--routing skewed] [--stages 3] [--trace] --json $OUT/gemm_phase.json

Needs an H200 (sm_90) and the plugin's clang (the bounded waits are raw CUDA).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections import ChainMap
from collections.abc import Callable
from pathlib import Path

import torch


def landed_counts(layout: torch.Tensor, local_experts_p2: int, m_tiles: int, block_m: int) -> torch.Tensor:
    """Rows of each M tile of a call's ``layout`` (the persistent kernel's LANDED counts once every row has
    landed), [m_tiles] int32 on the layout's device, 0 past the call's M tiles."""
    counts = layout[1 : 1 + local_experts_p2].tolist()
    rows = [min(block_m, c - j * block_m) for c in counts for j in range(-(-c // block_m))]
    return torch.tensor(rows + [0] * (m_tiles - len(rows)), dtype=torch.int32, device=layout.device)


# Each region's first and end item, as names of the schedule's starts (None: item 0)
REGION_ITEMS = {"gemm": ("L1_START", "COMBINE_START"), "l1": ("L1_START", "L2_START"),
                "l2": ("L2_START", "COMBINE_START"), "call": (None, "N_ITEMS")}  # fmt: skip


def gemm_run(layer, pc, x: torch.Tensor, logits: torch.Tensor, y: torch.Tensor,
             region: str = "gemm") -> Callable[[], None]:  # fmt: skip
    """A callable that runs items of the call ``layer`` last ran, on its buffers, with the persistent kernel of
    knobs ``pc`` (``pc.gluon``: the Gluon kernel). ``region``: "gemm" the L1 and L2 items (L1_START ..
    COMBINE_START), "l1" or "l2" one of the two (the Gluon kernel only), "call" every item of a call. Before a
    region's launch the counters its items wait for are set as the call's earlier items leave them (the
    kernel's last program zeroes them): the layout done, each M tile's rows landed, the Gluon route items'
    count (its loader's first gather of x_sym waits for it) and, for "l2", each M tile's L1 items done."""
    from . import persistent as p
    from .gluon_persistent import PARTS
    from .persistent_launch import call_extras, persistent_launch, schedule

    if region not in REGION_ITEMS:
        raise ValueError(f"gemm_run: region {region!r} is not one of {tuple(REGION_ITEMS)}")
    if region in ("l1", "l2") and not pc.gluon:
        raise ValueError(f"gemm_run: region {region!r} needs the Gluon kernel's L1 counts (gluon=1)")
    cfg = layer.cfg
    sch = schedule(cfg, pc)
    starts = sch.starts()
    buffers = {**layer.weights, **layer.sym, **layer.local}
    landed = landed_counts(layer.local["layout"], sch.local_experts_p2, sch.m_tiles, pc.block_m)
    restore = torch.zeros_like(layer.local["sched"])
    restore[p.LAYOUT_DONE.value] = 1
    if pc.gluon:
        restore[p.ROUTE_DONE.value] = PARTS.value * starts["PLAN_START"]
    restore[sch.landed_word : sch.landed_word + landed.numel()] = landed
    if region == "l2":  # each of the call's M tiles: both consumers of each of its L1 items
        l1_items = PARTS.value * (cfg.intermediate // p.QBLOCK.value)
        done = sch.landed_word + sch.m_tiles
        restore[done : done + landed.numel()] = torch.where(landed > 0, l1_items, 0)
    programs = torch.cuda.get_device_properties(x.device).multi_processor_count
    launch = persistent_launch(cfg, pc, programs)
    bounds = tuple(starts[name] if name else 0 for name in REGION_ITEMS[region])
    bindings = ChainMap(dict(zip(("item_begin", "item_end"), bounds, strict=True)), call_extras(cfg, pc, buffers),
                        layer._bindings(x, logits, y))  # fmt: skip
    args = launch.arguments(bindings)
    kwargs = {**launch.constexprs, "num_warps": launch.num_warps, "num_stages": launch.num_stages}

    def run() -> None:
        if region != "call":
            layer.local["sched"].copy_(restore)
        launch.fn[launch.grid](*args, **kwargs)

    return run


def _outputs(layer, pairs: int) -> dict[str, torch.Tensor]:
    """The GEMM items' outputs for the call's ``pairs``: h (as bytes), h_scale, y_pair."""
    local = {**layer.sym, **layer.local}
    return {"h": local["h"][:pairs].view(torch.uint8).clone(), "h_scale": local["h_scale"][:pairs].clone(),
            "y_pair": local["y_pair"][:pairs].float()}  # fmt: skip


def _poison(layer) -> None:
    local = {**layer.sym, **layer.local}
    local["h"].view(torch.uint8).fill_(0x7F)  # e4m3 NaN
    local["h_scale"].fill_(float("nan"))
    local["y_pair"].fill_(float("nan"))


def main(argv: list[str] | None = None) -> int:
    import triton

    from triton_raw_ext import runtime as rt

    from ..common.run_metadata import run_metadata
    from .config import MoEConfig
    from .megamoe import MegaMoE, make_inputs, make_weights
    from .persistent_launch import choose_persistent, persistent_launch
    from .trace_persistent import format_summary, traced_run

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--routing", default="random", choices=["random", "skewed"])
    parser.add_argument("--shape", type=int, nargs=5, default=[4096, 1536, 16, 8, 512],
                        metavar=("H", "I", "E", "K", "T"))  # fmt: skip
    parser.add_argument("--stages", type=int, default=4, help="the Gluon tiles' stages (2 to 4)")
    parser.add_argument("--trace", action="store_true",
                        help="trace both (persistent.TRACE_FIELDS) and print each one's regions (trace_persistent)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    h, i, e, k, t = args.shape
    cfg = MoEConfig(h, i, e, k, t, 1, "fp8")
    pc = dataclasses.replace(choose_persistent(cfg, gluon=False, fast_accum=True), trace=args.trace)
    # fast_accum: the Triton kernel's math (sums kept in the tensor cores), so that both write the same bytes
    gluon_pc = dataclasses.replace(choose_persistent(cfg), gluon=True, num_stages=args.stages, trace=args.trace,
                                   fast_accum=True)  # fmt: skip
    try:  # the Gluon kernel's rule (stages, tiles, the A rows in layout order), before the runtime starts
        persistent_launch(cfg, gluon_pc, 1)
    except ValueError as err:
        raise SystemExit(f"gemm_phase --shape {' '.join(map(str, args.shape))} --stages {args.stages}: {err}") from None

    rt.init()
    if rt.n_pes() != 1:
        raise SystemExit("gemm_phase runs at world 1 (one process)")
    dev = torch.device("cuda", torch.cuda.current_device())
    w1, w2 = make_weights(h, i, e, 5, dev)
    x, logits = make_inputs(t, h, e, args.routing, 100, dev, top_k=k)
    layer = MegaMoE(h, i, e, k, t, w1, w2, precision="fp8", impl="persistent", persistent=pc)
    y = torch.empty_like(x)
    layer(x, logits, out=y)
    torch.cuda.synchronize()
    pairs = int(layer.local["layout"][1 : 1 + e].sum())  # world 1: every expert is local
    triton_run = gemm_run(layer, pc, x, logits, y)
    gluon_run = gemm_run(layer, gluon_pc, x, logits, y)
    results = {}
    for name, run in (("triton", triton_run), ("gluon", gluon_run)):
        _poison(layer)
        run()
        torch.cuda.synchronize()
        results[name] = _outputs(layer, pairs)
    ref, got = results["triton"], results["gluon"]
    check = {
        "pairs": pairs,
        "h_bytes_equal": float((ref["h"] == got["h"]).float().mean()),
        "h_scale_max_rel": float(((ref["h_scale"] - got["h_scale"]).abs() / ref["h_scale"].abs()).max()),
        "y_pair_rel_err": float((ref["y_pair"] - got["y_pair"]).norm() / ref["y_pair"].norm()),
        "nan": bool(got["y_pair"].isnan().any() or got["h_scale"].isnan().any()),
    }
    ok = not check["nan"] and check["h_bytes_equal"] > 0.99 and check["y_pair_rel_err"] < 1e-2
    times = {name: triton.testing.do_bench_cudagraph(run, rep=200) * 1e3
             for name, run in (("triton_us", triton_run), ("gluon_us", gluon_run))}  # fmt: skip
    times["call_us"] = triton.testing.do_bench_cudagraph(lambda: layer(x, logits, out=y), rep=200) * 1e3
    gluon_call = gemm_run(layer, gluon_pc, x, logits, y, region="call")
    times["gluon_call_us"] = triton.testing.do_bench_cudagraph(gluon_call, rep=200) * 1e3
    print(f"{args.routing}: {pairs} pairs; Gluon against Triton: h bytes equal {check['h_bytes_equal']:.4f}, h "
          f"scales max rel {check['h_scale_max_rel']:.1e}, y_pair rel err {check['y_pair_rel_err']:.1e}"
          f"{'' if ok else '  WRONG'}")  # fmt: skip
    print(f"GEMM items: Triton {times['triton_us']:.1f} us, Gluon {times['gluon_us']:.1f} us; whole call: Triton "
          f"{times['call_us']:.1f} us, Gluon {times['gluon_call_us']:.1f} us (CUDA graphs)")  # fmt: skip
    traces = {}
    if args.trace:  # one more run of each, its regions as trace_persistent prints a call's
        for name, run in (("triton", triton_run), ("gluon", gluon_run)):
            traces[name] = traced_run(layer, run)
            print(f"== {name}")
            print("\n".join(format_summary(traces[name])), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {**run_metadata(), "routing": args.routing, "shape": args.shape, "stages": args.stages}
        args.json.write_text(json.dumps({**meta, "check": check, "ok": ok, **times, "traces": traces}, indent=1))
    layer.close()
    rt.finalize()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
