#!/usr/bin/env bash
# triton_raw_ext.nvshmem on one GPU: every call family at 2 and 4 PEs sharing it (MPS on), in one
# bounded call (SUITE_BUDGET_S, default 560 s, setup included). Run from anywhere in the checkout:
#   bash scripts/gpu/nvshmem_library_suite.sh [--worlds 2 4] [--families ...]
# Results: $OUT, else bench/results/<UTC stamp>-nvshmem-library/nvshmem_library_suite.json.
# Without a GPU it writes the skip into that JSON and exits 0.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/setup.sh
timeout -k 10 $(( ${SUITE_BUDGET_S:-560} - SECONDS )) python3 scripts/gpu/nvshmem_library_suite.py "$@"
