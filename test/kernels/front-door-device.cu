// Functions for the front-door reliability tests: a numeric macro and narrow integer parameters.
#ifndef TILE
#define TILE 0
#endif
extern "C" __device__ int tile(void) { return TILE; }
extern "C" __device__ int plus_int(int x, int y) { return x + y; }
extern "C" __device__ short plus_short(short x, short y) { return x + y; }
extern "C" __global__ void fill_kernel(float *x) { x[threadIdx.x] = 1.0f; }
extern "C" __device__ float __reserved(float x) { return x; }
