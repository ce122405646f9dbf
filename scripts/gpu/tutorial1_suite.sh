#!/usr/bin/env bash
# Tutorial 1 GPU suite (one H200): correctness at world 1, 2 and 4, CUDA-graph capture, benchmark.
#
# Usage (repository root): bash scripts/gpu/tutorial1_suite.sh
# Bounded: every step runs under `timeout` and the whole suite under SUITE_BUDGET_S (default 345 s);
# a step that would start with less than 20 s left is skipped and counted as FAIL. Two files go to $OUT
# (else bench/results/t1_<date>/): suite_t1.json (date, GPU, versions, command, every step's result and
# numbers) and suite_t1.log (every step's output); a PASS/FAIL table is printed last.
# Carry .debs/ when the machine has no clang (scripts/gpu/setup.sh unpacks it).
set -u
cd "$(dirname "$0")/../.."
export NVSHMEM_SYMMETRIC_SIZE="${NVSHMEM_SYMMETRIC_SIZE:-4G}"
T1=tutorials/01-allreduce-rmsnorm
source scripts/gpu/results.sh
RES=$(results_dir t1)
export RESULTS=$RES
source scripts/gpu/setup.sh  # NVLink multicast off, the plugin on PYTHONPATH, clang from .debs/ when missing
set +e
WORK=$(mktemp -d /tmp/t1_suite.XXXXXX)  # per-step logs and JSON, merged into $RES at the end
BUDGET="${SUITE_BUDGET_S:-345}"
START=$(date +%s)
NAMES=(); OUTCOMES=(); SECS=()

run_step() {  # run_step NAME LIMIT_S CMD...: run under timeout, log to $WORK/NAME.log, record the result
    local name=$1 limit=$2; shift 2
    local left=$(( BUDGET - ($(date +%s) - START) ))
    if (( left < 20 )); then
        NAMES+=("$name"); OUTCOMES+=("SKIP(budget)"); SECS+=(0); echo "== $name: skipped, ${left}s left"; return
    fi
    (( limit > left - 5 )) && limit=$(( left - 5 ))
    echo "== $name (limit ${limit}s): $*"
    local t0=$(date +%s)
    timeout -k 5 "$limit" "$@" >"$WORK/$name.log" 2>&1
    local rc=$?
    local dt=$(( $(date +%s) - t0 ))
    tail -n 12 "$WORK/$name.log"
    NAMES+=("$name"); SECS+=("$dt")
    if (( rc == 0 )); then OUTCOMES+=("PASS"); elif (( rc == 124 || rc == 137 )); then OUTCOMES+=("FAIL(timeout)");
    else OUTCOMES+=("FAIL(rc=$rc)"); fi
}

MPS_ON=0
stop_mps() { if (( MPS_ON )); then echo quit | nvidia-cuda-mps-control >/dev/null 2>&1; MPS_ON=0; fi; }
trap stop_mps EXIT

run_step toolchain 60 python3 -c "
import torch, triton
from triton_raw_ext.toolchain import find_clang
print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, find_clang().identity)"

# 1. compile every kernel variant the suite launches, in parallel, into Triton's cache
run_step compile 120 python3 "$T1/aot.py" --warm 2048 4096 7168 8192 --worlds 1 2 4 --jobs 12

# 2. world 1: the whole shape table, both dtypes; graph capture at three sizes
run_step correct_w1 90 python3 "$T1/allreduce.py" --graph-tokens 1 128 4096 --json "$WORK/correct_w1.json"

# 3. benchmark at world 1 on the goal shapes, against torch.compile, in the same process
run_step bench_w1 110 python3 "$T1/benchmark.py" --shapes 4096x8192 128x8192 64x8192 16x8192 1x8192 \
    --json "$WORK/bench_w1.json"

