#!/usr/bin/env bash
# Tutorial 2 (AllGather-GEMM) on a GPU box, from the repository root, bounded to ~480 s in total:
#   1. world 1 correctness: the five shapes, bf16 and fp16
#   2. world 1 benchmark at 4096x8192x8192 bf16: every candidate config vs torch.matmul, same run
#   3. world 2 and 4 correctness in shared-GPU mode (all ranks on GPU 0, MPS on), the five shapes
# Every step runs under `timeout`; a PASS/FAIL table comes last; JSON and logs go to $OUT (else
# bench/results). Needs .debs/ (clang) carried along: see scripts/gpu/setup.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/setup.sh
set +e
T2=tutorials/02-allgather-gemm
OUTDIR=${OUT:-bench/results}
mkdir -p "$OUTDIR"
STAMP=$(date -u +%Y%m%dT%H%M%S)
DEADLINE=$((SECONDS + ${T2_BUDGET_S:-480}))
NAMES=() STATUS=() TIMES=()

# step NAME CAP_S OK_CODES COMMAND...: run with min(CAP_S, time left) as the limit; log to $OUTDIR.
step() {
  local name=$1 cap=$2 ok_codes=$3; shift 3
  local left=$((DEADLINE - SECONDS)) limit rc t0=$SECONDS log="$OUTDIR/tutorial2_${name}_${STAMP}.log"
  limit=$(( cap < left ? cap : left ))
  if (( limit < 15 )); then NAMES+=("$name") STATUS+=("SKIP (no time left)") TIMES+=(0); return; fi
  echo "=== $name (limit ${limit}s): $*"
  timeout -k 10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  tail -n 25 "$log"
  local status
  case " $ok_codes " in
    *" $rc "*) status=PASS ;;
    *) if (( rc == 124 || rc == 137 )); then status="TIMEOUT (${limit}s)"; elif (( rc == 2 )) && [[ $name == bench* ]]; then
         status="NOT MET (goal)"; else status="FAIL (rc=$rc)"; fi ;;
  esac
  NAMES+=("$name") STATUS+=("$status") TIMES+=($((SECONDS - t0)))
}

step w1_correct 110 0 python3 $T2/ag_gemm.py --json "$OUTDIR/tutorial2_w1_correct_${STAMP}.json"
step bench_w1 110 0 python3 $T2/benchmark.py --configs all --out "$OUTDIR"
start_mps
trap stop_mps EXIT
export TRITON_RAW_SHARED_GPU=1 NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo
export NVSHMEM_SYMMETRIC_SIZE=${NVSHMEM_SYMMETRIC_SIZE:-3G}  # 2*world*m*k*2 bytes: 1.9 GB at world 4, k=28672
step w2_shared 150 0 python3 -m torch.distributed.run --standalone --nproc_per_node=2 $T2/ag_gemm.py \
  --json "$OUTDIR/tutorial2_w2_correct_${STAMP}.json"
step w4_shared 180 0 python3 -m torch.distributed.run --standalone --nproc_per_node=4 $T2/ag_gemm.py \
  --json "$OUTDIR/tutorial2_w4_correct_${STAMP}.json"
unset TRITON_RAW_SHARED_GPU
stop_mps

echo
echo "Tutorial 2 suite ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)), ${SECONDS}s:"
printf '%-12s %-22s %6s\n' step result seconds
summary=""
for i in "${!NAMES[@]}"; do
  printf '%-12s %-22s %6s\n' "${NAMES[$i]}" "${STATUS[$i]}" "${TIMES[$i]}"
  summary+="{\"step\": \"${NAMES[$i]}\", \"result\": \"${STATUS[$i]}\", \"seconds\": ${TIMES[$i]}},"
done
python3 - "$OUTDIR/tutorial2_suite_${STAMP}.json" "[${summary%,}]" "$0 $*" <<'PY'
import datetime, json, sys
sys.path.insert(0, "scripts/gpu")
import machine
doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "gpu": "\n".join(machine.gpus()),
       "command": sys.argv[3], "versions": machine.versions(), "steps": json.loads(sys.argv[2])}
open(sys.argv[1], "w").write(json.dumps(doc, indent=1))
print("wrote", sys.argv[1])
PY
for s in "${STATUS[@]}"; do [[ $s == PASS ]] || exit 1; done
