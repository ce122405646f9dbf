"""Where a persistent MegaMoE call spends its time: one traced call per knob set, region by region.

With ``PersistentConfig.trace`` every work item writes when a program took it, when its wait ended (GEMM
items), when it finished (%globaltimer) and its SM (``persistent.TRACE_FIELDS``). :func:`summarize` turns
those rows into a per-region table: items run, when the region's first item started and its last
ended (us from the call's first item), the items' busy time, the part of it spent waiting (GEMM
items), the mean and longest item, for the GEMM regions the items started after the last dispatch item
and those on experts' last, partial M tiles apart; and the call's span and how busy its programs were. ``main``
builds a traced layer per ``--config`` at world 1 (the production per-rank load by default), times it
(median of ``triton.testing.do_bench``, eager, so the trace's own stores are in the time) and prints
the table of its last call::

    python -m tutorials.megamoe.trace_persistent --precision bf16 --config "" --config "block_m=64 num_warps=4"

JSON to ``--json`` (one entry per config; with ``--items`` also each item's times and SM, by region). Needs a
GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from .persistent import TRACE_FIELDS, Schedule
from .persistent_launch import knob_overrides

START, READY, END, SM = range(len(TRACE_FIELDS))


def tile_order(m_tiles: int, n_tiles: int, group_m: int, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """(pid_m, pid_n) of every item of a GEMM region over ``m_tiles`` x ``n_tiles`` tiles in the kernels' order:
    ``kernels._chunked_tile_of``'s, ``chunk`` N tiles at a time (``kernels._tile_of``'s where ``chunk`` is
    ``n_tiles``)."""
    idx = np.arange(m_tiles * n_tiles)
    local = idx % max(m_tiles * chunk, 1)
    per_group = group_m * chunk
    first_m = local // per_group * group_m
    size = np.maximum(np.minimum(m_tiles - first_m, group_m), 1)
    return first_m + local % per_group % size, local % per_group // size + idx // max(m_tiles * chunk, 1) * chunk


def gemm_item_rows(layout: np.ndarray, schedule: Schedule, block_m: int, group_m: int) -> dict[str, np.ndarray]:
    """The pairs in each GEMM item's M tile, per GEMM region (``l1``, ``l2``; 0 past the call's M tiles),
    from a call's ``layout`` buffer (``persistent._layout_item``: the pairs per local expert at [1, 1 +
    ``schedule.local_experts_p2``), 0 for the padding), its experts' tiles taken BLOCK_M pairs at a time
    and the items in ``kernels._tile_of``'s order (N tiles per region: the schedule's items per M tile), L2's
    a combine chunk of N tiles at a time where the schedule has several (``schedule.combine_chunks``)."""
    counts = [int(c) for c in layout[1 : 1 + schedule.local_experts_p2]]
    rows = np.array([min(block_m, c - j * block_m) for c in counts for j in range(-(-c // block_m))], dtype=np.int64)
    out = {}
    for region in ("l1", "l2"):
        items = getattr(schedule, region)
        n = items // schedule.m_tiles
        chunk = n // schedule.combine_chunks if region == "l2" else n
        pid_m = np.zeros(items, dtype=np.int64)
        pid_m[: len(rows) * n] = tile_order(len(rows), n, group_m, chunk)[0]
        out[region] = np.where(np.arange(items) < len(rows) * n, rows[np.minimum(pid_m, max(len(rows) - 1, 0))], 0)
    return out


def _mean(values: np.ndarray, where: np.ndarray) -> float:
    """Mean of ``values`` where ``where`` holds; 0.0 where it holds nowhere."""
    return float(values[where].mean()) if where.any() else 0.0


def _ran(trace: np.ndarray, who: str) -> np.ndarray:
    """Which items of ``trace`` ran; ValueError naming ``who`` when none did."""
    ran = trace[:, END] > 0
    if not ran.any():
        raise ValueError(f"{who}: no item of the trace ran (was the layer built with trace=True?)")
    return ran


def _regions(trace: np.ndarray, schedule: Schedule) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """(region, which of its items ran, their trace rows) for each region of ``schedule`` with an item that ran."""
    starts = schedule.starts()
    bounds = [0, *(starts[f"{r.upper()}_START"] for r in Schedule.REGIONS[1:]), starts["N_ITEMS"]]
    for name, lo, hi in zip(Schedule.REGIONS, bounds, bounds[1:], strict=False):
        ran = trace[lo:hi, END] > 0
        if ran.any():
            yield name, ran, trace[lo:hi][ran]


def summarize(trace: np.ndarray, schedule: Schedule, item_rows: dict[str, np.ndarray] | None = None,
              block_m: int = 0) -> dict:  # fmt: skip
    """Per-region timing of one traced call from its ``trace`` rows ([N_ITEMS, len(TRACE_FIELDS)] int64,
    zero for items not run: the GEMM items past the call's M tiles). Times in us from the call's first
    item; ``busy_us`` sums the items' durations, ``wait_us`` the part before their wait ended. With
    ``item_rows`` (:func:`gemm_item_rows`) its regions also report their items on M tiles of fewer than
    ``block_m`` pairs (experts' last tiles): ``tail_items``, ``tail_mean_item_us``, ``tail_mean_wait_us``,
    ``tail_mean_rows``, of those the tiles of at most ``block_m / 2`` pairs (one consumer's rows in the Gluon
    kernel): ``half_items``, ``half_mean_item_us``, ``half_mean_rows``, the full tiles' ``full_mean_item_us`` and
    ``full_mean_wait_us``, and ``idle_items``:
    items taken past the call's M tiles, which only end the region. The GEMM regions also report their items
    that started once the last dispatch item had ended (``settled_items``, ``settled_mean_item_us``,
    ``settled_mean_wait_us``): the region's means mix them with the first items, which wait for dispatch.
    With ``item_rows`` and combine items of a column chunk each, ``chunks``: :func:`_combine_chunks`."""
    ran = _ran(trace, "summarize")
    t0, t_end = trace[ran, START].min(), trace[ran, END].max()
    starts = schedule.starts()
    dispatch = trace[starts["DISPATCH_START"] : starts["L1_START"]]
    dispatched = dispatch[dispatch[:, END] > 0]
    regions = {}
    for name, region_ran, rows in _regions(trace, schedule):
        took = (rows[:, END] - rows[:, START]) / 1e3
        waited = np.where(rows[:, READY] > 0, rows[:, READY] - rows[:, START], 0) / 1e3
        regions[name] = {
            "items": int(len(rows)),
            "first_start_us": float((rows[:, START].min() - t0) / 1e3),
            "last_end_us": float((rows[:, END].max() - t0) / 1e3),
            "busy_us": float(took.sum()),
            "wait_us": float(waited.sum()),
            "mean_item_us": float(took.mean()),
            "max_item_us": float(took.max()),
        }
        if name in ("l1", "l2") and len(dispatched):
            settled = rows[:, START] >= dispatched[:, END].max()
            regions[name].update({
                "settled_items": int(settled.sum()),
                "settled_mean_item_us": _mean(took, settled),
                "settled_mean_wait_us": _mean(waited, settled),
            })  # fmt: skip
        if item_rows is not None and name in item_rows:
            pairs = item_rows[name][region_ran]
            tail, full = (pairs > 0) & (pairs < block_m), pairs >= block_m
            half = tail & (pairs <= block_m // 2)
            regions[name].update({
                "tail_items": int(tail.sum()),
                "tail_mean_item_us": _mean(took, tail),
                "tail_mean_rows": _mean(pairs, tail),
                "tail_mean_wait_us": _mean(waited, tail),
                "half_items": int(half.sum()),
                "half_mean_item_us": _mean(took, half),
                "half_mean_rows": _mean(pairs, half),
                "full_mean_item_us": _mean(took, full),
                "full_mean_wait_us": _mean(waited, full),
                "idle_items": int((pairs == 0).sum()),
            })  # fmt: skip
    span_us = float((t_end - t0) / 1e3)
    sms = int(len(np.unique(trace[ran, SM])))
    busy = sum(r["busy_us"] for r in regions.values())
    out = {"span_us": span_us, "sms": sms, "busy_fraction": busy / (span_us * sms), "regions": regions}
    if item_rows is not None and "l2" in item_rows and schedule.combine_chunks > 1:
        out["chunks"] = _combine_chunks(trace, schedule, int((item_rows["l2"] > 0).sum()), t0)
    return out


def _combine_chunks(trace: np.ndarray, schedule: Schedule, l2_items: int, t0: int) -> list[dict[str, float]]:
    """Per column chunk of a call whose combine items take one chunk each (``schedule.combine_chunks``), in us
    from ``t0``: when its last L2 item ended (``l2_done_us``; the call's ``l2_items`` L2 items a chunk at a
    time) and when its first combine item started and its last ended (``combine_first_us``,
    ``combine_last_us``; 0.0 where none ran): how far each chunk's combine overlaps the later chunks' L2."""
    starts = schedule.starts()
    l2 = trace[starts["L2_START"] : starts["L2_START"] + l2_items]
    combine = trace[starts["COMBINE_START"] : starts["COMBINE_START"] + schedule.combine]
    out = []
    for c, (tiles, items) in enumerate(zip(np.array_split(l2, schedule.combine_chunks),
                                           np.array_split(combine, schedule.combine_chunks), strict=True)):  # fmt: skip
        ran = items[:, END] > 0
        out.append({
            "chunk": c,
            "l2_done_us": float((tiles[:, END].max() - t0) / 1e3) if (tiles[:, END] > 0).any() else 0.0,
            "combine_first_us": float((items[ran, START].min() - t0) / 1e3) if ran.any() else 0.0,
            "combine_last_us": float((items[ran, END].max() - t0) / 1e3) if ran.any() else 0.0,
        })  # fmt: skip
    return out


def item_times(trace: np.ndarray, schedule: Schedule) -> dict[str, list[list[float]]]:
    """Each region's items that ran, in index order, as [start, wait ended, end] in us from the call's first
    item (wait ended: 0.0 where the item records none) and the SM: what :func:`summarize` sums up, for
    plotting or for questions its means do not answer (which items waited for what)."""
    t0 = trace[_ran(trace, "item_times"), START].min()
    out = {}
    for name, _, rows in _regions(trace, schedule):
        ready = np.where(rows[:, READY] > 0, (rows[:, READY] - t0) / 1e3, 0.0)
        out[name] = [[round(float(a), 3), round(float(b), 3), round(float(c), 3), int(d)] for a, b, c, d in
                     zip((rows[:, START] - t0) / 1e3, ready, (rows[:, END] - t0) / 1e3, rows[:, SM], strict=True)]
    return out


def traced_run(layer, run: Callable[[], None], items: bool = False) -> dict:
    """:func:`summarize` of one ``run`` of a persistent layer built with ``trace``: its trace rows zeroed
    first, then its trace and layout buffers read once the run has finished; with ``items`` also
    :func:`item_times` under ``"items"``."""
    import torch

    from .persistent_launch import schedule

    layer.local["trace"].zero_()
    run()
    torch.cuda.synchronize()
    pc = layer.persistent
    sch = schedule(layer.cfg, pc)
    rows = gemm_item_rows(layer.local["layout"].cpu().numpy(), sch, pc.block_m, pc.group_m)
    trace = layer.local["trace"].cpu().numpy()
    summary = summarize(trace, sch, rows, pc.block_m)
    return {**summary, "items": item_times(trace, sch)} if items else summary


def format_summary(summary: dict) -> list[str]:
    """The table of :func:`summarize`'s result, a line per region."""
    lines = [f"call span {summary['span_us']:.1f} us on {summary['sms']} SMs, items busy "
             f"{summary['busy_fraction']:.0%} of that",
             f"{'region':<9} {'items':>6} {'first us':>9} {'last us':>9} {'busy us':>10} {'waiting':>8} "
             f"{'mean us':>8} {'max us':>8}"]  # fmt: skip
    for name, r in summary["regions"].items():
        waiting = r["wait_us"] / r["busy_us"] if r["busy_us"] else 0.0
        lines.append(f"{name:<9} {r['items']:6d} {r['first_start_us']:9.1f} {r['last_end_us']:9.1f} "
                     f"{r['busy_us']:10.1f} {waiting:8.0%} {r['mean_item_us']:8.2f} "
                     f"{r['max_item_us']:8.2f}")  # fmt: skip
        if "settled_items" in r:
            lines.append(f"  {r['settled_items']} started after the last dispatch item: "
                         f"{r['settled_mean_item_us']:.2f} us each ({r['settled_mean_wait_us']:.2f} waiting)")
        if "tail_items" in r:
            lines.append(f"  {r['tail_items']} on experts' last, partial M tiles ({r['tail_mean_rows']:.1f} pairs "
                         f"on average): {r['tail_mean_item_us']:.2f} us each ({r['tail_mean_wait_us']:.2f} waiting); "
                         f"full tiles {r['full_mean_item_us']:.2f} us ({r['full_mean_wait_us']:.2f} waiting); "
                         f"{r['idle_items']} past the call's M tiles")  # fmt: skip
            lines.append(f"    of them {r['half_items']} of at most half a tile ({r['half_mean_rows']:.1f} pairs on "
                         f"average): {r['half_mean_item_us']:.2f} us each")  # fmt: skip
    for c in summary.get("chunks", []):
        lines.append(f"combine chunk {c['chunk']}: its L2 tiles done at {c['l2_done_us']:.1f} us, its combine items "
                     f"from {c['combine_first_us']:.1f} to {c['combine_last_us']:.1f} us")  # fmt: skip
    return lines


def _config(text: str) -> dict[str, object]:
    """``"name=value name=value"`` as PersistentConfig overrides (``persistent_launch.knob_overrides``;
    ``trace`` is this tool's own)."""
    try:
        overrides = knob_overrides(text.split())
    except ValueError as e:
        raise SystemExit(f"--config {text!r}: {e}") from None
    if "trace" in overrides:
        raise SystemExit(f"--config {text!r}: trace is always on here")
    return overrides


def main(argv: list[str] | None = None) -> int:
    import torch
    import triton

    from ..common.run_metadata import run_metadata
    from .config import MoEConfig
    from .megamoe import TIMED_ROUTINGS, MegaMoE, make_inputs, make_weights
    from .persistent_launch import persistent_config

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp8"])
    parser.add_argument("--routing", default="random", choices=TIMED_ROUTINGS)
    parser.add_argument("--shape", type=int, nargs=5, default=[4096, 1536, 16, 8, 512],
                        metavar=("H", "I", "E", "K", "T"))  # fmt: skip
    parser.add_argument("--config", action="append", default=None,
                        help='PersistentConfig overrides, e.g. "block_m=64 num_warps=4" ("" = the defaults)')
    parser.add_argument("--rep-ms", type=int, default=200)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--items", action="store_true", help="also each item's times and SM in the JSON")
    args = parser.parse_args(argv)

    from triton_raw_ext import runtime as rt

    rt.init()
    if rt.n_pes() != 1:
        raise SystemExit("trace_persistent runs at world 1 (one process)")
    dev = torch.device("cuda", torch.cuda.current_device())
    h, i, e, k, t = args.shape
    cfg = MoEConfig(h, i, e, k, t, 1, args.precision)
    w1, w2 = make_weights(h, i, e, 5, dev)
    x, logits = make_inputs(t, h, e, args.routing, 100, dev, top_k=k)
    results = []
    for text in args.config or [""]:
        pc = dataclasses.replace(persistent_config(cfg, _config(text)), trace=True)
        layer = MegaMoE(h, i, e, k, t, w1, w2, precision=args.precision, impl="persistent", persistent=pc)
        y = torch.empty_like(x)
        ms = triton.testing.do_bench(lambda layer=layer, y=y: layer(x, logits, out=y), rep=args.rep_ms)
        summary = traced_run(layer, lambda layer=layer, y=y: layer(x, logits, out=y), items=args.items)
        results.append({"config": dataclasses.asdict(pc), "eager_us": ms * 1e3, **summary})
        print(f"== {args.precision} {args.routing} [{text or 'defaults'}]: {ms * 1e3:.1f} us per eager call")
        print("\n".join(format_summary(summary)), flush=True)
        layer.close()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {**run_metadata(), "precision": args.precision, "routing": args.routing, "shape": args.shape}
        args.json.write_text(json.dumps({**meta, "configs": results}, indent=1))
    rt.finalize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
