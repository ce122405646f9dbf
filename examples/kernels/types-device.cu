// Every scalar type the ABI supports, in and out.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
extern "C" __device__ double scale_f64(double x, double a) { return x * a; }
extern "C" __device__ long long add_i64(long long x, long long y) { return x + y; }
extern "C" __device__ __half twice_f16(__half x) { return __hadd(x, x); }
extern "C" __device__ __nv_bfloat16 twice_bf16(__nv_bfloat16 x) { return __hadd(x, x); }
extern "C" __device__ int load_at(const int *base, int i) { return base[i]; }
