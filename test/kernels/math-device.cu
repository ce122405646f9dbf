// CUDA math and integer intrinsics as real device code writes them: clang lowers each to a libdevice
// call (__nv_*), which the plugin resolves from the libdevice Triton links for the kernel.
extern "C" __device__ int clamp_int(int x, int lo, int hi) { return max(lo, min(x, hi)); }
extern "C" __device__ unsigned int min_u32(unsigned int a, unsigned int b) { return min(a, b); }
extern "C" __device__ int abs_int(int x) { return abs(x); }
extern "C" __device__ float exp_f32(float x) { return expf(x); }
extern "C" __device__ float fast_exp_f32(float x) { return __expf(x); }
extern "C" __device__ float log_f32(float x) { return logf(x); }
extern "C" __device__ float sqrt_f32(float x) { return sqrtf(x); }  // libdevice's __nv_sqrtf, as tl's
extern "C" __device__ float sqrt_rn_f32(float x) { return __fsqrt_rn(x); }  // IEEE round-to-nearest
extern "C" __device__ float rsqrt_f32(float x) { return rsqrtf(x); }
extern "C" __device__ float fast_div_f32(float x, float y) { return __fdividef(x, y); }
extern "C" __device__ float fma_f32(float x, float y, float z) { return fmaf(x, y, z); }
extern "C" __device__ int popc_u32(unsigned int x) { return __popc(x); }
extern "C" __device__ int clz_i32(int x) { return __clz(x); }

// A softmax-style helper using several of them at once.
extern "C" __device__ float softplus_clamped(float x) { return fminf(logf(1.0f + expf(x)), 20.0f); }
