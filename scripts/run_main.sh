#!/usr/bin/env bash
# The main job (README): install what is missing, then run the tutorials on the GPU(s), or, on a
# machine without a GPU, compile them ahead of time for sm_90 and report. Extra arguments go to
# scripts.main_job (--aot, --gpu, --out DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec "${PYTHON:-python3}" -m scripts.main_job "$@"
