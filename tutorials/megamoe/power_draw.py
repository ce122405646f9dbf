"""One MegaMoE call replayed for seconds as a CUDA graph while nvidia-smi samples the GPU's SM clock and power.

A benchmark's median says how long a call takes, not what held it there. This replays the persistent layer's
call (the default kernel, at fp8 its Triton twin too, each ``--variant`` as in ``benchmark``) and the dense
cuBLAS GEMMs of the same FLOPs (fp8: also block-scaled), each for ``--seconds`` back to back, and samples
``nvidia-smi`` every 50 ms meanwhile: the SM clock, the power drawn against the board's limit and the reasons
the driver gives for holding the clock down (``clocks_event_reasons.active``). A kernel held at the power limit
(reason ``sw_power_cap``) runs at whatever clock its energy per cycle allows: it gets faster by spending less
energy per call, not by leaving the tensor cores idle less often. Each row's energy per call is its time by its
median power. ``--gemm-items`` adds the default call's L1 and L2 items replayed alone (``gemm_phase.gemm_run``),
and with the Gluon kernel each of the two alone, so that the call's energy splits into its GEMM items' and
the rest's::

    python -m tutorials.megamoe.power_draw [--precision fp8] [--routing skewed] [--seconds 3] \
        [--variant LABEL:NAME=VALUE,...] [--gemm-items] --json $OUT/power.json

Needs a GPU, nvidia-smi on PATH and the plugin's clang (the persistent kernel's waits are raw CUDA).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

# nvidia-smi's query fields, in the order of a sample line (``--format=csv,noheader,nounits``)
QUERY = ("clocks.sm", "power.draw", "power.limit", "clocks_event_reasons.active")
# The bits of clocks_event_reasons.active (nvidia-smi --help-query-gpu) by name
EVENT_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
}  # fmt: skip
SAMPLE_MS = 50


def summarize_samples(lines: Sequence[str]) -> dict:
    """The samples of one sustained replay (``QUERY``'s fields, one CSV line each): the first and last fifth
    dropped (the clock ramps at both ends), then the SM clock's median and minimum in MHz, the power's
    median and maximum in W, the limit, and every reason named in the samples kept. Raises ValueError when
    fewer than 5 samples were taken (too short a replay to say)."""
    rows = [[field.strip() for field in line.split(",")] for line in lines if line.strip()]
    if len(rows) < 5:
        raise ValueError(f"power_draw: {len(rows)} samples of nvidia-smi; replay for longer (--seconds)")
    kept = rows[len(rows) // 5 : len(rows) - len(rows) // 5]
    clocks = [float(row[0]) for row in kept]
    power = [float(row[1]) for row in kept]
    bits = 0
    for row in kept:
        bits |= int(row[3], 16)
    unknown = bits & ~sum(EVENT_REASONS)
    return {
        "samples": len(kept),
        "sm_mhz_median": statistics.median(clocks),
        "sm_mhz_min": min(clocks),
        "power_w_median": statistics.median(power),
        "power_w_max": max(power),
        "power_limit_w": float(kept[0][2]),
        "event_reasons": [name for bit, name in EVENT_REASONS.items() if bits & bit]
        + ([f"{unknown:#x}"] if unknown else []),
    }


def sustained(run: Callable[[], object], seconds: float) -> dict:
    """``run`` replayed back to back for ``seconds`` (after 20 warm-up calls) while nvidia-smi samples the
    GPU: us per call, calls, and :func:`summarize_samples` of the samples."""
    import torch

    for _ in range(20):
        run()
    torch.cuda.synchronize()
    command = ["nvidia-smi", f"--query-gpu={','.join(QUERY)}", "--format=csv,noheader,nounits", f"-lms={SAMPLE_MS}"]
    sampler = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)  # the sampler's first lines come before the replay reaches its clock
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(50):
                run()
            torch.cuda.synchronize()
            calls += 50
        us = (time.perf_counter() - start) / calls * 1e6
    finally:
        sampler.terminate()
    lines = sampler.communicate()[0].splitlines()
    summary = summarize_samples(lines)
    return {"us_per_call": us, "calls": calls, **summary, "energy_mj": us * summary["power_w_median"] * 1e-3}


def main(argv: list[str] | None = None) -> int:
    import torch

    from triton_raw_ext import runtime as rt

    from ..common.run_metadata import run_metadata
    from .benchmark import captured, variants
    from .config import MoEConfig
    from .gemm_baselines import dense_block_scaled_gemms, dense_gemms
    from .gemm_phase import gemm_run
    from .megamoe import TIMED_ROUTINGS, MegaMoE, make_inputs, make_weights
    from .persistent_launch import persistent_config

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--precision", default="fp8", choices=["bf16", "fp8"])
    parser.add_argument("--routing", default="random", choices=TIMED_ROUTINGS)
    parser.add_argument("--shape", type=int, nargs=5, default=[4096, 1536, 16, 8, 512],
                        metavar=("H", "I", "E", "K", "T"))  # fmt: skip
    parser.add_argument("--seconds", type=float, default=3.0, help="replay time per row")
    parser.add_argument("--variant", action="append", default=[], metavar="LABEL:NAME=VALUE,...",
                        help="also replay a persistent layer with these PersistentConfig fields")  # fmt: skip
    parser.add_argument("--gemm-items", action="store_true",
                        help="also replay the default call's L1 and L2 items alone, and each alone")  # fmt: skip
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    extra = variants(args.variant, ["persistent"])
    if shutil.which("nvidia-smi") is None:
        raise SystemExit("power_draw samples the GPU with nvidia-smi: put it on PATH (it comes with the driver)")
    h, i, e, k, t = args.shape
    rt.init()
    if rt.n_pes() != 1:
        raise SystemExit("power_draw runs at world 1 (one process)")
    dev = torch.device("cuda", torch.cuda.current_device())
    cfg = MoEConfig(h, i, e, k, t, 1, args.precision)
    w1, w2 = make_weights(h, i, e, 5, dev)
    x, logits = make_inputs(t, h, e, args.routing, 100, dev, top_k=k)
    idle = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit",
                           "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()  # fmt: skip
    print(f"idle: {idle}", flush=True)
    knob_sets = {"persistent": {}}
    if persistent_config(cfg, {}).gluon:  # the Gluon kernel's Triton twin, side by side
        knob_sets["persistent_triton"] = {"gluon": False}
    knob_sets.update(extra)
    rows = {}
    for name, knobs in knob_sets.items():
        pc = persistent_config(cfg, knobs)
        layer = MegaMoE(h, i, e, k, t, w1, w2, precision=args.precision, impl="persistent", persistent=pc)
        y = torch.empty_like(x)
        graph = captured(lambda layer=layer, y=y: layer(x, logits, out=y))
        rows[f"{name}_graph"] = sustained(graph.replay, args.seconds)
        if args.gemm_items and name == "persistent":  # on the state the replayed calls left
            for region in ("gemm", "l1", "l2") if pc.gluon else ("gemm",):
                graph = captured(gemm_run(layer, pc, x, logits, y, region))
                rows[f"persistent_{region}_items_graph"] = sustained(graph.replay, args.seconds)
        del graph
        layer.close()
    rows["dense_gemms"] = sustained(dense_gemms(t * k, h, i, args.precision, dev), args.seconds)
    if args.precision == "fp8":  # the GEMMs' floor with the call's block scales
        rows["dense_gemms_block_scaled"] = sustained(dense_block_scaled_gemms(t * k, h, i, dev), args.seconds)
    for name, row in rows.items():
        print(f"  {name:28s} {row['us_per_call']:7.1f} us  {row['energy_mj']:6.1f} mJ  SM {row['sm_mhz_median']:.0f} "
              f"MHz (min {row['sm_mhz_min']:.0f})  {row['power_w_median']:.0f} W of {row['power_limit_w']:.0f}  "
              f"{' '.join(row['event_reasons']) or 'no clock event'}")  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {**run_metadata(), "precision": args.precision, "routing": args.routing, "shape": args.shape,
                "seconds": args.seconds, "idle": idle}  # fmt: skip
        args.json.write_text(json.dumps({**meta, "rows": rows}, indent=1))
    rt.finalize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
