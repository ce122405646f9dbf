"""Benchmark of AllGatherGEMM: AG-GEMM total, all-gather alone, GEMM alone, torch baseline; one run.

At world > 1 ``gemm_checked`` is the GEMM alone with its ready checks (flags already up), which
splits AG-GEMM's cost over the GEMM alone into the checks and the overlap with the transfers.

``python -m tutorials.allgather_gemm.benchmark`` (world 1) or ``[TRITON_RAW_SHARED_GPU=1] torchrun
--nproc_per_node=N -m tutorials.allgather_gemm.benchmark`` from the repository root. Variants are
timed in interleaved rounds (see :func:`tutorials.common.timing.time_repeats`); times are rank-max
per repeat, reported as p50/p90/p99, with each variant's host enqueue time and whether the device
sleep before the timed call (``--host-lead-us``) covered it. The torch baseline is
``all_gather_into_tensor`` + ``matmul`` where NCCL can run, ``torch.matmul`` alone at world 1 (the
all-gather of one rank is empty), and absent in shared-GPU mode (NCCL refuses two ranks on one GPU).
Where NCCL runs, ``nccl_all_gather`` times ``all_gather_into_tensor`` alone, and each AG-GEMM variant is
also judged against max(that, its GEMM alone): the time of the two run one after the other with perfect
overlap (``vs_overlap_bound``, goal ``GOAL_VS_OVERLAP_BOUND``).
``--configs all`` times every candidate tile config of ``schedule.CANDIDATE_CONFIGS``; ``--push both``
times AG-GEMM with the SM push and with the copy engine side by side (``ag_gemm/sm``,
``ag_gemm/copy_engine``) and prints their ratio, whose crossover over ``--shapes`` sets
``push.SM_PUSH_MAX_SHARD_BYTES``; ``--shapes``
takes one or more shapes, timed one after the other in the same processes. Writes one JSON per shape
to ``--out`` (a folder), with the shape's goal (:func:`goal`: one at world 1, one at
world > 1); exits 2 when a goal is not met.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from ..common import timing
from ..common.ranks import every_rank
from ..common.run_metadata import run_metadata
from ..common.timing import rank_max, summarize
from . import reference
from .allgather_gemm import DTYPES, TUTORIAL_SHAPES, AllGatherGEMM, _parse_shape
from .push import PUSH_CHOICES
from .schedule import CANDIDATE_CONFIGS, DEFAULT_CONFIG, gemm_flops

GOAL_RATIO = 0.90  # world 1: best AG-GEMM at least this fraction of torch.matmul's speed
GOAL_VS_GEMM_ALONE = 1.05  # world > 1: best AG-GEMM total at most this times its GEMM alone
GOAL_VS_OVERLAP_BOUND = 1.10  # world > 1: AG-GEMM at most this times max(NCCL all-gather alone, GEMM alone)
PUSH_PATHS = ("copy_engine", "sm")  # what --push both times side by side


def goal(rows: list[dict], world: int) -> dict | None:
    """The verdict of one shape from its rows (``variant``, ``p50``, ``speed_vs_torch``); None when it
    has no baseline.

    World 1: the fastest ``ag_gemm*`` variant at >= GOAL_RATIO x torch.matmul's speed.
    World > 1: the fastest ``ag_gemm*`` variant's p50 at most GOAL_VS_GEMM_ALONE x the p50 of
    ``gemm_alone`` with the same config (the GEMM on an already gathered A: what overlap cannot beat).
    """
    best = min((r for r in rows if r["variant"].startswith("ag_gemm")), key=lambda r: r["p50"])
    if world == 1:
        if best["speed_vs_torch"] is None:
            return None
        return {"ratio_best": best["speed_vs_torch"], "best_variant": best["variant"], "target": GOAL_RATIO,
                "met": best["speed_vs_torch"] >= GOAL_RATIO}
    alone_name = best["variant"].split("/")[0].replace("ag_gemm", "gemm_alone", 1)
    alone = next(r for r in rows if r["variant"] == alone_name)
    ratio = best["p50"] / alone["p50"]
    verdict = {"ratio_vs_gemm_alone": ratio, "best_variant": best["variant"], "target": GOAL_VS_GEMM_ALONE,
               "met": ratio <= GOAL_VS_GEMM_ALONE, "speed_vs_torch": best["speed_vs_torch"]}  # fmt: skip
    return {**verdict, **overlap_goal(rows)}


def overlap_goal(rows: list[dict]) -> dict:
    """Each ``ag_gemm*`` variant's p50 over max(``nccl_all_gather``'s p50, the p50 of ``gemm_alone`` with
    its config): ``vs_overlap_bound`` per variant, ``overlap_met`` when each is at most
    GOAL_VS_OVERLAP_BOUND ({} without an NCCL all-gather row)."""
    nccl = next((r for r in rows if r["variant"] == "nccl_all_gather"), None)
    if nccl is None:
        return {}
    ratios = {}
    for r in rows:
        if r["variant"].startswith("ag_gemm"):
            alone = next(a for a in rows if a["variant"] == r["variant"].split("/")[0].replace("ag_gemm", "gemm_alone"))
            ratios[r["variant"]] = r["p50"] / max(nccl["p50"], alone["p50"])
    return {"vs_overlap_bound": ratios, "overlap_target": GOAL_VS_OVERLAP_BOUND,
            "overlap_met": all(v <= GOAL_VS_OVERLAP_BOUND for v in ratios.values())}  # fmt: skip


def bench_shape(shape: tuple[int, int, int], args: argparse.Namespace, rank: int, world: int) -> dict | None:
    """Time every variant at one shape (collective), print the table and write the JSON (rank 0);
    returns the shape's :func:`goal`. The shape's operators and workspaces are freed on return, on
    every rank at the same point (symmetric frees are collective)."""
    import torch.distributed as dist

    nccl = world > 1 and "nccl" in str(dist.get_backend())
    barrier = dist.barrier if world > 1 else None
    m, n, k = shape
    dtype = DTYPES[args.dtype]
    a, b = reference.make_inputs(m, n, k, dtype, 0, 0, rank, "cuda")
    out = torch.empty(world * m, n, dtype=dtype, device="cuda")
    configs = CANDIDATE_CONFIGS if args.configs == "all" else (DEFAULT_CONFIG,)
    pushes = (PUSH_PATHS if world > 1 else ("auto",)) if args.push == "both" else (args.push,)

    variants: dict[str, Callable[[], object]] = {}
    for i, cfg in enumerate(configs):
        ops = {p: AllGatherGEMM(m, n, k, dtype, config=cfg, push=p) for p in pushes}  # type: ignore[arg-type]
        op = ops[pushes[0]]
        gathered = op.all_gather(a).clone()
        tag = "" if args.configs == "default" else f"[cfg{i}]"
        for p, push_op in ops.items():
            variants[f"ag_gemm{tag}" + (f"/{p}" if len(ops) > 1 else "")] = lambda op=push_op: op(a, b, out=out)
        variants[f"gemm_alone{tag}"] = lambda op=op, g=gathered: op.gemm(g, b, out=out)
        if world > 1:  # the same with the ready checks (all flags up): their cost without the overlap
            variants[f"gemm_checked{tag}"] = lambda op=op, g=gathered: op.gemm(g, b, out=out, checks=True)
        if i == 0:
            variants["all_gather_alone"] = lambda op=op: op.all_gather(a)
    if world == 1:
        variants["torch_matmul"] = lambda: torch.matmul(a, b, out=out)
    elif nccl:
        full = torch.empty(world * m, k, dtype=dtype, device="cuda")

        def torch_allgather_matmul() -> None:
            dist.all_gather_into_tensor(full, a)
            torch.matmul(full, b, out=out)

        variants["torch_allgather_matmul"] = torch_allgather_matmul
        variants["nccl_all_gather"] = lambda: dist.all_gather_into_tensor(full, a)

    for fn in variants.values():  # compile, load and settle every variant before timing
        for _ in range(args.warmup):
            fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in variants}
    host: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            mine, mine_host = timing.time_repeats(fn, args.repeats, barrier, args.host_lead_us)
            if world > 1:
                gathered_times = every_rank((mine, mine_host))
                mine = rank_max([t for t, _ in gathered_times])
                mine_host = rank_max([h for _, h in gathered_times])
            times[name] += mine
            host[name] += mine_host

    flops = gemm_flops(m, n, k, world)
    rows = []
    for name, ts in times.items():
        stats = summarize(ts)
        stats["tflops_p50"] = flops / (stats["p50"] * 1e-3) / 1e12 if "all_gather" not in name else None
        enqueue = summarize(host[name])
        stats["host_enqueue_ms"] = {"p50": enqueue["p50"], "max": max(host[name])}
        stats["host_lead_covered"] = max(host[name]) * 1e3 < args.host_lead_us
        rows.append({"variant": name, **stats})
    baseline = next((r for r in rows if r["variant"].startswith("torch_")), None)
    for r in rows:
        r["speed_vs_torch"] = baseline["p50"] / r["p50"] if baseline and "all_gather" not in r["variant"] else None
    config_names = {f"cfg{i}": cfg.describe() for i, cfg in enumerate(configs)}
    verdict = goal(rows, world)

    if rank == 0:
        print(f"AG-GEMM benchmark: world={world} m_per_rank={m} n={n} k={k} {args.dtype} "
              f"({args.rounds}x{args.repeats} repeats, rank-max)")
        for tag, desc in config_names.items():
            print(f"  {tag}: {desc}")
        print(f"{'variant':>26} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'TFLOP/s':>8} {'vs torch':>8} "
              f"{'host ms':>8}")
        for r in rows:
            tf = f"{r['tflops_p50']:.0f}" if r["tflops_p50"] else "-"
            vs = f"{r['speed_vs_torch']:.3f}" if r["speed_vs_torch"] else "-"
            late = "" if r["host_lead_covered"] else f"  (host enqueue > the {args.host_lead_us:.0f} us lead: timed)"
            print(f"{r['variant']:>26} {r['p50']:>8.3f} {r['p90']:>8.3f} {r['p99']:>8.3f} {tf:>8} {vs:>8} "
                  f"{r['host_enqueue_ms']['max']:>8.3f}{late}")
        for tag in ([""] if args.configs == "default" else [f"[{t}]" for t in config_names]):
            by_path = {p: next((r for r in rows if r["variant"] == f"ag_gemm{tag}/{p}"), None) for p in PUSH_PATHS}
            if all(by_path.values()):
                sm, ce = by_path["sm"]["p50"], by_path["copy_engine"]["p50"]
                print(f"push ag_gemm{tag}: sm {sm:.3f} ms, copy_engine {ce:.3f} ms, sm/copy_engine {sm / ce:.3f} "
                      f"-> {'sm' if sm < ce else 'copy_engine'} faster (shard {m * k * 2 / 2**20:.1f} MiB)")
        if verdict and world == 1:
            print(f"goal >= {GOAL_RATIO:.2f}x torch.matmul: best {verdict['best_variant']} at "
                  f"{verdict['ratio_best']:.3f}x -> {'MET' if verdict['met'] else 'NOT MET'}")
        elif verdict:
            print(f"goal AG-GEMM <= {GOAL_VS_GEMM_ALONE:.2f}x GEMM alone: best {verdict['best_variant']} at "
                  f"{verdict['ratio_vs_gemm_alone']:.3f}x -> {'MET' if verdict['met'] else 'NOT MET'}")
            for variant, ratio in verdict.get("vs_overlap_bound", {}).items():
                print(f"goal {variant} <= {GOAL_VS_OVERLAP_BOUND:.2f}x max(NCCL all-gather, GEMM alone): "
                      f"{ratio:.3f}x -> {'MET' if ratio <= GOAL_VS_OVERLAP_BOUND else 'NOT MET'}")
        args.out.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now(datetime.timezone.utc)
        result = {
            **run_metadata(), "world": world, "shape": [m, n, k],
            "dtype": args.dtype, "configs": config_names, "push": args.push, "rows": rows, "goal": verdict,
            "host_lead_us": args.host_lead_us,
            "shared_gpu": os.environ.get("TRITON_RAW_SHARED_GPU", ""),
        }  # fmt: skip
        path = args.out / f"tutorial2_ag_gemm_w{world}_{m}x{n}x{k}_{args.dtype}_{stamp:%Y%m%dT%H%M%S}.json"
        path.write_text(json.dumps(result, indent=1))
        print(f"wrote {path}")
    return verdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", "--shape", type=_parse_shape, nargs="+", default=[(4096, 8192, 8192)],
                        help="m_per_rank x n x k, one or more (the tutorial's five: --shapes " +
                        " ".join("x".join(map(str, s)) for s in TUTORIAL_SHAPES) + ")")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    parser.add_argument("--configs", choices=("default", "all"), default="default")
    parser.add_argument("--push", choices=(*PUSH_CHOICES, "both"), default="auto",
                        help="the operators' push path; 'both' times the SM and copy-engine paths side by side "
                             "(world > 1) to read the crossover that push.SM_PUSH_MAX_SHARD_BYTES sets")
    parser.add_argument("--repeats", type=int, default=20, help="timed repeats per variant and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--host-lead-us", type=float, default=timing.DEFAULT_HOST_LEAD_US,
                        help="device sleep before each timed call, so the host enqueues it before timing starts")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "bench/results"))
    args = parser.parse_args(argv)
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from triton_raw_ext import runtime

        runtime.init()
    else:
        torch.cuda.set_device(0)
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    verdicts = [bench_shape(shape, args, rank, world) for shape in args.shapes]
    return 2 if any(v is not None and not (v["met"] and v.get("overlap_met", True)) for v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
