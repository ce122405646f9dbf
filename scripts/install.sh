#!/usr/bin/env bash
# Installs what triton-raw-ext needs on a fresh machine, skipping what is already there:
#   clang >= 20 (apt: clang-22), the plugin with its test and NVSHMEM extras (pip, editable),
#   torch (pip, only if missing: TORCH_SPEC, default torch==2.13.0).
# NVSHMEM is pinned to 3.4.5 (NVSHMEM_SPEC) to match the GPU machine's wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

have_clang() {
  for c in "${TRITON_RAW_CLANG:-}" clang-22 clang-21 clang-20 clang; do
    [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 || continue
    major=$("$c" --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
    [ "${major:-0}" -ge 20 ] && return 0
  done
  return 1
}
if ! have_clang; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "install: clang >= 20 not found; installing clang-22 with apt-get"
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q clang-22 >/dev/null
fi

if ! $PY -c "import torch" >/dev/null 2>&1; then
  echo "install: torch not found; installing ${TORCH_SPEC:=torch==2.13.0}"
  $PY -m pip install -q "$TORCH_SPEC"
fi
$PY -m pip install -q -e ".[test]" "${NVSHMEM_SPEC:-nvidia-nvshmem-cu13==3.4.5}"
triton-raw doctor >/dev/null || triton-raw doctor
