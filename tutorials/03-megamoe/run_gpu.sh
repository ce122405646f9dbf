#!/usr/bin/env bash
# Correctness + benchmark of Tutorial 3 on a GPU box (the main job's entry): the GPU suite.
# Run from anywhere; results go to $OUT (else bench/results/).
cd "$(dirname "$0")/../.." && exec bash scripts/gpu/tutorial3_suite.sh "$@"
