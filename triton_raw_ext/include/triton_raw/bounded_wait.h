/* triton-raw-ext: bounded spin-waits on flags that other PEs raise.
 *
 * Contract: triton_raw_wait_ge(flag, expected, what, me, peer, timeout_ms, sleep_ns) returns the
 * value it saw once it has observed `*flag >= expected` (a 32- or 64-bit integer in global memory:
 * this PE's own, written by peers, or by another process's stream). Each calling thread waits on its
 * own; there is no barrier. Loads and stores the thread issues afterwards are ordered after that
 * observation (acquire), so what the peer published before raising the flag (a release store, or a
 * store after __threadfence_system(), as nvshmemx_signal_op and put-with-signal do) is visible to
 * them. It is nvshmem_signal_wait_until(flag, NVSHMEM_CMP_GE, expected) plus the acquire, bounded.
 * The template argument picks how the acquire is made:
 *   TRITON_RAW_ACQUIRE_LOAD_SYS (default): every load of the flag is ld.acquire.sys;
 *   TRITON_RAW_ACQUIRE_FENCE_GPU: volatile loads, as nvshmem_signal_wait_until's, then
 *     __threadfence() once the value is seen (NVSHMEM's own pattern; in kernels with many waits it
 *     left ptxas more registers than acquire loads did).
 *
 * The bound: a wait that has not seen the value after `timeout_ms` milliseconds of %globaltimer
 * prints one line, from the first thread of the loaded kernel whose wait expires,
 *   triton_raw_ext: PE <me> waited <ms> ms for PE <peer>: <what> at <address> is <seen>, expected >= <expected> ...
 * and every expired thread traps (PTX `trap`; the others once that line is out, or after a second):
 * the launch fails and the host's next synchronisation
 * raises a CUDA error, instead of the kernel spinning forever on a peer that died and holding the GPU
 * (and every process sharing it). Kernels take `timeout_ms` as an argument from the host:
 * triton_raw_ext.knobs.wait_timeout_ms() reads TRITON_RAW_WAIT_TIMEOUT_S (seconds, default 20).
 *
 * Cost: one load and one branch when the flag is already up. While waiting, %globaltimer is read
 * once every TRITON_RAW_WAIT_SPINS_PER_CLOCK spins; `sleep_ns` > 0 adds __nanosleep(sleep_ns) per
 * spin (fewer loads competing with the work that raises the flag). The report is an out-of-line call
 * on the path that ends in the trap.
 */
#ifndef TRITON_RAW_BOUNDED_WAIT_H
#define TRITON_RAW_BOUNDED_WAIT_H

#define TRITON_RAW_WAIT_SPINS_PER_CLOCK 256u

/* Set by the first thread whose wait expires, so that a kernel prints one report however many of
   its threads wait on the same dead peer; `printed` once its line is out. */
static __device__ unsigned int triton_raw_wait_reported;
static __device__ volatile unsigned int triton_raw_wait_printed;
#define TRITON_RAW_WAIT_PRINT_GRACE_NS 1000000000ull

enum { TRITON_RAW_ACQUIRE_LOAD_SYS, TRITON_RAW_ACQUIRE_FENCE_GPU };

template <int Acquire, typename T>
static __device__ __forceinline__ T triton_raw_load_flag(const T *flag) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "triton_raw_wait_ge waits on 32- or 64-bit integers");
  if constexpr (Acquire == TRITON_RAW_ACQUIRE_FENCE_GPU) {
    return *(const volatile T *)flag;
  } else if constexpr (sizeof(T) == 8) {
    unsigned long long seen;
    asm volatile("ld.acquire.sys.b64 %0, [%1];" : "=l"(seen) : "l"(flag) : "memory");
    return (T)seen;
  } else {
    unsigned int seen;
    asm volatile("ld.acquire.sys.b32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
    return (T)seen;
  }
}

static __device__ __forceinline__ unsigned long long triton_raw_globaltimer_ns(void) {
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

/* The report and the trap of an expired wait, out of line: the waiting kernel keeps no stack frame
   for printf's arguments, and the call site ends with `exit` so that ptxas keeps nothing live across
   the call (a `trap` there would hold every live register). */
template <typename T>
static __device__ __noinline__ void triton_raw_wait_expired(const T *flag, T expected, T seen, const char *what,
                                                            int me, int peer, unsigned long long waited_ns) {
  if (atomicExch(&triton_raw_wait_reported, 1u) == 0u) {
    const bool is_signed = (T)-1 < (T)0;
    printf("triton_raw_ext: PE %d waited %llu ms for PE %d: %s at %p is %lld, expected >= %lld (block %u, thread %u); "
           "trapping (the peer died or is stuck; the bound is TRITON_RAW_WAIT_TIMEOUT_S)\n",
           me, waited_ns / 1000000ull, peer, what, (const void *)flag,
           is_signed ? (long long)seen : (long long)(unsigned long long)seen,
           is_signed ? (long long)expected : (long long)(unsigned long long)expected, blockIdx.x, threadIdx.x);
    __threadfence();
    triton_raw_wait_printed = 1u;
  } else {
    // A trap ends the whole launch, a report still being written with it: the other expired threads
    // give the reporting one up to a second to finish its line.
    const unsigned long long start = triton_raw_globaltimer_ns();
    while (!triton_raw_wait_printed && triton_raw_globaltimer_ns() - start < TRITON_RAW_WAIT_PRINT_GRACE_NS) {
      __nanosleep(1000);
    }
  }
  asm volatile("trap;");
}

template <int Acquire = TRITON_RAW_ACQUIRE_LOAD_SYS, typename T>
static __device__ __forceinline__ T triton_raw_wait_ge(const T *flag, T expected, const char *what, int me, int peer,
                                                       int timeout_ms, unsigned int sleep_ns = 0) {
  T seen = triton_raw_load_flag<Acquire>(flag);
  if (seen < expected) {
    const unsigned long long start = triton_raw_globaltimer_ns();
    const unsigned long long limit = (unsigned long long)timeout_ms * 1000000ull;
    for (unsigned int spins = 1;; ++spins) {
      if (sleep_ns) __nanosleep(sleep_ns);
      seen = triton_raw_load_flag<Acquire>(flag);
      if (seen >= expected) break;
      if (spins % TRITON_RAW_WAIT_SPINS_PER_CLOCK == 0) {
        const unsigned long long waited = triton_raw_globaltimer_ns() - start;
        if (waited > limit) {
          triton_raw_wait_expired(flag, expected, seen, what, me, peer, waited);
          asm volatile("exit;");
        }
      }
    }
  }
  if constexpr (Acquire == TRITON_RAW_ACQUIRE_FENCE_GPU) __threadfence();
  return seen;
}

#endif /* TRITON_RAW_BOUNDED_WAIT_H */
