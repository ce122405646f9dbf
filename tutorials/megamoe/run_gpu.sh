#!/usr/bin/env bash
# Tutorial 3 on the GPU machine: its suite (`t3` in scripts/gpu/suites.py); arguments go to the runner.
cd "$(dirname "$0")/../.." && exec python3 -m scripts.gpu.suite t3 "$@"
