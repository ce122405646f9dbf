// Raw CUDA + NVSHMEM device functions of the MegaMoE tutorial, called from Triton kernels.
//
// Every function here is called with scalar and pointer arguments, so every thread of the Triton
// program runs it once: the copies below are block-collective (all threads of the CTA take part
// and split the bytes). Peers are reached with loads and stores through nvshmem_ptr (NVLink or
// PCIe peer-to-peer, or the same GPU in shared-GPU mode); the layer checks at construction that
// every peer is reachable this way, so no function here needs a proxy-transport fallback.
#include <triton_raw/bounded_wait.h>
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

// The barrier between the phases of a call (world > 1), in place of nvshmemx_barrier_all_on_stream,
// whose wait cannot be bounded. Thread 0 counts the barrier in `epoch` (this PE's count, in device
// memory so that CUDA graph replays advance it), fences at system scope so that every store this PE
// made before, to peers' memory too, is visible before its word, sets its word `arrived_sym[me]` on
// every peer to the count, then waits for every peer's word in its own `arrived_sym` to reach it
// (acquire at system scope). Kernels queued after the barrier on this PE's stream therefore see every
// PE's stores made before its barrier, as after nvshmem_barrier_all. Every PE passes the same
// barriers in the same order, and counts only grow, so a peer one barrier ahead leaves a word that
// still satisfies the wait. A peer that never arrives (it died) ends the kernel after `timeout_ms`
// with a report naming both PEs (<triton_raw/bounded_wait.h>).
extern "C" __device__ void moe_barrier(uint64_t *arrived_sym, long long *epoch, int me, int world, int timeout_ms) {
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    const uint64_t count = (uint64_t)*epoch + 1;
    *epoch = (long long)count;
    __threadfence_system();
    for (int i = 1; i < world; ++i) nvshmemx_signal_op(arrived_sym + me, count, NVSHMEM_SIGNAL_SET, (me + i) % world);
    for (int i = 1; i < world; ++i) {
      const int peer = (me + i) % world;
      triton_raw_wait_ge(arrived_sym + peer, count, "barrier word", me, peer, timeout_ms);
    }
  }
  __syncthreads();
}

// ----------------------------------------------------------------------------------------------
// The persistent kernel (persistent.py): its waits and its signals to peers.
//
// What each wait is for, by the `what` index the kernel passes (persistent.WAIT_NAMES, same order):
// the report of an expired wait names it.
static __device__ const char *const moe_wait_names[] = {
    "route items done",      "layout done",           "dispatch items done", "rows landed in M tile",
    "L1 tiles done of M tile", "L2 tiles done of M tile", "plan flag",           "combine flag",
    "tokens routed",
};

// Returns 0 once `*counter >= expected` (an int32 work counter of this PE's own kernel, raised with
// release atomics by its other programs), to every thread of the program: thread 0 waits (acquire),
// then a CTA barrier, so every thread's later loads are ordered after it while one thread polls; then
// the asynchronous proxy is ordered after it too (TMA may read what the counted work stored with
// ordinary stores). Call it from code every thread reaches. The caller adds the 0 to an index of the
// loads that must follow, so that Triton's pipeliner cannot hoist them above the wait. After
// `timeout_ms` it reports and traps (<triton_raw/bounded_wait.h>): a counter that never fills is a
// fault of this PE's own kernel, so the report names this PE twice.
extern "C" __device__ int moe_wait_count(const int *counter, int expected, int what, int me, int timeout_ms) {
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    triton_raw_wait_ge(counter, expected, moe_wait_names[what], me, me, timeout_ms);
  }
  __syncthreads();
  asm volatile("fence.proxy.async.global;" ::: "memory");
  return 0;
}

// moe_wait_count for a tensor of counters (called elementwise): each thread waits for its own
// elements, with acquire ordering, and no barrier; the caller puts one after the call.
extern "C" __device__ int moe_wait_each(const int *counter, int expected, int what, int me, int timeout_ms) {
  triton_raw_wait_ge(counter, expected, moe_wait_names[what], me, me, timeout_ms);
  return 0;
}

