#!/usr/bin/env bash
# Compiler-core GPU suite (one H200): GPU tests, elementwise bandwidth vs pure Triton, NVSHMEM ring
# at world 1, 2 and 4 PEs on the one GPU (MPS on). Results (JSON) land in $RESULTS.
source scripts/gpu/setup.sh
set +e  # run every part; each reports PASS/FAIL itself
triton-raw doctor || true
python3 -m pytest -q -p no:cacheprovider test/test_gpu_core.py 2>&1 | tee "$RESULTS/core_pytest.log"
python3 bench/elementwise_bandwidth.py --out "$RESULTS"
start_mps
trap stop_mps EXIT
timeout 400 python3 scripts/gpu/nvshmem_ring.py --world 1 2 4 --steps 20 --out "$RESULTS"
