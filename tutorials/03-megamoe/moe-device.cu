// Raw CUDA + NVSHMEM device functions of the MegaMoE tutorial, called from Triton kernels.
//
// Every function here is called with scalar and pointer arguments, so every thread of the Triton
// program runs it once: the copies below are block-collective (all threads of the CTA take part
// and split the bytes). Peers are reached with loads and stores through nvshmem_ptr (NVLink or
// PCIe peer-to-peer, or the same GPU in shared-GPU mode); the layer checks at construction that
// every peer is reachable this way, so no function here needs a proxy-transport fallback.
#include <triton_raw/nvshmem_device.h>

namespace {

// Copies `bytes` from `src` to `dst` with every thread of the block. 16-byte accesses when both
// addresses and the size are 16-byte aligned (the layer guarantees it for token rows), otherwise
// 4-byte or 1-byte accesses. Loads use ld.global.cg so that data a peer wrote is read from L2,
// never from a stale L1 line. Four loads are issued before their stores to keep them in flight.
__device__ __forceinline__ void block_copy(void *__restrict__ dst, const void *__restrict__ src,
                                           long long bytes) {
  const long long tid = threadIdx.x;
  const long long nth = (long long)blockDim.x * blockDim.y * blockDim.z;
  const unsigned long long bits = (unsigned long long)dst | (unsigned long long)src | (unsigned long long)bytes;
  if ((bits & 15ull) == 0) {
    int4 *d = static_cast<int4 *>(dst);
    const int4 *s = static_cast<const int4 *>(src);
    const long long n = bytes / 16;
    long long i = tid;
    for (; i + 3 * nth < n; i += 4 * nth) {
      int4 v0 = __ldcg(s + i), v1 = __ldcg(s + i + nth), v2 = __ldcg(s + i + 2 * nth), v3 = __ldcg(s + i + 3 * nth);
      d[i] = v0;
      d[i + nth] = v1;
      d[i + 2 * nth] = v2;
      d[i + 3 * nth] = v3;
    }
    for (; i < n; i += nth) d[i] = __ldcg(s + i);
  } else if ((bits & 3ull) == 0) {
    int *d = static_cast<int *>(dst);
    const int *s = static_cast<const int *>(src);
    for (long long i = tid; i < bytes / 4; i += nth) d[i] = __ldcg(s + i);
  } else {
    char *d = static_cast<char *>(dst);
    const char *s = static_cast<const char *>(src);
    for (long long i = tid; i < bytes; i += nth) d[i] = s[i];
  }
}

}  // namespace

// Address of PE `pe`'s copy of the symmetric object `sym`, as an integer (0 if not load/store
// reachable). Triton code casts it to a pointer to read a peer's small metadata directly.
extern "C" __device__ long long moe_peer_ptr(const void *sym, int pe) {
  return (long long)nvshmem_ptr(sym, pe);
}

// The int at symmetric address `sym` on PE `pe` (same value in every thread), read from L2.
extern "C" __device__ int moe_peer_load_i32(const int *sym, int pe) {
  const int *p = static_cast<const int *>(nvshmem_ptr(sym, pe));
  return __ldcg(p);
}

// Dispatch (pull): copies `bytes` from the symmetric `src_sym` on PE `pe` into local `dst`.
// Ends with a CTA barrier so the Triton code after the call may read `dst` from any thread.
extern "C" __device__ void moe_pull(void *dst, const void *src_sym, long long bytes, int pe) {
  block_copy(dst, nvshmem_ptr(src_sym, pe), bytes);
  __syncthreads();
}

// Combine (push): copies local `src` (written by this program's Triton code just before the call)
// into the symmetric `dst_sym` on PE `pe`. Starts with a CTA barrier so every thread's stores to
// `src` are visible to the threads that copy them. Completion on the peer is ordered by the
// end of the kernel and the barrier the layer places after it.
extern "C" __device__ void moe_push(void *dst_sym, const void *src, long long bytes, int pe) {
  __syncthreads();
  block_copy(nvshmem_ptr(dst_sym, pe), src, bytes);
}
