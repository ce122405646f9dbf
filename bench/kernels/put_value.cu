// A raw function using NVSHMEM: thread 0 writes `value` into `dst` on PE `pe`.
#include <triton_raw/nvshmem_device.h>

extern "C" __device__ void bench_put_value(int *dst, int value, int pe) {
  if (threadIdx.x == 0) nvshmem_int_p(dst, value, pe);
}
