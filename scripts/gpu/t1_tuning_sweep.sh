#!/usr/bin/env bash
# Tutorial 1's launch choices side by side at world W (one PE per GPU, NVLink multicast off): the
# benchmark (CUDA graphs) of the default op, of every variant PUSH:N[:WARPS[:ROWS]] in VARIANTS
# (push, programs per SM, warps, row batch: allreduce.parse_tuning) and of NCCL + torch.compile, in one
# run, then each variant's correctness check on a few shapes.
#
# Usage (repository root, >= W GPUs, .debs/ carried when the machine has no clang):
#   VARIANTS="stores:2 stores:4:4:2 puts:2" bash scripts/gpu/t1_tuning_sweep.sh
# Environment: W (default 2), VARIANTS (required), SHAPES (TxH, default T in 1 128 1024 4096 at H 2048
# and 8192), OUT (default bench/results/t1_sweep_<UTC stamp>). Writes sweep.json (the benchmark's
# JSON: date, GPU, versions, command, rows) and one correct_<variant>.json per variant; prints the
# table p50 µs per shape and implementation. Exit status 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/results.sh
RES=$(results_dir t1_sweep)
export RESULTS=$RES
source scripts/gpu/setup.sh
set +e
: "${VARIANTS:?set VARIANTS, e.g. VARIANTS=\"stores:2 puts:2\"}"
W=${W:-2}
SHAPES=${SHAPES:-1x2048 128x2048 1024x2048 4096x2048 1x8192 128x8192 1024x8192 4096x8192}
T1=tutorials/01-allreduce-rmsnorm
TR="python3 -m torch.distributed.run --standalone --nproc_per_node=$W"
unset TRITON_RAW_SHARED_GPU
export NVSHMEM_SYMMETRIC_SIZE=${NVSHMEM_SYMMETRIC_SIZE:-6G} NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo
status=0
timeout_with_stacks 420 $TR $T1/benchmark.py --mode graph --shapes $SHAPES --variants $VARIANTS \
  --json "$RES/sweep.json" >"$RES/sweep.log" 2>&1 || status=1
for v in $VARIANTS; do
  push=${v%%:*}; tuning=${v#"$push"}; tuning=${tuning#:}  # PUSH[:TUNING]
  timeout_with_stacks 90 $TR $T1/allreduce.py --tokens 1 128 1024 4096 --hidden 2048 8192 --dtypes bf16 \
    --graph-tokens 4096 --push "$push" --tuning "$tuning" --json "$RES/correct_${v//:/_}.json" \
    >"$RES/correct_${v//:/_}.log" 2>&1 || status=1
  echo "correct $v: $(grep -h 'correctness world' "$RES/correct_${v//:/_}.log" || echo 'no verdict: see the log')"
done
python3 - "$RES/sweep.json" <<'PY'
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["rows"] if "p50_us" in r]
impls = list(dict.fromkeys(r["impl"] for r in rows))
table = {(r["H"], r["T"], r["impl"]): r["p50_us"] for r in rows}
print(f"{'H':>5} {'T':>5} " + " ".join(f"{i[:18]:>18}" for i in impls))
for h, t in sorted({(r["H"], r["T"]) for r in rows}):
    print(f"{h:5d} {t:5d} " + " ".join(f"{table.get((h, t, i), float('nan')):18.1f}" for i in impls))
PY
echo "results in $RES"
exit $status
