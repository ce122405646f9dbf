// Raw CUDA device functions of tutorial 2 (AllGather-GEMM), called from the Triton consumer GEMM.
//
// Ready flags: one int32 per source rank in each rank's flag array. The producer raises
// flag[src] to the call's epoch (a stream memory write after the copy engine has pushed that
// rank's A shard); the consumer waits until flag[src] >= epoch before it loads rows of `src`.
// Epochs only grow, so flags never need resetting between calls.

// Upper bound on one wait, in nanoseconds of %globaltimer. A producer bug then ends the kernel
// with an error (trap) instead of hanging the GPU and every process sharing it.
#define AG_WAIT_TIMEOUT_NS 20000000000ull

__device__ __forceinline__ int ag_load_acquire(const int *flag) {
  int seen;
  // System scope: the flag is written by another process's stream (possibly another GPU).
  asm volatile("ld.acquire.sys.b32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
  return seen;
}

__device__ __forceinline__ unsigned long long ag_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Every thread of the program runs this once per tile with the same arguments (a thread-uniform
// check): it spins until *flag >= epoch, then orders the TMA (async proxy) reads that follow
// after the acquire. Returns 0: the caller adds the result to the A row offset, which makes the
// load depend on the wait in Triton's IR so the software pipeliner cannot hoist the load above it.
extern "C" __device__ int ag_wait_ready(const int *flag, int epoch) {
  if (ag_load_acquire(flag) < epoch) {
    unsigned long long start = ag_globaltimer();
    while (ag_load_acquire(flag) < epoch) {
      __nanosleep(64);
      if (ag_globaltimer() - start > AG_WAIT_TIMEOUT_NS) __trap();
    }
  }
  asm volatile("fence.proxy.async.global;" ::: "memory");
  return 0;
}
