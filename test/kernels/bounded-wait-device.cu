// Waits of the bounded-wait tests: a peer's 32-bit flag and a 64-bit signal word.
#include <stdint.h>
#include <triton_raw/bounded_wait.h>

extern "C" __device__ int wait_flag(const int *flag, int expected, int me, int peer, int timeout_ms) {
  return triton_raw_wait_ge(flag, expected, "test flag", me, peer, timeout_ms, 64);
}

extern "C" __device__ long long wait_signal(const uint64_t *sig, long long expected, int me, int peer, int timeout_ms) {
  return (long long)triton_raw_wait_ge(sig, (uint64_t)expected, "test signal", me, peer, timeout_ms);
}

extern "C" __device__ int wait_flag_reload(const int *flag, int expected, int me, int peer, int timeout_ms) {
  return triton_raw_wait_ge<TRITON_RAW_ACQUIRE_RELOAD_GPU>(flag, expected, "test flag", me, peer, timeout_ms, 64);
}