# 4. several PEs on the one GPU (shared-GPU mode, MPS so that spinning kernels run concurrently)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/t1_mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/t1_mps_log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
if nvidia-cuda-mps-control -d; then MPS_ON=1; fi
export TRITON_RAW_SHARED_GPU=1 TORCH_NCCL_ASYNC_ERROR_HANDLING=1
TR="torchrun --standalone"
run_step correct_w2 75 $TR --nproc_per_node=2 "$T1/allreduce.py" --graph-tokens 16 4096 \
    --json "$WORK/correct_w2.json"
run_step correct_w2_twoshot 45 $TR --nproc_per_node=2 "$T1/allreduce.py" --algorithm twoshot \
    --tokens 1 64 1024 4096 --hidden 2048 7168 --graph-tokens 1024 --json "$WORK/correct_w2_twoshot.json"
run_step correct_w2_twoshot_puts 45 $TR --nproc_per_node=2 "$T1/allreduce.py" --algorithm twoshot --push puts \
    --tokens 1 64 1024 4096 --hidden 2048 7168 --graph-tokens 1024 --json "$WORK/correct_w2_twoshot_puts.json"
run_step correct_w4 90 $TR --nproc_per_node=4 "$T1/allreduce.py" --graph-tokens 16 4096 \
    --json "$WORK/correct_w4.json"
stop_mps

# summary
TOTAL=$(( $(date +%s) - START ))
for n in "${NAMES[@]}"; do echo "===== $n"; cat "$WORK/$n.log" 2>/dev/null; done >"$RES/suite_t1.log"
python3 - "$RES/suite_t1.json" "$WORK" "$TOTAL" "$*" "${NAMES[@]/#/n:}" "${OUTCOMES[@]/#/r:}" "${SECS[@]/#/s:}" <<'PY'
import datetime, json, sys
import pathlib
path, work, total, args = sys.argv[1], pathlib.Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
names = [a[2:] for a in sys.argv[5:] if a.startswith("n:")]
res = [a[2:] for a in sys.argv[5:] if a.startswith("r:")]
secs = [int(a[2:]) for a in sys.argv[5:] if a.startswith("s:")]
details = {p.stem: json.loads(p.read_text()) for p in sorted(work.glob("*.json"))}
sys.path.insert(0, "scripts/gpu")
import machine
versions = {**machine.versions(), "gpu": "\n".join(machine.gpus())}
steps = [{"step": n, "result": r, "seconds": s} for n, r, s in zip(names, res, secs)]
json.dump({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "command": "bash scripts/gpu/tutorial1_suite.sh " + args, "total_s": total, **versions,
           "steps": steps, "details": details}, open(path, "w"), indent=1)
print(f"\n{'step':<22} {'result':<14} {'s':>4}")
for s in steps:
    print(f"{s['step']:<22} {s['result']:<14} {s['seconds']:>4}")
bench = details.get("bench_w1", {}).get("rows", [])
graph = {(r["impl"], r["T"], r["H"]): r for r in bench if r.get("mode") == "graph" and "p50_us" in r}
if graph:
    print(f"\n{'benchmark (graph, p50)':<24} {'fused us':>9} {'compile us':>10} {'fused TB/s':>10}  goal")
for (impl, t, h), r in sorted(graph.items(), key=lambda kv: -kv[0][1]):
    if impl != "fused":
        continue
    base = graph.get(("compile", t, h))
    if t == 4096 and h == 8192:
        verdict = "MET" if r["tbps_p50"] >= 3.6 else "MISSED"
        goal = f">= 3.6 TB/s: {verdict}"
    elif base and t <= 128:
        goal = "<= torch.compile: " + ("MET" if r["p50_us"] <= base["p50_us"] else "MISSED")
    else:
        goal = ""
    base_us = f"{base['p50_us']:10.2f}" if base else f"{'-':>10}"
    print(f"T={t:<5} H={h:<14} {r['p50_us']:9.2f} {base_us} {r['tbps_p50']:10.2f}  {goal}")
print(f"total {total}s; results in {path.rsplit('/', 1)[0]}")
PY
for r in "${OUTCOMES[@]}"; do [[ $r == PASS ]] || exit 1; done
