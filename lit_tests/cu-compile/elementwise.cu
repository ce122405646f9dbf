// A .cu input is compiled exactly as the plugin compiles @dialect sources (clang, NVPTX bitcode for
// sm_<arch>, no passes); --passes then run on the result.
// RUN: triton-raw-opt %s | FileCheck %s --check-prefix=RAW
// RUN: triton-raw-opt %s --arch=80 | FileCheck %s --check-prefix=SM80
// Clang 22's llvm.smin declaration carries nocreateundeforpoison: Triton 3.6 cannot read the raw
// output (3.7 and newer can)...
// RUN: %if legacy-llvm %{ not triton-raw-opt %s --verify-triton 2>&1 | FileCheck %s --check-prefix=REJECT %} \
// RUN:   %else %{ triton-raw-opt %s --verify-triton > /dev/null %}
// ...but every version reads the output of the plugin's pipeline.
// RUN: triton-raw-opt %s --passes=abi-wrappers,unique-symbols,triton-compat --prefix=rawext_lit_ --verify-triton \
// RUN:   2>/dev/null | FileCheck %s

extern "C" __device__ float add_one(float x) { return x + 1.0f; }
extern "C" __device__ int clamp_hi(int x, int hi) { return x < hi ? x : hi; }

__device__ int twice(int x) { return 2 * x; }
extern "C" __device__ void double_all(int *data, int n) {
  int t = threadIdx.x;
  if (t < n) data[t] = twice(data[t]);
}

// RAW: target triple = "nvptx64-nvidia-cuda"
// RAW: define {{.*}}float @add_one(float noundef %x) {{.*}}[[ATTR:#[0-9]+]]
// RAW: declare i32 @llvm.smin.i32(i32, i32) [[SMIN:#[0-9]+]]
// RAW: attributes [[ATTR]] = {{{.*}}"target-cpu"="sm_90"
// RAW: attributes [[SMIN]] = {{{.*}}nocreateundeforpoison
// RAW: !{i32 4, !"nvvm-reflect-ftz", i32 0}
// SM80: "target-cpu"="sm_80"
// REJECT: triton-raw-opt: error: Triton's LLVM cannot read this IR: {{.*}}failed to parse IR

// Sources are prefixed, wrappers added, Triton's ABI types used, compat removals applied.
// CHECK-DAG: define {{.*}}float @rawext_lit_add_one(float noundef %x)
// CHECK-DAG: define {{.*}}i32 @rawext_lit__Z5twicei(
// CHECK-DAG: declare i32 @llvm.smin.i32(i32, i32)
// CHECK-LABEL: define float @rawext_lit_add_one__triton(float %p0)
// CHECK:         call float @rawext_lit_add_one(float %p0)
// CHECK-LABEL: define i32 @rawext_lit_clamp_hi__triton(i32 %p0, i32 %p1)
// CHECK-LABEL: define i32 @rawext_lit_double_all__triton(i64 %p0, i32 %p1)
// CHECK:         %a0 = inttoptr i64 %p0 to ptr
// CHECK:         call void @rawext_lit_double_all(ptr %a0, i32 %p1)
// CHECK-NEXT:    ret i32 0
// CHECK-NOT: target-cpu
// CHECK-NOT: nvvm-reflect-ftz
