# Sourced by setup.sh: run a command under a time limit and, when it hangs, show where.
# Needs PYTHONFAULTHANDLER=1 in the environment for the Python stacks (setup.sh exports it).
# Native stacks need .debs/py-spy: `pip download py-spy --no-deps`, unzip the wheel, copy its
# py_spy-*.data/scripts/py-spy to .debs/ (gitignored; carried to the GPU machine with .debs).

_leaf_descendants() {  # the processes under $1 that have no children (a torchrun job's workers)
  local kids kid
  kids=$(pgrep -P "$1")
  if [ -z "$kids" ]; then echo "$1"; return; fi
  for kid in $kids; do _leaf_descendants "$kid"; done
}
# timeout_with_stacks LIMIT CMD...: `timeout -k 10 LIMIT CMD...`, except that 5 s before the limit every
# leaf process under CMD (the torchrun workers, or CMD itself) gets SIGABRT, so with PYTHONFAULTHANDLER
# set each prints where all its threads are stuck into CMD's output (preceded by py-spy's native stacks when
# .debs/py-spy is there: the binary from the py-spy wheel). Returns 124 when the limit was hit.
timeout_with_stacks() {
  local limit=$1 waited=0 pid leaf
  shift
  ulimit -c 0
  timeout -k 10 "$limit" "$@" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && (( waited < limit - 5 )); do sleep 1; waited=$((waited + 1)); done
  if ! kill -0 "$pid" 2>/dev/null; then wait "$pid"; return; fi
  echo "=== timeout_with_stacks: still running after ${waited}s; SIGABRT to every leaf process for its stacks"
  for leaf in $(_leaf_descendants "$pid"); do
    if [ -x .debs/py-spy ]; then  # native frames too (CUDA driver, NVSHMEM), when carried in .debs/
      echo "=== py-spy dump --native --pid $leaf"
      timeout 20 .debs/py-spy dump --native --pid "$leaf" 2>&1 | head -n 120
    fi
    kill -ABRT "$leaf" 2>/dev/null
  done
  wait "$pid"
  return 124
}
