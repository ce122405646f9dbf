#!/usr/bin/env bash
# Tutorial 3 (MegaMoE) GPU suite, one H200, under 7 minutes: correctness at world 1 (small shapes,
# the production per-rank load E=16 and all 128 experts local; random and skewed routing, two calls
# per layer), L1 and L2 as one persistent launch (MegaMoE(gemm_programs=SMs): small + production,
# three poisoned calls per layer), the benchmark at world 1 (layer eager + CUDA graph, grouped GEMMs
# alone, the persistent launch beside them, torch reference, roofline), the same at world 1 with FP8 expert GEMMs (small + E=16 cases, benchmark),
# then world 2 and 4 in shared-GPU mode with MPS at small shapes and the production shape (E=128, 512
# tokens per rank; world 2 also in FP8, small shapes). Every step has a timeout; a
# PASS/FAIL table comes last; JSON and logs land in $OUT (else bench/results/).
export RESULTS=${OUT:-$PWD/bench/results}
source scripts/gpu/setup.sh
set +e
T3=tutorials/03-megamoe
declare -a NAMES STATUS
step() {  # step NAME SECONDS CMD... : run with a hard timeout, log to $RESULTS/t3_NAME.log
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$RESULTS/t3_$name.log" 2>&1
  local rc=$?
  tail -n 25 "$RESULTS/t3_$name.log"
  local verdict=PASS
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then verdict="TIMEOUT(${limit}s)"; elif [ $rc -ne 0 ]; then verdict="FAIL(rc=$rc)"; fi
  NAMES+=("$name") STATUS+=("$verdict $((SECONDS - start))s")
}
step w1_small 75 python3 $T3/megamoe.py --cases small --json "$RESULTS/t3_w1_small.json"
step w1_production 80 python3 $T3/megamoe.py --cases equiv prod --json "$RESULTS/t3_w1_production.json"
step w1_persistent_gemms 80 python3 $T3/megamoe.py --persistent-gemms --cases small prod --routing skewed random \
  --iters 3 --json "$RESULTS/t3_w1_persistent_gemms.json"
step benchmark_w1 55 python3 $T3/benchmark.py --out "$RESULTS"
step w1_fp8 75 python3 $T3/megamoe.py --precision fp8 --cases small equiv --json "$RESULTS/t3_w1_fp8.json"
step benchmark_w1_fp8 50 python3 $T3/benchmark.py --precision fp8 --out "$RESULTS"
start_mps
trap stop_mps EXIT
step w2_shared_gpu_mps 110 env TRITON_RAW_SHARED_GPU=1 NVSHMEM_SYMMETRIC_SIZE=2G python3 -m torch.distributed.run \
  --nproc_per_node=2 --master_port=29517 $T3/megamoe.py --cases small prod --json "$RESULTS/t3_w2_small_prod.json"
step w4_shared_gpu_mps 140 env TRITON_RAW_SHARED_GPU=1 NVSHMEM_SYMMETRIC_SIZE=2G python3 -m torch.distributed.run \
  --nproc_per_node=4 --master_port=29518 $T3/megamoe.py --cases small prod --json "$RESULTS/t3_w4_small_prod.json"
step w2_fp8_shared_gpu_mps 75 env TRITON_RAW_SHARED_GPU=1 python3 -m torch.distributed.run --nproc_per_node=2 \
  --master_port=29519 $T3/megamoe.py --precision fp8 --cases small --json "$RESULTS/t3_w2_fp8_small.json"
stop_mps
trap - EXIT
echo "== Tutorial 3 (MegaMoE) suite =="
ok=1
for i in "${!NAMES[@]}"; do
  printf '%-20s %s\n' "${NAMES[$i]}" "${STATUS[$i]}"
  case "${STATUS[$i]}" in PASS*) ;; *) ok=0 ;; esac
done
python3 - "$RESULTS" "${NAMES[@]}" -- "${STATUS[@]}" <<'PY'
import datetime, json, subprocess, sys
out, rest = sys.argv[1], sys.argv[2:]
cut = rest.index("--")
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
json.dump({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "gpu": gpu,
           "command": "scripts/gpu/tutorial3_suite.sh", "steps": dict(zip(rest[:cut], rest[cut + 1:]))},
          open(f"{out}/t3_suite.json", "w"), indent=1)
PY
[ $ok -eq 1 ] && echo "tutorial 3: PASS" || echo "tutorial 3: FAIL"
[ $ok -eq 1 ]
