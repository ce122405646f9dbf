// A user's own device library, built separately to NVPTX bitcode and linked through libs=.
extern "C" __device__ float lib_scale(float x, float s) { return x * s; }
extern "C" __device__ float lib_soft_exp(float x) { return expf(fminf(x, 10.0f)); }  // needs libdevice
extern "C" __device__ float lib_unused(float x) { return x - 1.0f; }
