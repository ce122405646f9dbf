// CUDA C++ as libraries write it: C++ linkage, overloads, templates, pointer and struct results.
#include <cuda_fp16.h>

// Helpers the file keeps to itself: not exported, so not callable from a kernel.
static __device__ float twice(float x) { return 2.0f * x; }
namespace {
__device__ float thrice(float x) { return 3.0f * x; }
}  // namespace
__device__ inline float halve(float x) { return 0.5f * x; }

// C++ linkage (_Z4axpyfff): bound by its name.
__device__ float axpy(float a, float x, float y) { return a * x + y + twice(0.0f) + thrice(0.0f) + halve(0.0f); }

// Overloads: the name alone is ambiguous, a signature picks one.
__device__ float square(float x) { return x * x; }
__device__ double square(double x) { return x * x; }

// A template, callable through its explicit instantiations.
template <typename T>
__device__ T lerp(T a, T b, T t) {
  return a + t * (b - a);
}
template __device__ float lerp<float>(float, float, float);
template __device__ double lerp<double>(double, double, double);

// Pointer results: the element type comes from the declaration.
__device__ const float *row_start(const float *base, int row, int stride) { return base + row * stride; }
__device__ int *element(int *base, int i) { return base + i; }

// Struct results: one tuple element per field.
struct DivMod {
  int quot;
  int rem;
};
__device__ DivMod divmod(int a, int b) { return {a / b, a % b}; }

struct Split {
  float magnitude;
  int negative;
};
__device__ Split split_sign(float x) { return {x < 0.0f ? -x : x, x < 0.0f ? 1 : 0}; }

// Three floats fill two 64-bit words: the function is pure, so running it per word is harmless.
struct Moments {
  float sum;
  float diff;
  float prod;
};
__device__ Moments moments(float a, float b) { return {a + b, a - b, a * b}; }

// __half2 comes back as two fp16 values (clang returns it through an sret pointer).
__device__ __half2 sum_diff(__half a, __half b) { return __halves2half2(__hadd(a, b), __hsub(a, b)); }

// A pointer to no Triton element type: the result is the int64 address.
__device__ void *advance(void *p, long long bytes) { return static_cast<char *>(p) + bytes; }
