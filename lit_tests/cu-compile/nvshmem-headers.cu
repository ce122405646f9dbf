// A .cu file calling NVSHMEM through NVSHMEM's own headers, read from the plugin's precompiled
// header: NVSHMEM's functions stay declarations, and nothing of NVSHMEM's inline code is compiled in.
// RUN: triton-raw-opt %s --passes=abi-wrappers,unique-symbols,triton-compat --prefix=rawext_hdr_ --verify-triton \
// RUN:   2>/dev/null | FileCheck %s
#include <nvshmem.h>
#include <nvshmemx.h>

extern "C" __device__ void ring_shift(int *destination) {
  int peer = (nvshmem_my_pe() + 1) % nvshmem_n_pes();
  if (threadIdx.x == 0) {
    nvshmem_int_p(destination, nvshmem_my_pe(), peer);
    nvshmem_quiet();
  }
}

// CHECK-DAG: define {{.*}}void @rawext_hdr_ring_shift(ptr
// CHECK-DAG: declare {{.*}}i32 @nvshmem_my_pe()
// CHECK-DAG: declare {{.*}}i32 @nvshmem_n_pes()
// CHECK-DAG: declare {{.*}}void @nvshmem_int_p(ptr {{.*}}, i32 {{.*}}, i32 {{.*}})
// CHECK-DAG: declare {{.*}}void @nvshmem_quiet()
// CHECK-DAG: define i32 @rawext_hdr_ring_shift__triton(i64 %p0)
// CHECK-NOT: define {{.*}}nvshmemi
// CHECK-NOT: nvshmemi_device_state_d
