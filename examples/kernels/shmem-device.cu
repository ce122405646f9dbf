// NVSHMEM from raw CUDA: every thread runs these; block-scoped calls are collective over the CTA.
#include <triton_raw/nvshmem_device.h>

extern "C" __device__ int my_pe(void) { return nvshmem_my_pe(); }
extern "C" __device__ int n_pes(void) { return nvshmem_n_pes(); }

// Thread 0 writes `value` into `dst` on PE `pe`.
extern "C" __device__ void put_int(int *dst, int value, int pe) {
  if (threadIdx.x == 0) nvshmem_int_p(dst, value, pe);
}

// 1 if `sym` on `pe` is reachable with loads/stores, else 0.
extern "C" __device__ int peer_reachable(int *sym, int pe) { return nvshmem_ptr(sym, pe) != nullptr; }

// The whole CTA sends `bytes` of `src` to `dst` on `pe` and raises `sig` there to `value`.
extern "C" __device__ void put_signal_block(void *dst, const void *src, long long bytes, uint64_t *sig,
                                            long long value, int pe) {
  nvshmemx_putmem_signal_block(dst, src, (size_t)bytes, sig, (uint64_t)value, NVSHMEM_SIGNAL_SET, pe);
}

// The whole CTA copies `bytes` of local `src` into `dst` on PE `pe` (complete at the next barrier).
extern "C" __device__ void put_block(void *dst, const void *src, long long bytes, int pe) {
  nvshmemx_putmem_block(dst, src, (size_t)bytes, pe);
}

// The whole CTA copies `bytes` of `src` on PE `pe` into local `dst` (complete on return).
extern "C" __device__ void get_block(void *dst, const void *src, long long bytes, int pe) {
  nvshmemx_getmem_block(dst, src, (size_t)bytes, pe);
  __syncthreads();
}

// Every thread waits until the local `sig` is >= `value`.
extern "C" __device__ void wait_signal(uint64_t *sig, long long value) {
  nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, (uint64_t)value);
}

extern "C" __device__ void barrier_all(void) {
  __syncthreads();
  if (threadIdx.x == 0) nvshmem_barrier_all();
  __syncthreads();
}
