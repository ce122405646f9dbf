# Source this on the GPU machine (repo root): installs the plugin into /tmp/site, provides clang
# from the Debian packages carried in .debs/ (the machine has no clang and no registry access),
# sets the NVLink-multicast-off variables, and collects results under $RESULTS.
set -euo pipefail
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
export PYTHONFAULTHANDLER=1  # a Python process sent SIGABRT prints every thread's stack (timeout_with_stacks)
if ! command -v clang-22 >/dev/null && [ -d .debs ]; then
  root=/tmp/clang-root
  debs=$(ls .debs/*.deb | sha1sum)  # clang-22, libclang-cpp22, libllvm22, libclang-common-22-dev, libz3-4
  if [ "$(cat "$root/.debs" 2>/dev/null)" != "$debs" ]; then
    for deb in .debs/*.deb; do dpkg -x "$deb" "$root"; done
    echo "$debs" >"$root/.debs"
  fi
  cat > "$root/clang" <<WRAP
#!/bin/sh
LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu:$root/usr/lib/llvm-22/lib exec $root/usr/lib/llvm-22/bin/clang "\$@"
WRAP
  chmod +x "$root/clang"
  export TRITON_RAW_CLANG="$root/clang"
fi
# (Re)install when the plugin's sources differ from what /tmp/site holds: a warm machine keeps /tmp.
stamp=$(find triton_raw_ext runtime passes pyproject.toml -type f \( -name '*.py' -o -name '*.cu' -o -name '*.cuh' -o -name '*.h' \
          -o -name '*.cpp' -o -name '*.toml' -o -name '*.txt' \) -not -path '*/__pycache__/*' | sort | xargs cat | sha1sum)
if [ ! -d /tmp/site/triton_raw_ext ] || [ "$(cat /tmp/site/.trx_sources 2>/dev/null)" != "$stamp" ]; then
  rm -rf /tmp/site
  python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/site . >/tmp/pip.log 2>&1 \
    || { cat /tmp/pip.log; exit 1; }
  echo "$stamp" >/tmp/site/.trx_sources
fi
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
export RESULTS=${RESULTS:-/tmp/results}
mkdir -p "$RESULTS"
start_mps() { nvidia-cuda-mps-control -d 2>/dev/null || true; }
stop_mps() { echo quit | nvidia-cuda-mps-control 2>/dev/null || true; }
source "$(dirname "${BASH_SOURCE[0]}")/stacks.sh"  # timeout_with_stacks
