"""Hardware counters of one MegaMoE call, region by region, beside the dense GEMMs of its FLOPs, read by Nsight Compute.

A benchmark says how long a call takes and ``power_draw`` at what clock; this says what its kernel did meanwhile.
It runs itself under ``ncu`` (``--clock-control none``: the clocks as a replay leaves them) and reads, per
row, the counters of :data:`WANTED` that this ncu knows: time and SM clock, HBM bytes read and written, L2
hit rate and the bytes the SMs asked L2 for, the tensor pipe's active share, the tensor operations executed
(padding included) and the instructions issued. The rows: the default persistent call, its L1 and L2 items
together and each alone on the state the call leaves (``gemm_phase.gemm_run``), and the dense GEMMs of the
same FLOPs (fp8: block-scaled too)::

    python -m tutorials.megamoe.counters [--precision fp8] [--routing skewed] [--knob NAME=VALUE ...] \
        --json $OUT/counters.json

Needs a GPU, ``ncu`` on PATH (or ``--ncu``) with access to the counters, and the plugin's clang. Each row's
kernels follow a marker kernel (``torch.cuda._sleep``) in the profiled range, which is how the report's
kernels are told apart.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

# What to read, by base name (``ncu --query-metrics`` lists bases): a counter this ncu does not know is left out
WANTED = (
    "gpu__time_duration.sum",
    "sm__cycles_elapsed.avg.per_second",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_sector_hit_rate.pct",
    "lts__t_sectors_srcunit_tex_op_read.sum",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_tensor_op_gmma.sum",
    "smsp__inst_executed.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
)
# The tensor operations executed, by source type: every base with one of these prefixes, summed
OPS_PREFIXES = ("sm__ops_path_tensor_src_fp8", "sm__ops_path_tensor_src_bf16_dst_fp32")
# Where the warps wait: each stall reason's share of the warps' active cycles (loader and consumers together)
STALL_PREFIX, STALL_SUFFIX = "smsp__warp_issue_stalled_", "_per_warp_active"
MARKER = "spin_kernel"  # torch.cuda._sleep's kernel, launched before each row's kernels


def known_metrics(listing: str) -> list[str]:
    """Of :data:`WANTED`, the metrics whose base name ``listing`` (``ncu --query-metrics``'s output: a base
    name first on each line) holds, then every listed base with a prefix of :data:`OPS_PREFIXES` as a sum
    (its sparse variants left out: the call runs none), then every stall reason's share (:data:`STALL_PREFIX`)."""
    bases = [line.split()[0] for line in listing.splitlines() if line.strip()]
    ops = [f"{base}.sum" for base in bases if base.startswith(OPS_PREFIXES) and "sparsity" not in base]
    stalls = [f"{base}.pct" for base in bases if base.startswith(STALL_PREFIX) and base.endswith(STALL_SUFFIX)]
    return [metric for metric in WANTED if metric.split(".")[0] in set(bases)] + ops + stalls


def parse_report(text: str, labels: Sequence[str]) -> dict[str, dict]:
    """``ncu --csv --page raw``'s report (a header line, a units line, one line per kernel) as one entry per
    label: the kernels after the label's marker kernel (the n-th marker opens the n-th label), each with its
    name and every counter as a number (as ncu printed it where it is not one). Raises ValueError when the
    report holds a different number of markers than labels."""
    lines = [line for line in text.splitlines() if line.startswith('"')]  # ncu's own notes are not quoted
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if len(rows) < 2:
        raise ValueError("counters: ncu's report has no kernel (was the profiled range empty?)")
    header, units = rows[0], rows[1]
    out: dict[str, dict] = {}
    current: list | None = None
    markers = 0
    for row in rows[2:]:
        fields = dict(zip(header, row, strict=False))
        name = fields.get("Kernel Name", "")
        if name.startswith(MARKER):
            if markers >= len(labels):
                raise ValueError(f"counters: more marker kernels than the {len(labels)} rows")
            current = out.setdefault(labels[markers], {"kernels": []})["kernels"]
            markers += 1
            continue
        if current is None:
            continue
        kernel: dict = {"name": name}
        for column, unit in zip(header, units, strict=False):
            if "__" not in column:
                continue
            value = fields.get(column, "").replace(",", "")
            try:
                kernel[column] = float(value)
            except ValueError:
                kernel[column] = value
            kernel.setdefault("units", {})[column] = unit
        current.append(kernel)
    if markers != len(labels):
        raise ValueError(f"counters: {markers} marker kernels in ncu's report for {len(labels)} rows")
    return out


def summarize(kernels: Sequence[dict]) -> dict:
    """One row's kernels as one: times, bytes, instructions and operations summed; rates and shares
    weighted by each kernel's time."""
    total_ns = sum(k.get("gpu__time_duration.sum", 0.0) for k in kernels) or 1.0
    out: dict = {"kernels": [k["name"][:80] for k in kernels]}
    metrics = dict.fromkeys(metric for k in kernels for metric in k if "__" in metric)
    for metric in metrics:
        values = [(k[metric], k.get("gpu__time_duration.sum", 0.0)) for k in kernels
                  if isinstance(k.get(metric), float)]  # fmt: skip
        if not values:
            continue
        if metric.endswith((".pct", "pct_of_peak_sustained_elapsed", "per_second")):
            out[metric] = sum(v * t for v, t in values) / total_ns
        else:
            out[metric] = sum(v for v, _ in values)
    return out


