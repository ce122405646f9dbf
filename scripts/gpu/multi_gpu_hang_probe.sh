#!/usr/bin/env bash
# The 2-GPU hang (one NVSHMEM PE per GPU: Tutorials 1 and 3 hang now and then, Tutorial 2, whose
# kernels hold no NVSHMEM device code, never does; every PE on one GPU never does) in one bounded
# call: small experiments at world 2, each under timeout_with_stacks (scripts/gpu/stacks.sh), each
# recorded as PASS, FAIL or HANG with its seconds.
#
#   warm_*           compile first, without NVSHMEM (ping-pong kernels; T1 at H=2048 and T3's small cases,
#                    both at world 2), so the timed steps below do not include compiles
#   alloc_skew       scripts/gpu/alloc_skew_worker.py: 200 runtime.zeros() with the last PE's stream held
#                    back, so the other PE starts each nvshmem_malloc while its stream barrier still waits
#                    (the cause of the hangs below: two barriers of one team overlapping on a PE); must pass
#   alloc_skew_raw_control
#                    the same calling nvshmem_malloc directly, without runtime.empty's wait for the GPU:
#                    expected to hang (shows the hazard the wait removes); not counted in the exit status
#   pp_g1            raw NVSHMEM ping-pong (scripts/gpu/hang_probe_worker.py, Tutorial 1's own raw
#                    functions put_row, complete_puts, signal_set = a non-blocking put, nvshmem_quiet,
#                    nvshmemx_signal_op; wait_ge = nvshmem_signal_wait_until; session 4's runs used the
#                    older push_row = nvshmemx_putmem_signal_block): 2000 back-to-back launches of one
#                    program, each putting a row with signal to the peer and waiting for the peer's
#                    signal (monotonic values)
#   pp_gsms          the same with one program per SM (132 on the H200)
#   pp_gsms_barrier  the same with runtime.barrier_all() (nvshmemx_barrier_all_on_stream) between launches
#   t1, t1_novmm, t1_blocking
#                    allreduce.py --dtypes bf16 --hidden 2048 --tokens 1 16 128 1024 4096: plain, with
#                    NVSHMEM_DISABLE_CUDA_VMM=1, with CUDA_LAUNCH_BLOCKING=1
#   t3, t3_novmm, t3_blocking
#                    megamoe.py --cases small --routing random, the same three ways
#   pp_*_sync1, pp_*_test, pp_*_novmm, pp_*_blocking
#                    only when a ping-pong step hung, and time is left: the first hung configuration
#                    with a host sync after every launch, with the test kernels' raw functions (every
#                    thread waits), with NVSHMEM_DISABLE_CUDA_VMM=1, with CUDA_LAUNCH_BLOCKING=1
# A ping-pong that stops progressing prints, per PE, where its programs wait and what their signal
# words hold (PROBE_HANG lines, also copied into the JSON), then ends itself (HANG(stall)).
#
# Usage (repository root or anywhere; a host with >= 2 GPUs; .debs/ carried when it has no clang):
#   run(kind="nvidia-h200-x2", carry=[".debs"], command="R=$OUT; OUT=/tmp/hp bash scripts/gpu/multi_gpu_hang_probe.sh; tar czf $R/hp.tgz -C /tmp hp")
# Environment:
#   OUT             results folder (default bench/results/hang_probe_<UTC stamp>)
#   PROBE_BUDGET_S  wall-clock budget including setup, default 510 s: every step runs under
#                   min(its cap, time left - 10 s); a step with < 25 s left is SKIPPED(budget)
#   MAX_STEP_S      if set, no step runs longer
#   PROBE_STEPS     if set, only the steps named in it (space-separated)
#   PP_ITERS        ping-pong launches, default 2000
# Results: <step>.log per step (a step stopped at its limit ends with py-spy's native stacks and every
# worker's Python stacks), steps.tsv, and hang_probe.json (date, GPUs, versions, command, every step's
# result, seconds, env and command, the ping-pong PROBE_RESULT / PROBE_HANG records); a table last.
# Exit status 0 when every step that ran passed (a *_control step may hang), 1 otherwise; 0 with every step SKIPPED on a host with
# fewer than 2 GPUs.
set -uo pipefail
cd "$(dirname "$0")/../.."
START=$SECONDS
BUDGET=${PROBE_BUDGET_S:-510}
source scripts/gpu/results.sh
RES=$(results_dir hang_probe)
STEPS=$RES/steps.tsv
: >"$STEPS"
COMMAND="bash scripts/gpu/multi_gpu_hang_probe.sh"
T1=tutorials/01-allreduce-rmsnorm
T3=tutorials/03-megamoe
PP=scripts/gpu/hang_probe_worker.py
PP_ITERS=${PP_ITERS:-2000}
TR=(python3 -m torch.distributed.run --standalone --nproc_per_node=2)
ALL_STEPS="warm_pp warm_t1 warm_t3 alloc_skew alloc_skew_raw_control pp_g1 pp_gsms pp_gsms_barrier t1 t1_novmm t1_blocking t3 t3_novmm t3_blocking"

