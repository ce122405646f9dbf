// C++ sources compile as written: C++ functions are exported under their mangled names, explicit
// template instantiations survive clang (the plugin compiles with -fgpu-rdc) and are exported,
// helpers (static, anonymous namespace, inline, implicit instantiations) are not.
// RUN: triton-raw-opt %s --passes=abi-wrappers,unique-symbols,triton-compat --prefix=rawext_cxx_ --verify-triton \
// RUN:   2>/dev/null | FileCheck %s
// RUN: triton-raw-opt %s --passes=abi-wrappers 2>&1 >/dev/null | FileCheck %s --check-prefix=REPORT
#include <cuda_fp16.h>

static __device__ float twice(float x) { return 2.0f * x; }
namespace {
__device__ float thrice(float x) { return 3.0f * x; }
}  // namespace
__device__ inline float halve(float x) { return 0.5f * x; }
template <typename T>
__device__ T scale(T x, T a) { return x * a; }
template __device__ float scale<float>(float, float);

__device__ float axpy(float a, float x, float y) { return a * x + y + twice(y) + thrice(y) + halve(y); }
__device__ double square(double x) { return scale(x, x); }
struct Pair { float value; int index; };
__device__ Pair best(float x) { return {x, 1}; }
__device__ __half2 dup(__half x) { return __halves2half2(x, x); }
__device__ const float *at(const float *base, int i) { return base + i; }

// CHECK-DAG: define {{.*}}float @rawext_cxx__Z5scaleIfET_S0_S0_(
// CHECK-DAG: define float @rawext_cxx__Z5scaleIfET_S0_S0___triton(float %p0, float %p1)
// CHECK-DAG: define float @rawext_cxx__Z4axpyfff__triton(float %p0, float %p1, float %p2)
// CHECK-DAG: define double @rawext_cxx__Z6squared__triton(double %p0)
// CHECK-DAG: define i64 @rawext_cxx__Z4bestf__triton(float %p0)
// CHECK-DAG: define i64 @rawext_cxx__Z3dup6__half__triton(half %p0)
// CHECK-DAG: define i64 @rawext_cxx__Z2atPKfi__triton(i64 %p0, i32 %p1)
// CHECK-NOT: twice{{.*}}__triton
// CHECK-NOT: thrice{{.*}}__triton
// CHECK-NOT: halve{{.*}}__triton
// CHECK-NOT: scaleIdE{{.*}}__triton

// REPORT-DAG: abi-wrappers: wrapped _Z5scaleIfET_S0_S0_ as _Z5scaleIfET_S0_S0___triton
// REPORT-DAG: abi-wrappers: wrapped _Z4axpyfff as _Z4axpyfff__triton
// REPORT-DAG: abi-wrappers: wrapped _Z6squared as _Z6squared__triton
// REPORT-DAG: abi-wrappers: wrapped _Z4bestf as _Z4bestf__triton
// REPORT-DAG: abi-wrappers: wrapped _Z3dup6__half as _Z3dup6__half__triton
// REPORT-DAG: abi-wrappers: wrapped _Z2atPKfi as _Z2atPKfi__triton
// REPORT-NOT: cannot wrap
