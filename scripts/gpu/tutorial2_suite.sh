#!/usr/bin/env bash
# Tutorial 2 (AllGather-GEMM) GPU suite for one H200, under 8 minutes: world 1 correctness (the five
# shapes, bf16 + fp16), world 1 benchmark vs torch.matmul, world 2/4 correctness over the same shapes
# in shared-GPU mode with MPS. Run from the repository root with .debs/ carried; results in $OUT (else bench/results).
exec "$(dirname "$0")/../../tutorials/02-allgather-gemm/run_gpu.sh" "$@"
