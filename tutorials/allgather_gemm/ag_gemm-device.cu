// Raw CUDA device functions of tutorial 2 (AllGather-GEMM), called from the Triton consumer GEMM.
//
// Ready flags: one int32 per source rank in each rank's flag array. The producer raises
// flag[src] to the call's epoch (a stream memory write after the copy engine has pushed that
// rank's A shard); the consumer waits until flag[src] >= epoch before it loads rows of `src`.
// Epochs only grow, so flags never need resetting between calls.
#include <triton_raw/bounded_wait.h>

// Every thread of the program runs this once per tile with the same arguments (a thread-uniform
// check): it spins until *flag >= epoch (an acquire at system scope: the flag is written by another
// process's stream, possibly on another GPU), then orders the TMA (async proxy) reads that follow
// after the acquire. A producer that never raises the flag (rank `src` died) ends the kernel after
// `timeout_ms` with a report naming both ranks (<triton_raw/bounded_wait.h>), instead of hanging the
// GPU and every process sharing it. Returns 0: the caller adds the result to the A row offset, which
// makes the load depend on the wait in Triton's IR so the software pipeliner cannot hoist the load
// above it.
extern "C" __device__ int ag_wait_ready(const int *flag, int epoch, int rank, int src, int timeout_ms) {
  triton_raw_wait_ge(flag, epoch, "ready flag", rank, src, timeout_ms, 64);
  asm volatile("fence.proxy.async.global;" ::: "memory");
  return 0;
}