def _workload(args: argparse.Namespace) -> int:
    """The profiled process: every row's kernels once, each after a marker, between cudaProfilerStart/Stop."""
    import torch

    from triton_raw_ext import runtime as rt

    from .benchmark import _knobs
    from .config import MoEConfig
    from .gemm_baselines import dense_block_scaled_gemms, dense_gemms
    from .gemm_phase import gemm_run
    from .megamoe import MegaMoE, make_inputs, make_weights
    from .persistent_launch import persistent_config

    h, i, e, k, t = args.shape
    rt.init()
    dev = torch.device("cuda", torch.cuda.current_device())
    cfg = MoEConfig(h, i, e, k, t, 1, args.precision)
    w1, w2 = make_weights(h, i, e, 5, dev)
    x, logits = make_inputs(t, h, e, args.routing, 100, dev, top_k=k)
    pc = persistent_config(cfg, _knobs(args.knob))
    layer = MegaMoE(h, i, e, k, t, w1, w2, precision=args.precision, impl="persistent", persistent=pc)
    y = torch.empty_like(x)
    rows: dict[str, Callable[[], object]] = {"call": lambda: layer(x, logits, out=y)}
    for region in ("gemm", "l1", "l2") if pc.gluon else ("gemm",):
        rows[f"{region}_items"] = gemm_run(layer, pc, x, logits, y, region)
    rows["dense"] = dense_gemms(t * k, h, i, args.precision, dev)
    if args.precision == "fp8":
        rows["dense_block_scaled"] = dense_block_scaled_gemms(t * k, h, i, dev)
    for run in rows.values():  # compiled, and the call's state in place for the regions
        layer(x, logits, out=y)
        run()
    torch.cuda.synchronize()
    Path(args.labels).write_text(json.dumps(list(rows)))
    torch.cuda.profiler.start()
    for run in rows.values():
        layer(x, logits, out=y)  # the state each region starts from, outside its marker's range ...
        torch.cuda.synchronize()
        torch.cuda._sleep(1000)  # ... which this marker opens
        run()
        torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    layer.close()
    rt.finalize()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--precision", default="fp8", choices=["bf16", "fp8"])
    parser.add_argument("--routing", default="random", choices=["random", "skewed"])
    parser.add_argument("--shape", type=int, nargs=5, default=[4096, 1536, 16, 8, 512],
                        metavar=("H", "I", "E", "K", "T"))  # fmt: skip
    parser.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                        help="a PersistentConfig field of the persistent layer")  # fmt: skip
    parser.add_argument("--ncu", default=os.environ.get("NCU", "ncu"), help="the Nsight Compute command line")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--labels", help=argparse.SUPPRESS)  # set in the profiled process: where its rows go
    args = parser.parse_args(argv)
    if args.labels:
        return _workload(args)
    from .benchmark import _knobs

    _knobs(args.knob)  # a malformed knob fails here, before ncu starts
    ncu = shutil.which(args.ncu)
    if ncu is None:
        raise SystemExit(f"counters: {args.ncu!r} is not on PATH: install Nsight Compute or pass --ncu PATH")
    listing = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, check=True).stdout
    metrics = known_metrics(listing)
    with tempfile.TemporaryDirectory() as tmp:
        labels, report = Path(tmp) / "labels.json", Path(tmp) / "report.csv"
        inner = [sys.executable, "-m", "tutorials.megamoe.counters", "--labels", str(labels),
                 "--precision", args.precision, "--routing", args.routing, "--shape", *map(str, args.shape),
                 *[f"--knob={knob}" for knob in args.knob]]  # fmt: skip
        command = [ncu, "--profile-from-start", "off", "--clock-control", "none", "--csv", "--page", "raw",
                   "--metrics", ",".join(metrics), "--log-file", str(report), *inner]  # fmt: skip
        done = subprocess.run(command)
        if done.returncode != 0:
            raise SystemExit(f"counters: ncu exited {done.returncode} ({' '.join(command)})")
        rows = parse_report(report.read_text(), json.loads(labels.read_text()))
    summary = {label: summarize(row["kernels"]) for label, row in rows.items()}
    for label, row in summary.items():
        us = row.get("gpu__time_duration.sum", 0.0) / 1e3
        mb = (row.get("dram__bytes_read.sum", 0.0) + row.get("dram__bytes_write.sum", 0.0)) / 1e6
        l2_mb = row.get("lts__t_sectors_srcunit_tex_op_read.sum", 0.0) * 32 / 1e6
        tensor = row.get("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed", float("nan"))
        gops = sum(v for metric, v in row.items() if metric.startswith(OPS_PREFIXES)) / 1e9
        mhz = row.get("sm__cycles_elapsed.avg.per_second", 0.0) / 1e6
        hit = row.get("lts__t_sector_hit_rate.pct", float("nan"))
        print(f"  {label:20s} {us:8.1f} us  {mhz:5.0f} MHz  HBM {mb:7.1f} MB  L2->SM {l2_mb:7.1f} MB  hit {hit:5.1f} %"
              f"  tensor pipe {tensor:5.1f} %  tensor ops {gops:7.1f} G")  # fmt: skip
        stalls = sorted(((v, m[len(STALL_PREFIX) : -len(STALL_SUFFIX) - 4]) for m, v in row.items()
                         if m.startswith(STALL_PREFIX)), reverse=True)[:5]  # fmt: skip
        print("      stalled: " + ", ".join(f"{name} {v:.0f} %" for v, name in stalls))
    if args.json:
        from ..common.run_metadata import run_metadata

        args.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {**run_metadata(), "precision": args.precision, "routing": args.routing, "shape": args.shape,
                "knobs": args.knob, "metrics": metrics}  # fmt: skip
        args.json.write_text(json.dumps({**meta, "rows": summary, "kernels": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
