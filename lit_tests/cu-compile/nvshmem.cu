// A .cu file calling NVSHMEM through the plugin's header (on clang's -isystem path): the NVSHMEM
// functions stay declarations with their own names, to be linked after Triton's llir stage.
// RUN: triton-raw-opt %s --passes=abi-wrappers,unique-symbols,triton-compat --prefix=rawext_shm_ --verify-triton \
// RUN:   2>/dev/null | FileCheck %s
#include <triton_raw/nvshmem_device.h>

extern "C" __device__ int my_pe(void) { return nvshmem_my_pe(); }
extern "C" __device__ void put_int(int *dst, int value, int pe) {
  if (threadIdx.x == 0) nvshmem_int_p(dst, value, pe);
}

// CHECK-DAG: define {{.*}}i32 @rawext_shm_my_pe()
// CHECK-DAG: define {{.*}}void @rawext_shm_put_int(ptr
// CHECK-DAG: declare {{.*}}i32 @nvshmem_my_pe()
// CHECK-DAG: declare {{.*}}void @nvshmem_int_p(ptr {{.*}}, i32 {{.*}}, i32 {{.*}})
// CHECK-DAG: define i32 @rawext_shm_my_pe__triton()
// CHECK-DAG: define i32 @rawext_shm_put_int__triton(i64 %p0, i32 %p1, i32 %p2)
// CHECK-NOT: @rawext_shm_nvshmem