// moe_wait_count for one partition of a warp-specialized program (gluon_persistent.py), called with
// scalars or elementwise: every calling thread waits itself, with no CTA barrier, since the other
// partitions do not call it. Its partition shares the SM with partitions at work, so it polls gently:
// volatile loads MOE_POLL_NS apart, then one acquire load of the counter (an acquire load in every spin
// held the working partitions back; a fence instead of the last one waits for the thread's own stores
// too: combine items took 12.6 us with it, 11.9 without, on the H200). Counters only grow within a
// call. Then the asynchronous proxy is ordered after the wait, as the loader's next reads are TMA loads
// of what the counted work stored with ordinary stores.
#define MOE_POLL_NS 100
extern "C" __device__ int moe_wait_async(const int *counter, int expected, int what, int me, int timeout_ms) {
  triton_raw_wait_ge<TRITON_RAW_ACQUIRE_RELOAD_GPU>(counter, expected, moe_wait_names[what], me, me, timeout_ms,
                                                    MOE_POLL_NS);
  asm volatile("fence.proxy.async.global;" ::: "memory");
  return 0;
}

// Returns 0 once this PE's word `*flag` (int64, symmetric, raised by PE `peer` with moe_signal) is at
// least `epoch`, to every thread: thread 0 waits with acquire ordering at system scope, then a CTA
// barrier, so what the peer stored before its signal, in its memory or ours, is visible to every
// thread's later loads. Bounded like moe_wait_count; the report names the peer.
extern "C" __device__ int moe_wait_flag(const long long *flag, long long epoch, int what, int me, int peer,
                                        int timeout_ms) {
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    triton_raw_wait_ge(flag, epoch, moe_wait_names[what], me, peer, timeout_ms);
  }
  __syncthreads();
  return 0;
}

// Raises PE `pe`'s copy of the symmetric int64 word `flag_sym` to `value` (block-collective). Every
// thread's earlier stores (to this PE's memory or to peers') are made visible first: a CTA barrier,
// a system-scope fence, then one release store at system scope, which the peer's acquire in
// moe_wait_flag pairs with. Words only grow (they carry the call's epoch), so none is ever reset.
extern "C" __device__ void moe_signal(long long *flag_sym, long long value, int pe) {
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    long long *word = static_cast<long long *>(nvshmem_ptr(flag_sym, pe));
    __threadfence_system();
    asm volatile("st.release.sys.b64 [%0], %1;" ::"l"(word), "l"(value) : "memory");
  }
}

// A GPU-scope release fence by each calling thread (fence.acq_rel.gpu): its stores, and those its
// partition's barrier ordered before the call, are visible before its later stores and atomics. Once per
// thread before relaxed counts, not a release atomic per count: each of those fences again, and each
// fence waits for the thread's stores in flight.
extern "C" __device__ void moe_fence_gpu(void) { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

// After a thread's TMA stores to global memory (bulk async-groups): wait until they have written it, not
// only read their shared memory (Triton 3.6's store wait), and order those async-proxy writes before the
// thread's later generic ones, so that a release after them publishes the rows. Threads without stores
// in flight pass at once.
extern "C" __device__ void moe_bulk_stores_done(void) {
  asm volatile("cp.async.bulk.wait_group 0;\n\tfence.proxy.async.global;" ::: "memory");
}

// moe_signal for one partition of a warp-specialized program, which has passed its own barrier before the
// call (a CTA barrier would wait for the other partitions): the first thread of each calling warp fences
// at system scope and stores the value with release (the same value from every warp: words only grow).
extern "C" __device__ void moe_signal_async(long long *flag_sym, long long value, int pe) {
  if ((threadIdx.x & 31) == 0) {
    long long *word = static_cast<long long *>(nvshmem_ptr(flag_sym, pe));
    __threadfence_system();
    asm volatile("st.release.sys.b64 [%0], %1;" ::"l"(word), "l"(value) : "memory");
  }
}

// silu(gate) * up as Triton computes gate * (1 / (1 + exp(-gate))) * up (ex2.approx of the same product, then
// a reciprocal that for normal values is div.full's), without the range handling ptxas adds around the
// non-ftz ex2 and div.full: 6 instructions a value instead of 13. Only values past the normal range differ
// (gate < -87: 0 instead of a subnormal); the SwiGLU epilogues issue it once per value of h. Raw CUDA because
// Triton's exp and division only come in the non-ftz forms and Gluon has no inline assembly before Triton 3.9.
extern "C" __device__ float moe_swiglu(float gate, float up) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(gate * -1.4426950408889634f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return gate * r * up;
}
