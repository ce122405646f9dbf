// Raw functions over shared memory that the calling kernel allocated: every thread of the program
// runs them once. fill_iota takes a shared-space pointer, block_sum a plain (generic) one.
#define SHARED __attribute__((address_space(3)))

extern "C" __device__ void fill_iota(SHARED float *buf, int n, float scale) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = i * scale;
}

extern "C" __device__ float block_sum(const float *buf, int n) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += buf[i];
  return sum;
}
