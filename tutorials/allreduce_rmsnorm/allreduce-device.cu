// Tutorial 1 device side: the communication steps of the fused AllReduce + residual + RMSNorm kernel.
//
// Each function is called from the Triton kernel in kernels.py through raw.call. Their pointer
// and scalar arguments are uniform over the program, so every thread of the program (one CUDA
// block) runs each call once; the functions are block-collective and must be reached by all threads.
//
// Ordering contract used by the kernel (a program pushes all its rows, then signals them):
//  * put_row: starts copying `bytes` bytes from `src` to `dst` on PE `pe` (non-blocking put); by
//    itself not ordered with later operations.
//  * complete_puts: when it returns in thread 0, every put_row the block issued before it is
//    complete (delivered, and its source reusable). It is nvshmem_quiet, not nvshmem_fence: a fence
//    orders earlier puts to a PE before later operations to that PE, which would suffice for the
//    signals, but does not complete non-blocking puts, whose source (the caller's x) may be
//    overwritten once the kernel returns. Over NVLink (P2P) both are the same code, thread 0
//    running __threadfence_system() (NVSHMEM 3.4 nvshmemi_quiet, nvshmemi_fence); put_row...,
//    complete_puts, signal_set is then what nvshmemx_putmem_signal_block runs per row (block copy,
//    barrier, thread 0: system fence, signal), with one fence per program instead of per row.
//  * signal_set: thread 0 sets the signal word `sig` on PE `pe` to `value`. Called after
//    complete_puts (same thread), so a PE that observes `value` sees every row put to it before.
//  * wait_ge: returns in every thread only after `*sig >= value` was observed, with acquire
//    ordering, so loads the caller issues afterwards see the data that came with the signal. PE `me`
//    waits for PE `peer`'s signal at most `timeout_ms`, then the kernel reports both and traps
//    (<triton_raw/bounded_wait.h>): a peer that died must not leave this kernel spinning forever.
//  * peer_offset: the byte distance from symmetric address `sym` to its copy on PE `pe`, for stores
//    through that copy (the store path: PE `pe` reachable by load/store, over NVLink or PCIe P2P).
//  * publish_stores: when it returns in thread 0, every store the block made before it (to peers'
//    memory too) is visible system-wide; signal_set after it then publishes them like complete_puts.
//  * block_sync: a barrier that makes the block's earlier global stores visible to the whole block
//    (used before the block reads, as the source of a put, rows its threads just stored).
#include <triton_raw/bounded_wait.h>
#include <triton_raw/nvshmem_device.h>

static __device__ __forceinline__ bool first_thread(void) {
  return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
}

// The whole block copies one row to PE `pe` (non-blocking: see complete_puts).
extern "C" __device__ void put_row(void *dst, const void *src, long long bytes, int pe) {
  nvshmemx_putmem_nbi_block(dst, src, (size_t)bytes, pe);
}

// The barrier orders every thread's puts before thread 0's quiet.
extern "C" __device__ void complete_puts(void) {
  __syncthreads();
  if (first_thread()) nvshmem_quiet();
}

extern "C" __device__ void signal_set(uint64_t *sig, long long value, int pe) {
  if (first_thread()) nvshmemx_signal_op(sig, (uint64_t)value, NVSHMEM_SIGNAL_SET, pe);
}

// Thread 0 spins until the local signal word reaches `value` (volatile loads, as
// nvshmem_signal_wait_until, bounded), then __threadfence(): acquire at GPU scope, later loads are
// ordered after the observed signal. The barrier then releases the block.
extern "C" __device__ void wait_ge(uint64_t *sig, long long value, int me, int peer, int timeout_ms) {
  if (first_thread())
    triton_raw_wait_ge<TRITON_RAW_ACQUIRE_FENCE_GPU>(sig, (uint64_t)value, "allreduce signal", me, peer, timeout_ms);
  __syncthreads();
}

extern "C" __device__ long long peer_offset(const void *sym, int pe) {
  return (long long)((const char *)nvshmem_ptr(sym, pe) - (const char *)sym);
}

// The barrier orders every thread's stores before thread 0's system-scope fence (fences are cumulative).
extern "C" __device__ void publish_stores(void) {
  __syncthreads();
  if (first_thread()) __threadfence_system();
}

extern "C" __device__ void block_sync(void) {
  __threadfence_block();
  __syncthreads();
}
