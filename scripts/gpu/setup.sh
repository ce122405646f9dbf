# Source this on the GPU machine (repo root): installs the plugin into /tmp/site, provides clang
# from the Debian packages carried in .debs/ (the machine has no clang and no registry access),
# sets the NVLink-multicast-off variables, and collects results under $RESULTS.
set -euo pipefail
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
export PYTHONFAULTHANDLER=1  # a Python process sent SIGABRT prints every thread's stack (timeout_with_stacks)
if ! command -v clang-22 >/dev/null && [ -d .debs ]; then
  root=/tmp/clang-root
  if [ ! -x "$root/usr/lib/llvm-22/bin/clang" ]; then
    for deb in .debs/*.deb; do dpkg -x "$deb" "$root"; done
  fi
  cat > "$root/clang" <<WRAP
#!/bin/sh
LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu:$root/usr/lib/llvm-22/lib exec $root/usr/lib/llvm-22/bin/clang "\$@"
WRAP
  chmod +x "$root/clang"
  export TRITON_RAW_CLANG="$root/clang"
fi
if [ ! -d /tmp/site/triton_raw_ext ]; then
  python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/site . >/tmp/pip.log 2>&1 \
    || { cat /tmp/pip.log; exit 1; }
fi
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
export RESULTS=${RESULTS:-/tmp/results}
mkdir -p "$RESULTS"
start_mps() { nvidia-cuda-mps-control -d 2>/dev/null || true; }
stop_mps() { echo quit | nvidia-cuda-mps-control 2>/dev/null || true; }

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
