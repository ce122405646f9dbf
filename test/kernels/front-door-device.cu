// Functions for the front-door reliability tests: a numeric macro, narrow integer parameters, a kernel,
// a reserved name and unsigned results.
#ifndef TILE
#define TILE 0
#endif
extern "C" __device__ int tile(void) { return TILE; }
extern "C" __device__ int plus_int(int x, int y) { return x + y; }
extern "C" __device__ short plus_short(short x, short y) { return x + y; }
extern "C" __global__ void fill_kernel(float *x) { x[threadIdx.x] = 1.0f; }
extern "C" __device__ float __reserved(float x) { return x; }
extern "C" __device__ unsigned int twice_unsigned(unsigned int x) { return x * 2u; }
extern "C" __device__ unsigned char low_byte(unsigned int x) { return x; }
extern "C" __device__ unsigned short low_half(unsigned int x) { return x; }
typedef unsigned long long u64;
extern "C" __device__ const u64 widen_unsigned(unsigned int x) { return x; }
struct UnsignedSplit { unsigned int high; int low; unsigned char tag[2]; };
__device__ UnsignedSplit split_unsigned(unsigned int x) { return {x >> 16, (int)(x & 0xffff), {1, 2}}; }
