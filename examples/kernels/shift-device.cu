// A pointer function: every thread of the program runs it once; uses __syncthreads.
__device__ int helper(int x) { return x * 2; }
extern "C" __device__ void rotate_block(int *data, int n) {
  __shared__ int tile[1024];
  int t = threadIdx.x;
  if (t < n) tile[t] = data[t];
  __syncthreads();
  if (t < n) data[t] = helper(tile[(t + 1) % n]);
}
