// Defines `helper`, as does second-device.cu: the two must link into one kernel without clashing.
__device__ __noinline__ int helper(int x) { return x + 100; }
extern "C" __device__ int first(int x) { return helper(x); }