summarise() {  # write hang_probe.json from steps.tsv and the logs, print the table
  python3 - "$RES" "$STEPS" "$((SECONDS - START))" "$BUDGET" "$COMMAND" "${1:-}" <<'PY'
import datetime, json, os, pathlib, sys

res, steps_path, total, budget, command, skipped = sys.argv[1:7]
res = pathlib.Path(res)
steps = []
for line in open(steps_path):
    name, result, seconds, env, log, cmd = line.rstrip("\n").split("\t")
    step = {"step": name, "result": result, "seconds": int(seconds), "env": env, "command": cmd, "log": log}
    if log and (res / log).is_file():
        for text in (res / log).read_text(errors="replace").splitlines():
            for tag, key in (("PROBE_RESULT {", "ranks"), ("PROBE_HANG {", "hang")):
                at = text.find(tag)  # a launcher may prefix the workers' lines
                if at >= 0:
                    try:
                        step.setdefault(key, []).append(json.loads(text[at + len(tag) - 1 :]))
                    except ValueError:
                        pass
    steps.append(step)
sys.path.insert(0, "scripts/gpu")
import machine
smi, versions = machine.gpus(), machine.versions()
env_keys = ("NVSHMEM_DISABLE_NVLS", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
            "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "NVSHMEM_SYMMETRIC_SIZE", "TRITON_RAW_SHARED_GPU",
            "CUDA_MODULE_LOADING", "CUDA_LAUNCH_BLOCKING", "NVSHMEM_DISABLE_CUDA_VMM", "PP_ITERS", "MAX_STEP_S")
doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "gpus": smi,
       "versions": versions, "command": command, "budget_s": int(budget), "total_s": int(total),
       "skipped": skipped or None, "env": {k: os.environ.get(k, "") for k in env_keys}, "steps": steps}
(res / "hang_probe.json").write_text(json.dumps(doc, indent=1))
print(f"\nmulti-GPU hang probe ({len(smi)} x {smi[0] if smi else '?'}), {total}s of {budget}s"
      + (f": {skipped}" if skipped else ""))
print(f"{'step':<25} {'result':<16} {'s':>4}  env")
for s in steps:
    print(f"{s['step']:<25} {s['result']:<16} {s['seconds']:>4}  {s['env']}")
    for h in s.get("hang", []):
        print(f"{'':<25} rank {h.get('rank')}: {h.get('reading')} (entered {h.get('entered')}, wait returned "
              f"{h.get('wait_returned')}, signal {h.get('signal')}, host queued {h.get('host_enqueued')})")
    for r in s.get("ranks", []):
        if not r.get("ok") or r.get("rank") == 0:
            print(f"{'':<25} rank {r.get('rank')}: {'ok' if r.get('ok') else 'WRONG DATA'}, "
                  f"{r.get('us_per_iter')} us/iter, preloaded kernel used: {r.get('preloaded_kernel_used')}"
                  + (f"; {r['errors'][0]}" if r.get("errors") else ""))
print(f"results in {res}")
PY
}

# one PE per GPU, NVLink multicast off (KINDS.md), as multi_gpu_suite.sh; the variants set the rest per step
unset TRITON_RAW_SHARED_GPU CUDA_MPS_PIPE_DIRECTORY CUDA_LAUNCH_BLOCKING NVSHMEM_DISABLE_CUDA_VMM
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=${NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME:-lo}  # one host
export NVSHMEM_SYMMETRIC_SIZE=${NVSHMEM_SYMMETRIC_SIZE:-6G}  # as multi_gpu_suite.sh, whose runs hung
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

GPUS=$(nvidia-smi --list-gpus 2>/dev/null | wc -l)
if (( GPUS < 2 )); then
  why="skipped: the probe needs 2 GPUs (one PE per GPU), nvidia-smi lists $GPUS"
  echo "multi_gpu_hang_probe: $why; run it on kind nvidia-h200-x2" >&2
  for name in $ALL_STEPS; do printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "SKIP(<2 GPUs)" 0 "" "" "" >>"$STEPS"; done
  summarise "$why"
  exit 0
fi

export RESULTS=$RES
source scripts/gpu/setup.sh  # NVLink multicast off, plugin on PYTHONPATH, clang from .debs/, timeout_with_stacks
set +e
echo "setup done after $((SECONDS - START))s; $GPUS GPUs"

wanted() { [[ -z ${PROBE_STEPS:-} || " $PROBE_STEPS " == *" $1 "* ]]; }

