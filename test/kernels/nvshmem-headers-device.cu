// Raw functions written as NVSHMEM's examples are: NVSHMEM's own headers, its device API by name.
// Every thread of a Triton program runs a function once; the _block calls are collective over it.
#include <stdio.h>
#include <nvshmem.h>
#include <nvshmemx.h>

extern "C" __device__ int my_pe(void) { return nvshmem_my_pe(); }

// NVSHMEM's ring shift: thread 0 sends this PE's number to `destination` on the next PE and
// waits until the put is complete.
extern "C" __device__ void ring_shift(int *destination) {
  int mype = nvshmem_my_pe();
  int npes = nvshmem_n_pes();
  int peer = (mype + 1) % npes;
  if (threadIdx.x == 0) {
    nvshmem_int_p(destination, mype, peer);
    nvshmem_quiet();
  }
}

// The whole CTA sends `nelems` ints of `source` to `destination` on the next PE, then sets
// `signal` there to `value`.
extern "C" __device__ void ring_put_signal(int *destination, const int *source, long long nelems,
                                           uint64_t *signal, long long value) {
  int peer = (nvshmem_my_pe() + 1) % nvshmem_n_pes();
  nvshmemx_putmem_signal_block(destination, source, nelems * sizeof(int), signal, (uint64_t)value,
                               NVSHMEM_SIGNAL_SET, peer);
}

// Every thread waits until the local `signal` is at least `value`.
extern "C" __device__ void wait_signal(uint64_t *signal, long long value) {
  nvshmem_signal_wait_until(signal, NVSHMEM_CMP_GE, (uint64_t)value);
}

// `symmetric` on the next PE as a pointer this PE can load from (null if it cannot).
extern "C" __device__ int *next_pe_ptr(int *symmetric) {
  return (int *)nvshmem_ptr(symmetric, (nvshmem_my_pe() + 1) % nvshmem_n_pes());
}

extern "C" __device__ void barrier_all(void) { nvshmemx_barrier_all_block(); }

// Host code as in NVSHMEM's examples: parsed (NVSHMEM's host API is declared), never compiled.
int report_pe(void) {
  nvshmem_init();
  int mype = nvshmem_my_pe();
  printf("PE %d of %d\n", mype, nvshmem_n_pes());
  nvshmem_finalize();
  return mype;
}
