"""Sweep the grouped-GEMM tiles of MegaMoE on a GPU: time L1 (+SwiGLU) and L2 per candidate, check each.

One layer call at world 1 fixes the routing and the pair lists; then every candidate's two GEMM
launches run on the same bindings. Each candidate's ``h`` and ``y_pair`` must match the first
candidate's within bf16 rounding (a wrong tile walk shows up as a large error or NaN; workspaces are
poisoned first). Medians of ``triton.testing.do_bench`` (L2 flushed between repeats). Prints a table
and writes JSON to ``--out`` (default ``$OUT`` or ``bench/results/``)::

    python -m tutorials.megamoe.tune_gemms                  # the production per-rank load: H=4096, I=1536,
                                                            # E=16, k=8, T=512
    python -m tutorials.megamoe.tune_gemms --precision fp8  # the fp8 GEMMs (K and L1's N fixed at the
                                                            # 128 scale block)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import torch

from ..common.run_metadata import run_metadata
from .config import Tiles
from .launch import install_descriptor_scratch, launches
from .megamoe import MegaMoE, make_inputs, make_weights

# (block_m, block_n, block_k, num_warps, num_stages, group_m[, tma]) per kernel; the first is the reference.
L1_CANDIDATES = [
    (128, 128, 32, 8, 6, 8, True),  # choose_tiles' pick: weight tiles through TMA
    (128, 128, 32, 8, 6, 8),  # the same with pointer loads
    (128, 128, 32, 8, 5, 4),
    (128, 64, 64, 8, 4, 4),  # narrow N
    (128, 128, 32, 8, 6, 4),
    (128, 128, 32, 8, 4, 4),
    (128, 128, 32, 8, 5, 2),
    (128, 128, 32, 8, 5, 8),
    (128, 128, 64, 8, 4, 4),
    (64, 128, 64, 4, 4, 4),
    (128, 128, 64, 8, 4, 8, True),
]
L2_CANDIDATES = [
    (128, 256, 32, 8, 6, 8),  # choose_tiles' pick
    (128, 256, 32, 8, 5, 4),
    (128, 128, 64, 8, 4, 4),  # narrow N
    (128, 256, 32, 8, 6, 4),
    (128, 256, 32, 8, 4, 4),
    (128, 256, 64, 8, 4, 8),
    (128, 256, 64, 8, 4, 2),
    (64, 256, 64, 4, 4, 4),
    (128, 256, 32, 8, 6, 8, True),  # h and weight tiles through TMA
    (128, 256, 64, 8, 4, 8, True),
    (128, 256, 64, 8, 3, 8, True),
]
# fp8: K is one scale block (128) and so is L1's N (h is quantized per 128 columns).
L1_FP8_CANDIDATES = [
    (64, 128, 128, 8, 4, 4),  # choose_tiles_fp8's pick (no spills)
    (128, 128, 128, 8, 4, 4),  # the first fp8 version's tiles (84 B spilled)
    (64, 128, 128, 8, 3, 8),
    (64, 128, 128, 8, 4, 8),
    (128, 128, 128, 8, 2, 4),
    (64, 128, 128, 4, 4, 4),
]
L2_FP8_CANDIDATES = [
    (64, 256, 128, 8, 4, 4),  # choose_tiles_fp8's pick (no spills)
    (128, 256, 128, 8, 3, 4),  # the first fp8 version's L2 tile (352 B spilled)
    (128, 128, 128, 8, 4, 4),
    (64, 128, 128, 8, 4, 4),
    (64, 256, 128, 8, 3, 8),
    (128, 128, 128, 8, 3, 8),
]
SWEEPS = {
    "bf16": (("moe_l1_swiglu", L1_CANDIDATES), ("moe_l2", L2_CANDIDATES)),
    "fp8": (("moe_l1_swiglu_fp8", L1_FP8_CANDIDATES), ("moe_l2_fp8", L2_FP8_CANDIDATES)),
}


def _tiles(kernel: str, cand: tuple, base: Tiles) -> Tiles:
    bm, bn, bk, warps, stages, group, *tma = cand
    through_tma = bool(tma and tma[0])  # the swept kernel's; the other GEMM keeps the layer's choice
    if kernel.startswith("moe_l1"):
        return Tiles(bm, bn, base.block_n2, bk, warps, stages, group, tma_l1=through_tma, tma_l2=base.tma_l2)
    return Tiles(bm, base.block_n1, bn, bk, warps, stages, group, tma_l1=base.tma_l1, tma_l2=through_tma)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--intermediate", type=int, default=1536)
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--rep-ms", type=int, default=200)
    parser.add_argument("--precision", choices=sorted(SWEEPS), default="bf16")
    parser.add_argument(
        "--out", type=Path, default=Path(os.environ.get("OUT") or "bench/results")
    )
    args = parser.parse_args(argv)
    import triton
    import triton.testing

    from triton_raw_ext import runtime as rt

    rt.init()
    if rt.n_pes() != 1:
        raise SystemExit("tutorials.megamoe.tune_gemms runs at world 1 (all experts local)")
    dev = torch.device("cuda", torch.cuda.current_device())
    install_descriptor_scratch(dev)  # for the TMA candidates
    h, i, e, k, t = args.hidden, args.intermediate, args.experts, args.top_k, args.tokens
    w1, w2 = make_weights(h, i, e, 5, dev)
    layer = MegaMoE(h, i, e, k, t, w1, w2, precision=args.precision)
    x, logits = make_inputs(t, h, e, False, 100, dev)
    y = torch.empty_like(x)
    layer(x, logits, out=y)
    torch.cuda.synchronize()
    bindings = layer._bindings(x, logits, y)
    pairs = t * k
    (l1, _), (l2, _) = SWEEPS[args.precision]
    flops = {l1: 2 * pairs * h * 2 * i, l2: 2 * pairs * i * h}
    output = {l1: "h", l2: "y_pair"}
    rows, reference = [], {}
    for kernel, candidates in SWEEPS[args.precision]:
        for cand in candidates:
            tiles = _tiles(kernel, cand, layer.tiles)
            (launch,) = [lc for lc in launches(layer.cfg, tiles, t) if lc.name == kernel]
            call_args = launch.arguments(bindings)

            def run(launch=launch, call_args=call_args) -> None:
                launch.fn[launch.grid](
                    *call_args, **launch.constexprs, num_warps=launch.num_warps, num_stages=launch.num_stages
                )

            out = bindings[output[kernel]][:pairs]
            row = {"kernel": kernel, "tiles": list(cand), "grid": launch.grid[0]}
            try:
                out.fill_(float("nan"))
                run()
                torch.cuda.synchronize()
                got = out.float().clone()
                if kernel not in reference:
                    reference[kernel] = got
                ref = reference[kernel]
                row["rel_err_vs_first"] = float((got - ref).norm() / ref.norm())
                row["ok"] = bool(torch.isfinite(got).all()) and row["rel_err_vs_first"] < 1e-2
                ms = float(triton.testing.do_bench(run, warmup=10, rep=args.rep_ms, return_mode="median"))
                row["us"] = ms * 1e3
                row["tflops"] = flops[kernel] / (ms * 1e-3) / 1e12
            except Exception as exc:  # a candidate that does not compile (shared memory, registers) is reported
                row.update(ok=False, error=repr(exc)[:300])
            rows.append(row)
            verdict = "ok" if row["ok"] else "FAIL " + row.get("error", "")
            us, tflops = row.get("us", float("nan")), row.get("tflops", float("nan"))
            print(f"{kernel:14} {str(cand):28} {us:8.1f} us {tflops:6.1f} TFLOP/s  {verdict}", flush=True)
    best = {}
    for kernel in flops:
        good = [r for r in rows if r["kernel"] == kernel and r["ok"]]
        if good:
            best[kernel] = min(good, key=lambda r: r["us"])
    result = {
        **run_metadata(),
        "shape": {"hidden": h, "intermediate": i, "experts": e, "top_k": k, "tokens": t, "pairs": pairs},
        "precision": args.precision,
        "tile_fields": ["block_m", "block_n", "block_k", "num_warps", "num_stages", "group_m", "tma"],
        "rows": rows,
        "best": best,
    }
    print("best:", {kname: (r["tiles"], round(r["us"], 1)) for kname, r in best.items()})
    bindings = None
    layer.close()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"tutorial3_tune_gemms_{args.precision}_{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")
    rt.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
