#!/usr/bin/env bash
# Tutorial 1 on a GPU machine: correctness (whole shape table) and benchmark at world 1, then, with
# several GPUs, at world = number of GPUs (one PE per GPU, NCCL baseline included).
# Every step is bounded by `timeout`; exits non-zero if any step fails. Results: $OUT or bench/results/.
set -u
cd "$(dirname "$0")"
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
export NVSHMEM_SYMMETRIC_SIZE="${NVSHMEM_SYMMETRIC_SIZE:-4G}"
RES="${OUT:-../../bench/results}"
mkdir -p "$RES"
status=0
timeout -k 5 240 python3 allreduce.py --graph-tokens 16 4096 --json "$RES/t1_correct_w1.json" || status=1
timeout -k 5 240 python3 benchmark.py --json "$RES/t1_bench_w1.json" || status=1
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
if (( gpus > 1 )); then
    timeout -k 5 300 torchrun --standalone --nproc_per_node="$gpus" allreduce.py --graph-tokens 16 4096 \
        --json "$RES/t1_correct_w$gpus.json" || status=1
    timeout -k 5 300 torchrun --standalone --nproc_per_node="$gpus" benchmark.py \
        --json "$RES/t1_bench_w$gpus.json" || status=1
fi
exit $status
