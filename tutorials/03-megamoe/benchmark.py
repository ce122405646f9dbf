"""MegaMoE benchmark: the layer (eager and CUDA graph), its grouped GEMMs alone, and the torch reference.

At world 1 it also reports the roofline max(weight bytes / 4.27 TB/s, FLOPs / 713 TFLOP/s) (both
measured on the H200, see the README) and the fraction of it reached. Medians of
``triton.testing.do_bench`` (L2 flushed between repeats). JSON goes to ``--out`` (default
``$OUT`` or ``bench/results/``)::

    python benchmark.py                      # world 1, the production per-rank load
    python benchmark.py --experts 128        # world 1, all 128 experts local
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from megamoe import MegaMoE, make_inputs, make_weights  # noqa: E402
from moe_reference import reference, reference_bf16  # noqa: E402

COPY_BW = 4.27e12  # bytes/s, device copy measured on the H200
MATMUL_RATE = 713e12  # FLOP/s, bf16 matmul measured on the H200


# Phases of one call, each re-runnable alone on the data the previous call left (plan zeroes the
# counters that dispatch fills, so the first phase starts at route).
PHASES = {
    "route_to_place": ("moe_route", "moe_plan", "moe_dispatch", "moe_place"),
    "grouped_gemms": ("moe_l1_swiglu", "moe_l2"),
    "combine_reduce": ("moe_combine", "moe_reduce"),
}


def roofline_s(weight_bytes: int, flops: int) -> float:
    """The floor of one call: max of reading the weights once and doing the expert FLOPs."""
    return max(weight_bytes / COPY_BW, flops / MATMUL_RATE)


def _median_ms(fn, rep_ms: int) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=10, rep=rep_ms, return_mode="median"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--intermediate", type=int, default=1536)
    parser.add_argument("--experts", type=int, default=16, help="experts in total (world 1: all local)")
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=512, help="tokens per rank")
    parser.add_argument("--skewed", action="store_true", help="one hot expert instead of random routing")
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp8"], help="expert GEMM operands")
    parser.add_argument("--rep-ms", type=int, default=300)
    parser.add_argument(
        "--out", type=Path, default=Path(os.environ.get("OUT") or HERE.parent.parent / "bench/results")
    )
    args = parser.parse_args(argv)

    from triton_raw_ext import runtime as rt

    rt.init()
    world, me = rt.n_pes(), rt.my_pe()
    dev = torch.device("cuda", torch.cuda.current_device())
    h, i, e, k, t = args.hidden, args.intermediate, args.experts, args.top_k, args.tokens
    w1, w2 = make_weights(h, i, e, 5, dev)
    e_loc = e // world
    layer = MegaMoE(
        h, i, e, k, t, w1[me * e_loc : (me + 1) * e_loc], w2[me * e_loc : (me + 1) * e_loc], precision=args.precision
    )  # fp8: the phases below select the fp8 kernels by their steps (named after the bf16 kernels)
    x, logits = make_inputs(t, h, e, args.skewed, 100 + me, dev)
    y = torch.empty_like(x)
    layer(x, logits, out=y)
    torch.cuda.synchronize()
    ids, wts = (v.clone() for v in layer.routing(t))
    ref = reference(x, ids, wts, w1, w2)
    rel_err = float((y.float() - ref).norm() / ref.norm())
    bindings = layer._bindings(x, logits, y)

    rows: dict[str, float] = {}
    rows["megamoe_eager_ms"] = _median_ms(lambda: layer(x, logits, out=y), args.rep_ms)
    for phase, kernels in PHASES.items():  # each phase alone on the last call's data; the order keeps it valid
        rows[f"{phase}_ms"] = _median_ms(lambda kernels=kernels: layer.run(bindings, t, only=kernels), args.rep_ms)
    graph = None
    if world == 1:
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            layer(x, logits, out=y)  # warm up on the capture stream
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            layer(x, logits, out=y)
        rows["megamoe_graph_ms"] = _median_ms(graph.replay, args.rep_ms)
        torch.cuda.synchronize()
        graph_err = float((y.float() - ref).norm() / ref.norm())
        rows["torch_reference_bf16_ms"] = _median_ms(lambda: reference_bf16(x, ids, wts, w1, w2), args.rep_ms)
    pairs = t * k
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(dev),
        "versions": {
            "torch": torch.__version__,
            "triton": __import__("triton").__version__,
            "cuda": torch.version.cuda,
        },
        "command": " ".join(sys.argv),
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
        "rel_err_vs_fp32": rel_err,
        "times_ms": rows,
    }
    if world == 1:
        weight_bytes, flops = layer.cfg.weight_bytes(), layer.cfg.flops(pairs)
        roof_ms = roofline_s(weight_bytes, flops) * 1e3
        result["graph_rel_err_vs_fp32"] = graph_err
        result["roofline"] = {
            "weight_bytes": weight_bytes,
            "flops": flops,
            "copy_bw": COPY_BW,
            "matmul_rate": MATMUL_RATE,
            "roofline_ms": roof_ms,
            "fraction_graph": roof_ms / rows["megamoe_graph_ms"],
            "fraction_eager": roof_ms / rows["megamoe_eager_ms"],
            "fraction_gemms_only": roof_ms / rows["grouped_gemms_ms"],
        }
    bindings = graph = None  # the layer's symmetric tensors must be dropped at close() on every rank
    layer.close()
    if me == 0:
        print(
            f"shape H={h} I={i} E={e} (local {e_loc}) top-k={k} T={t} world={world} {args.precision} "
            f"{'skewed' if args.skewed else 'random'}; rel err vs fp32 {rel_err:.2e}"
        )
        for name, ms in rows.items():
            print(f"  {name:26} {ms * 1e3:9.1f} us")
        if "roofline" in result:
            rf = result["roofline"]
            print(
                f"  {'roofline':26} {rf['roofline_ms'] * 1e3:9.1f} us   graph {rf['fraction_graph']:.0%}, "
                f"eager {rf['fraction_eager']:.0%}, GEMMs alone {rf['fraction_gemms_only']:.0%} of roofline"
            )
        args.out.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = (
            args.out
            / f"tutorial3_megamoe_E{e}_w{world}_{'skewed' if args.skewed else 'random'}_{args.precision}_{stamp}.json"
        )
        path.write_text(json.dumps(result, indent=1))
        print(f"  wrote {path}")
    rt.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
