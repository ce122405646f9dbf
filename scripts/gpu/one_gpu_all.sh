#!/usr/bin/env bash
# Every one-GPU suite of the project in one bounded device call (one H200; shared-GPU mode for the
# multi-PE steps): the runtime suite, Tutorial 2's suite, Tutorial 3's suite, then Tutorial 3's GEMM
# tile sweeps (bf16 and fp8). Each part gets min(its cap, time left); a part with < 30 s left is
# SKIPPED. Run from the repository root with .debs/ carried (scripts/gpu/setup.sh):
#   bash scripts/gpu/one_gpu_all.sh
# Through the device tool (at most 8 files come back from $OUT, so pack them):
#   R=$OUT; OUT=/tmp/res bash scripts/gpu/one_gpu_all.sh; tar czf $R/res.tgz -C /tmp res
# Environment: PARTS (the parts to run, default all: runtime tutorial2 tutorial3 tune_bf16 tune_fp8),
# SUITE_BUDGET_S (default 540, including setup), RUNTIME_SUITE_CYCLES (default 5; 20 cycles take
# about 100 s alone),
# OUT (default bench/results/one_gpu_<UTC stamp>). Each part writes its own logs and JSON into a
# subfolder of OUT; one_gpu_all.json lists the parts with their exit status and seconds.
# Exit status 0 when every part ran and passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUDGET=${SUITE_BUDGET_S:-540}
source scripts/gpu/results.sh
RES=$(results_dir one_gpu)
export RESULTS=$RES
source scripts/gpu/setup.sh
set +e
ROWS=()

# part NAME CAP_S CMD...: run CMD with OUT=$RES/NAME under timeout; its output goes to $RES/NAME/stdout.log.
part() {
  local name=$1 cap=$2; shift 2
  local left=$((BUDGET - SECONDS - 10)) limit rc t0=$SECONDS
  [[ " ${PARTS:-runtime tutorial2 tutorial3 tune_bf16 tune_fp8} " == *" $name "* ]] || return 0
  limit=$(( cap < left ? cap : left ))
  mkdir -p "$RES/$name"
  if (( limit < 30 )); then ROWS+=("$name SKIPPED 0"); echo "== $name: SKIPPED (no time left)"; return; fi
  echo "== $name (limit ${limit}s)"
  OUT=$RES/$name timeout -k 10 "$limit" "$@" >"$RES/$name/stdout.log" 2>&1
  rc=$?
  stop_mps >/dev/null 2>&1  # a part killed by its timeout may leave MPS running: the next starts clean
  tail -n 15 "$RES/$name/stdout.log"
  ROWS+=("$name $rc $((SECONDS - t0))")
}

part runtime 140 env RUNTIME_SUITE_CYCLES="${RUNTIME_SUITE_CYCLES:-5}" RUNTIME_SUITE_CORE_TIMEOUT_S=45 \
  python3 scripts/gpu/runtime_suite.py
part tutorial2 170 env T2_BUDGET_S=160 bash scripts/gpu/tutorial2_suite.sh
part tutorial3 280 bash scripts/gpu/tutorial3_suite.sh
part tune_bf16 90 python3 tutorials/03-megamoe/tune_gemms.py
part tune_fp8 80 python3 tutorials/03-megamoe/tune_gemms.py --precision fp8

echo "== one-GPU suites ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)), ${SECONDS}s"
ok=1
for row in "${ROWS[@]}"; do
  read -r name rc secs <<<"$row"
  printf '%-10s %-8s %5ss\n' "$name" "$( [[ $rc == 0 ]] && echo PASS || echo "FAIL($rc)")" "$secs"
  [[ $rc == 0 ]] || ok=0
done
python3 - "$RES/one_gpu_all.json" "$0" "${ROWS[@]}" <<'PY'
import datetime, json, sys
sys.path.insert(0, "scripts/gpu")
import machine
parts = [dict(zip(("part", "exit", "seconds"), row.split())) for row in sys.argv[3:]]
doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
       "gpu": "\n".join(machine.gpus()), "command": sys.argv[2], "versions": machine.versions(), "parts": parts}
open(sys.argv[1], "w").write(json.dumps(doc, indent=1))
print("wrote", sys.argv[1])
PY
(( ok == 1 ))
