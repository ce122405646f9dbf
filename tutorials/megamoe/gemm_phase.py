"""The persistent fp8 call's GEMM items alone, in Triton and in Gluon, on the state a real call leaves.

A persistent call (``impl="persistent"``, world 1) routes and dispatches the production load, then this
runs only its L1 and L2 items again, twice: with the persistent kernel itself on that item range
(``item_begin`` = ``L1_START``, ``item_end`` = ``COMBINE_START``; its counters of the rows landed and of the
layout are restored before each launch, since the kernel's last program zeroes them) and with
``gluon_gemm_items.moe_gemm_items`` (the warp-specialized Gluon tiles). It checks that both write the
same h, h scales and y_pair for every pair (poisoned before each), then times each as a CUDA graph
(including its few-word counter copy) beside the whole call::

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

CONSUMER_REGS, LOADER_REGS = 232, 40  # as gluon_scaled_tiles: two 64 x 128 accumulators per consumer thread


def landed_counts(layout: torch.Tensor, local_experts_p2: int, m_tiles: int, block_m: int) -> torch.Tensor:
    """Rows of each M tile of a call's ``layout`` (the persistent kernel's LANDED counts once every row has
    landed), [m_tiles] int32 on the layout's device, 0 past the call's M tiles."""
    counts = layout[1 : 1 + local_experts_p2].tolist()
    rows = [min(block_m, c - j * block_m) for c in counts for j in range(-(-c // block_m))]
    return torch.tensor(rows + [0] * (m_tiles - len(rows)), dtype=torch.int32, device=layout.device)


def gluon_phase(layer, stages: int) -> tuple[Callable[[], None], torch.Tensor]:
    """(a callable that runs the call's L1 and L2 items with :func:`gluon_gemm_items.moe_gemm_items` on the
    layer's buffers, one program per SM, the ``landed`` counts it reads): its counters are zeroed first in each
    run. A layer built
    with ``trace`` gets the items' rows in its trace buffer, where the persistent kernel writes them."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from .gluon_gemm_items import moe_gemm_items
    from .persistent_launch import schedule

    if not 2 <= stages <= 4:
        raise ValueError(f"gemm_phase: the Gluon items hold 2 to 4 stages of 48 KB in shared memory, not {stages}")

    cfg, pc, w = layer.cfg, layer.persistent, layer.weights
    buf = {**layer.sym, **layer.local}
    sch = schedule(cfg, pc)
    e, hid, inter = cfg.local_experts, cfg.hidden, cfg.intermediate
    fp8_block = gl.NVMMASharedLayout.get_default_for([128, 128], gl.float8e4nv)

    def fp8_desc(t: torch.Tensor) -> TensorDescriptor:
        return TensorDescriptor.from_tensor(t, [128, 128], fp8_block)

    landed = landed_counts(buf["layout"], sch.local_experts_p2, sch.m_tiles, pc.block_m)
    counters = torch.zeros(1 + sch.m_tiles, dtype=torch.int32, device=landed.device)  # next item, L1 tiles done
    programs = torch.cuda.get_device_properties(landed.device).multi_processor_count
    trace = buf["trace"][sch.starts()["L1_START"] :] if pc.trace else None  # its rows as the persistent kernel's
    args = (fp8_desc(buf["a_sorted"]), fp8_desc(buf["h"]), fp8_desc(w["w1q"].view(e * 2 * inter, hid)),
            fp8_desc(w["w2q"].view(e * hid, inter)), buf["layout"], landed, counters, buf["sorted_row"],
            buf["x_scale"], buf["h"], buf["h_scale"], buf["y_pair"], w["w1s"], w["w2s"], 0, 2000, trace)  # fmt: skip
    constexprs = dict(H=hid, INTER=inter, E_LOC=e, EL_P2=sch.local_experts_p2, GROUP_M=pc.group_m,
                      M_TILES=sch.m_tiles, STAGES=stages, CONSUMER_REGS=CONSUMER_REGS,
                      LOADER_REGS=LOADER_REGS, TRACE=pc.trace)  # fmt: skip

    def run() -> None:
        counters.zero_()
        moe_gemm_items[(programs,)](*args, **constexprs, num_warps=4)

    return run, landed


def triton_phase(
    layer, x: torch.Tensor, logits: torch.Tensor, y: torch.Tensor, landed: torch.Tensor
) -> Callable[[], None]:
    """A callable that runs the call's L1 and L2 items with the persistent kernel itself (its L1_START ..
    COMBINE_START items), the layout-done and rows-landed counters set first."""
    from . import persistent as p
    from .persistent_launch import schedule

    sch = schedule(layer.cfg, layer.persistent)
    starts = sch.starts()
    launch = layer._call
    restore = torch.zeros_like(layer.local["sched"])
    restore[p.LAYOUT_DONE.value] = 1
    restore[sch.landed_word : sch.landed_word + landed.numel()] = landed
    bindings = ChainMap({"item_begin": starts["L1_START"], "item_end": starts["COMBINE_START"]},
                        layer._bindings(x, logits, y))  # fmt: skip
    args = launch.arguments(bindings)
    kwargs = {**launch.constexprs, "num_warps": launch.num_warps, "num_stages": launch.num_stages}

    def run() -> None:
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
    from .persistent_launch import choose_persistent
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

    rt.init()
    if rt.n_pes() != 1:
        raise SystemExit("gemm_phase runs at world 1 (one process)")
    dev = torch.device("cuda", torch.cuda.current_device())
    h, i, e, k, t = args.shape
    w1, w2 = make_weights(h, i, e, 5, dev)
    x, logits = make_inputs(t, h, e, args.routing == "skewed", 100, dev)
    cfg = MoEConfig(h, i, e, k, t, 1, "fp8")
    pc = dataclasses.replace(choose_persistent(cfg), trace=args.trace)
    layer = MegaMoE(h, i, e, k, t, w1, w2, precision="fp8", impl="persistent", persistent=pc)
    if not pc.tma_a:
        raise SystemExit("gemm_phase needs the pairs' A rows in layout order (tma_a): this load's knobs have none")
    y = torch.empty_like(x)
    layer(x, logits, out=y)
    torch.cuda.synchronize()
    pairs = int(layer.local["layout"][1 : 1 + e].sum())  # world 1: every expert is local
    gluon_run, landed = gluon_phase(layer, args.stages)
    triton_run = triton_phase(layer, x, logits, y, landed)
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
    print(f"{args.routing}: {pairs} pairs; Gluon against Triton: h bytes equal {check['h_bytes_equal']:.4f}, h "
          f"scales max rel {check['h_scale_max_rel']:.1e}, y_pair rel err {check['y_pair_rel_err']:.1e}"
          f"{'' if ok else '  WRONG'}")  # fmt: skip
    print(f"GEMM items: Triton {times['triton_us']:.1f} us, Gluon {times['gluon_us']:.1f} us; whole call "
          f"{times['call_us']:.1f} us (CUDA graphs)")  # fmt: skip
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
