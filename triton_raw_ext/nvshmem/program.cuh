/* triton-raw-ext: helpers of the generated NVSHMEM wrappers (the .cu files beside this header).
 *
 * Triton runs a kernel's scalar code in every thread of the program, with the same values. A call
 * NVSHMEM makes per thread (or per warp) is therefore made once per program: thread 0 (warp 0)
 * makes it, the program waits for it at a barrier, and every thread gets thread 0's result. Every
 * thread of the program must reach these helpers, as Triton's scalar code does.
 */
#ifndef TRITON_RAW_NVSHMEM_PROGRAM_CUH
#define TRITON_RAW_NVSHMEM_PROGRAM_CUH

#include <nvshmem.h>
#include <nvshmemx.h>

/* The table in calls.py gives each wrapper a signature; this fails to compile unless NVSHMEM declares
   `function` with exactly that type (a cast, not decltype: NVSHMEM declares some functions twice). */
#define SAME_SIGNATURE(function, type) \
  static_assert(sizeof(static_cast<type>(&function)) == sizeof(type), #function " is declared as " #type)

/* Thread 0's `value`, in every thread of the program. */
template <typename T> __device__ __forceinline__ T broadcast_from_thread0(T value) {
  static_assert(sizeof(T) <= sizeof(unsigned long long), "results are at most 64 bits");
  __shared__ unsigned long long slot;
  if (threadIdx.x == 0) __builtin_memcpy(&slot, &value, sizeof(T));
  __syncthreads();
  __builtin_memcpy(&value, &slot, sizeof(T));
  __syncthreads(); /* every thread has read the slot before a later call writes it again */
  return value;
}

/* `call()` made by the threads for which `selected` holds (thread 0 among them), the others waiting
   for it; returns thread 0's result to every thread. */
template <typename F> __device__ __forceinline__ auto run_selected(bool selected, F call) -> decltype(call()) {
  if constexpr (__is_same(decltype(call()), void)) {
    if (selected) call();
    __syncthreads();
  } else {
    decltype(call()) result{};
    if (selected) result = call();
    return broadcast_from_thread0(result);
  }
}

template <typename F> __device__ __forceinline__ auto in_thread0(F call) { return run_selected(threadIdx.x == 0, call); }
template <typename F> __device__ __forceinline__ auto in_warp0(F call) {
  return run_selected(threadIdx.x < warpSize, call);
}

#endif