# step NAME CAP_S ENV CMD...: run `env ENV CMD...` (ENV: "-" for none, else space-separated VAR=value)
# under timeout_with_stacks, log to $RES/NAME.log, append a row to $STEPS. rc 0 is PASS; the step's
# limit, or a worker that declared a stall (PROBE_HANG), is HANG; anything else FAIL.
step() {
  local name=$1 cap=$2 envs=$3; shift 3
  local left=$(( BUDGET - (SECONDS - START) )) limit result rc t0=$SECONDS
  local -a prefix=()
  if [[ $envs == - ]]; then envs=""; else read -r -a prefix <<<"env $envs"; fi
  wanted "$name" || return 0
  if (( left < 25 )); then
    echo "=== $name: skipped, ${left}s of the budget left"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "SKIP(budget)" 0 "$envs" "" "$*" >>"$STEPS"
    return 0
  fi
  limit=$(( cap < left - 10 ? cap : left - 10 ))
  limit=$(( limit < ${MAX_STEP_S:-limit} ? limit : ${MAX_STEP_S:-limit} ))
  echo "=== $name (limit ${limit}s, $((SECONDS - START))s in): ${envs:+$envs }$*"
  {  # processes left on the GPUs by an earlier step would show here
    echo "=== GPU processes before the step:"
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>&1 | head -n 8
    echo "=== ${envs:+$envs }$*"
  } >"$RES/$name.log"
  timeout_with_stacks "$limit" "${prefix[@]}" "$@" >>"$RES/$name.log" 2>&1
  rc=$?
  tail -n 12 "$RES/$name.log"
  if (( rc == 0 )); then result=PASS
  elif grep -q 'PROBE_HANG {' "$RES/$name.log"; then result="HANG(stall)"
  elif (( rc == 124 || rc == 137 )); then result="HANG(${limit}s)"
  else result="FAIL(rc=$rc)"; fi
  echo "=== $name: $result after $((SECONDS - t0))s"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$result" $(( SECONDS - t0 )) "$envs" "$name.log" "$*" >>"$STEPS"
}
result_of() { awk -F'\t' -v n="$1" '$1 == n { print $2 }' "$STEPS"; }

PP_ARGS=(--iters "$PP_ITERS" --report-s 3 --stall-s 10)
step warm_pp 90 - python3 $PP --compile-only --grids 1 sms
step warm_t1 90 - python3 $T1/aot.py --warm 2048 --worlds 2 --jobs 16
step warm_t3 90 - python3 $PP --warm-t3 --t3-world 2 --t3-cases small
AS=scripts/gpu/alloc_skew_worker.py
step alloc_skew 40 - "${TR[@]}" $AS --rounds 200
step alloc_skew_raw_control 30 - "${TR[@]}" $AS --rounds 200 --raw-malloc
step pp_g1 50 - "${TR[@]}" $PP "${PP_ARGS[@]}" --grid 1
step pp_gsms 50 - "${TR[@]}" $PP "${PP_ARGS[@]}" --grid sms
step pp_gsms_barrier 50 - "${TR[@]}" $PP "${PP_ARGS[@]}" --grid sms --barrier
T1_ARGS=(--dtypes bf16 --hidden 2048 --tokens 1 16 128 1024 4096)  # one-shot and two-shot
step t1 45 - "${TR[@]}" $T1/allreduce.py "${T1_ARGS[@]}" --json "$RES/t1.json"
step t1_novmm 45 NVSHMEM_DISABLE_CUDA_VMM=1 "${TR[@]}" $T1/allreduce.py "${T1_ARGS[@]}" --json "$RES/t1_novmm.json"
step t1_blocking 45 CUDA_LAUNCH_BLOCKING=1 "${TR[@]}" $T1/allreduce.py "${T1_ARGS[@]}" --json "$RES/t1_blocking.json"
T3_ARGS=(--cases small --routing random)
step t3 60 - "${TR[@]}" $T3/megamoe.py "${T3_ARGS[@]}" --json "$RES/t3.json"
step t3_novmm 60 NVSHMEM_DISABLE_CUDA_VMM=1 "${TR[@]}" $T3/megamoe.py "${T3_ARGS[@]}" --json "$RES/t3_novmm.json"
step t3_blocking 60 CUDA_LAUNCH_BLOCKING=1 "${TR[@]}" $T3/megamoe.py "${T3_ARGS[@]}" --json "$RES/t3_blocking.json"

# Follow-ups on the first ping-pong configuration that hung: which change makes it pass.
for hung in pp_g1 pp_gsms pp_gsms_barrier; do
  [[ $(result_of $hung) == HANG* ]] || continue
  case $hung in
    pp_g1) cfg=(--grid 1) ;;
    pp_gsms) cfg=(--grid sms) ;;
    *) cfg=(--grid sms --barrier) ;;
  esac
  step "${hung}_sync1" 50 - "${TR[@]}" $PP "${PP_ARGS[@]}" "${cfg[@]}" --sync-every 1
  step "${hung}_test" 50 - "${TR[@]}" $PP "${PP_ARGS[@]}" "${cfg[@]}" --variant test
  step "${hung}_novmm" 50 NVSHMEM_DISABLE_CUDA_VMM=1 "${TR[@]}" $PP "${PP_ARGS[@]}" "${cfg[@]}"
  step "${hung}_blocking" 50 CUDA_LAUNCH_BLOCKING=1 "${TR[@]}" $PP "${PP_ARGS[@]}" "${cfg[@]}"
  break
done

summarise
status=0
while IFS=$'\t' read -r name result _; do
  [[ $result == PASS || $name == *_control ]] || status=1
done <"$STEPS"
exit $status
