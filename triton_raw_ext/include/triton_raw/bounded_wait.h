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
 *     left ptxas more registers than acquire loads did);
 *   TRITON_RAW_ACQUIRE_RELOAD_GPU: volatile loads, then one ld.acquire.gpu of the flag once the value
 *     is seen, which it returns (for flags that only grow and are raised on this GPU). No fence: a
 *     fence also waits for the thread's own earlier stores in flight (Tutorial 3's combine items, whose
 *     threads each wait, took 12.6 us with it and 11.9 with this on the H200).
 *
 * The bound: a wait that has not seen the value after `timeout_ms` milliseconds of %globaltimer
 * traps (PTX `trap`): the launch fails and the host's next synchronisation raises a CUDA error,
 * instead of the kernel spinning forever on a peer that died and holding the GPU (and every process
 * sharing it). The first expired wait of a loaded kernel first leaves its report in host memory
 * (triton_raw_wait_record_ptr, set by the plugin when it loads the kernel), which the plugin prints
 * from the host as one line:
 *   triton_raw_ext: PE <me> waited <ms> ms for PE <peer>: <what> at <address> is <seen>, expected >= <expected> ...
 * Other threads whose waits expire meanwhile (every thread of a program that waits together) trap only
 * once that report is written, at most TRITON_RAW_WAIT_REPORT_NS (100 ms) later: a trap ends the kernel.
 * The report is written inline, with no call: a call in a kernel makes ptxas serialise the kernel's
 * wgmma instructions (C7510), so a device printf would slow every GEMM that waits. Kernels take
 * `timeout_ms` as an argument from the host: triton_raw_ext.knobs.wait_timeout_ms() reads
 * TRITON_RAW_WAIT_TIMEOUT_S (seconds, default 20).
 *
 * Cost: one load and one branch when the flag is already up. While waiting, %globaltimer is read
 * once every TRITON_RAW_WAIT_SPINS_PER_CLOCK spins; `sleep_ns` > 0 adds __nanosleep(sleep_ns) per
 * spin (fewer loads competing with the work that raises the flag).
 */
#ifndef TRITON_RAW_BOUNDED_WAIT_H
#define TRITON_RAW_BOUNDED_WAIT_H

#define TRITON_RAW_WAIT_SPINS_PER_CLOCK 256u

/* The report of an expired wait, in host memory mapped into the GPU (triton_raw_ext.wait_reports
   reads it; keep the two layouts in step). `ready` is written last. The plugin defines
   triton_raw_wait_record_ptr in every kernel that declares it and stores the record's address there
   at load; it stays null (the trap without a report) in a kernel loaded another way. */
struct triton_raw_wait_record {
  unsigned int ready;
  int me, peer, is_signed;
  unsigned int block, thread;
  unsigned long long waited_ns, flag;
  long long seen, expected;
  char what[64];
};
static_assert(sizeof(struct triton_raw_wait_record) == 120, "wait_reports.WaitRecord has this layout");
extern "C" __device__ struct triton_raw_wait_record *triton_raw_wait_record_ptr;
/* Who reports the expired waits of a loaded kernel: the first expired thread claims the report
   (WRITING), fills the record and publishes it (WRITTEN). Any thread's trap ends the whole kernel, so
   the other expired threads trap only once it is written (or after TRITON_RAW_WAIT_REPORT_NS), else a
   block whose threads all wait would end before its report reaches the host. */
enum { TRITON_RAW_REPORT_NONE, TRITON_RAW_REPORT_WRITING, TRITON_RAW_REPORT_WRITTEN };
#define TRITON_RAW_WAIT_REPORT_NS 100000000ull
static __device__ unsigned int triton_raw_wait_report_state;

enum { TRITON_RAW_ACQUIRE_LOAD_SYS, TRITON_RAW_ACQUIRE_FENCE_GPU, TRITON_RAW_ACQUIRE_RELOAD_GPU };

template <int Acquire, typename T>
static __device__ __forceinline__ T triton_raw_load_flag(const T *flag) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "triton_raw_wait_ge waits on 32- or 64-bit integers");
  if constexpr (Acquire != TRITON_RAW_ACQUIRE_LOAD_SYS) {
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

/* One ld.acquire.gpu of a 32- or 64-bit flag. */
template <typename T>
static __device__ __forceinline__ T triton_raw_acquire_gpu(const T *flag) {
  if constexpr (sizeof(T) == 8) {
    unsigned long long seen;
    asm volatile("ld.acquire.gpu.b64 %0, [%1];" : "=l"(seen) : "l"(flag) : "memory");
    return (T)seen;
  } else {
    unsigned int seen;
    asm volatile("ld.acquire.gpu.b32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
    return (T)seen;
  }
}

static __device__ __forceinline__ unsigned long long triton_raw_globaltimer_ns(void) {
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

/* The report (by the first expired thread) and the trap of an expired wait; inline: see above. */
template <typename T>
static __device__ __forceinline__ void triton_raw_wait_expired(const T *flag, T expected, T seen, const char *what,
                                                               int me, int peer, unsigned long long waited_ns) {
  volatile struct triton_raw_wait_record *record = triton_raw_wait_record_ptr;
  volatile unsigned int *state = &triton_raw_wait_report_state;
  if (record != 0) {  // null: loaded without the plugin's module hook, nowhere to report
    if (atomicCAS(&triton_raw_wait_report_state, TRITON_RAW_REPORT_NONE, TRITON_RAW_REPORT_WRITING) ==
        TRITON_RAW_REPORT_NONE) {
      // One report per process: a record already filled (by another kernel) is the cause, left as it is.
      if (record->ready == 0u) {
        record->me = me;
        record->peer = peer;
        record->is_signed = (T)-1 < (T)0;
        record->block = blockIdx.x;
        record->thread = threadIdx.x;
        record->waited_ns = waited_ns;
        record->flag = (unsigned long long)flag;
        record->seen = (long long)seen;
        record->expected = (long long)expected;
        unsigned int i = 0;
        for (; i + 1 < sizeof(record->what) && what[i] != 0; ++i) record->what[i] = what[i];
        record->what[i] = 0;
        __threadfence_system();
        record->ready = 1u;
        __threadfence_system();
      }
      *state = TRITON_RAW_REPORT_WRITTEN;
    } else {
      const unsigned long long since = triton_raw_globaltimer_ns();
      while (*state != TRITON_RAW_REPORT_WRITTEN && triton_raw_globaltimer_ns() - since < TRITON_RAW_WAIT_REPORT_NS)
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
        if (waited > limit) triton_raw_wait_expired(flag, expected, seen, what, me, peer, waited);
      }
    }
  }
  if constexpr (Acquire == TRITON_RAW_ACQUIRE_FENCE_GPU) __threadfence();
  if constexpr (Acquire == TRITON_RAW_ACQUIRE_RELOAD_GPU) seen = triton_raw_acquire_gpu(flag);
  return seen;
}

#endif /* TRITON_RAW_BOUNDED_WAIT_H */
