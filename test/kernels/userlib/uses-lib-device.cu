// Calls the user library by name: the functions stay declarations here and are linked per kernel.
extern "C" __device__ float lib_scale(float x, float s);
extern "C" __device__ float lib_soft_exp(float x);

extern "C" __device__ float scaled_soft_exp(float x) { return lib_scale(lib_soft_exp(x), 0.5f); }
