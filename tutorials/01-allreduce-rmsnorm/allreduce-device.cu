// Tutorial 1 device side: the communication steps of the fused AllReduce + residual + RMSNorm kernel.
//
// Each function is called from the Triton kernel in arn_kernels.py through raw.call. Their pointer
// and scalar arguments are uniform over the program, so every thread of the program (one CUDA
// block) runs each call once; the functions are block-collective and must be reached by all threads.
//
// Ordering contract used by the kernel:
//  * push_row: the data of `bytes` bytes at `src` becomes visible at `dst` on PE `pe` before the
//    signal word `sig` there is set to `value` (NVSHMEM's put-with-signal guarantee).
//  * wait_ge: returns in every thread only after `*sig >= value` was observed, with acquire
//    ordering, so loads the caller issues afterwards see the data that came with the signal.
//  * block_sync: a barrier that makes the block's earlier global stores visible to the whole block
//    (used before the block reads, as the source of a put, a row its threads just stored).
#include <triton_raw/nvshmem_device.h>

// The whole block copies one row to PE `pe` and then sets the signal word there to `value`.
extern "C" __device__ void push_row(void *dst, const void *src, long long bytes, uint64_t *sig,
                                    long long value, int pe) {
  nvshmemx_putmem_signal_block(dst, src, (size_t)bytes, sig, (uint64_t)value, NVSHMEM_SIGNAL_SET, pe);
}

// Thread 0 spins until the local signal word reaches `value`; the barrier then releases the block.
extern "C" __device__ void wait_ge(uint64_t *sig, long long value) {
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, (uint64_t)value);
    __threadfence();  // acquire at GPU scope: later loads are ordered after the observed signal
  }
  __syncthreads();
}

extern "C" __device__ void block_sync(void) {
  __threadfence_block();
  __syncthreads();
}
