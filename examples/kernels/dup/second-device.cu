__device__ __noinline__ int helper(int x) { return x * 3; }
extern "C" __device__ int second(int x) { return helper(x); }
