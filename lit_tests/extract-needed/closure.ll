; extract-needed: keep the named functions and what they reach; everything else is internalized
; and deleted. Globals in --keep-globals (NVSHMEM's device state) stay external even when unused.
; RUN: triton-raw-opt %s --passes=extract-needed --keep=nvshmem_my_pe,nvshmem_int_p \
; RUN:   --keep-globals=nvshmemi_device_state_d,nvshmemi_device_lib_version_d | FileCheck %s
; RUN: triton-raw-opt %s --passes=extract-needed --keep=nvshmem_my_pe,nvshmem_int_p \
; RUN:   --keep-globals=nvshmemi_device_state_d,nvshmemi_device_lib_version_d | FileCheck %s --check-prefix=GONE
; RUN: not triton-raw-opt %s --passes=extract-needed --keep=nvshmem_my_pe,nvshmem_nope 2>&1 \
; RUN:   | FileCheck %s --check-prefix=MISSING
; RUN: not triton-raw-opt %s --passes=extract-needed 2>&1 | FileCheck %s --check-prefix=NOKEEP

target triple = "nvptx64-nvidia-cuda"

@nvshmemi_device_state_d = addrspace(4) externally_initialized global i32 0
@nvshmemi_device_lib_version_d = addrspace(4) externally_initialized global i32 3
@pe_table = addrspace(1) global [4 x i32] zeroinitializer
@unused_table = addrspace(1) global [4 x i32] zeroinitializer
@llvm.compiler.used = appending global [2 x ptr] [ptr addrspacecast (ptr addrspace(4) @nvshmemi_device_state_d to ptr), ptr addrspacecast (ptr addrspace(4) @nvshmemi_device_lib_version_d to ptr)], section "llvm.metadata"

declare i32 @__nv_min(i32, i32)

define i32 @nvshmem_my_pe() {
  %v = load i32, ptr addrspace(4) @nvshmemi_device_state_d
  %m = call i32 @__nv_min(i32 %v, i32 3)
  ret i32 %m
}

define void @nvshmem_int_p(ptr %dst, i32 %v, i32 %pe) {
  call void @nvshmemi_transfer(ptr %dst, i32 %v, i32 %pe)
  ret void
}

define linkonce_odr void @nvshmemi_transfer(ptr %dst, i32 %v, i32 %pe) {
  %p = getelementptr [4 x i32], ptr addrspace(1) @pe_table, i32 0, i32 %pe
  %b = load i32, ptr addrspace(1) %p
  %s = add i32 %b, %v
  store i32 %s, ptr %dst
  ret void
}

define void @nvshmem_barrier_all() {
  call void @nvshmemi_barrier()
  ret void
}

define void @nvshmemi_barrier() {
  %p = getelementptr [4 x i32], ptr addrspace(1) @unused_table, i32 0, i32 0
  store i32 1, ptr addrspace(1) %p
  ret void
}

; The state globals keep their external linkage; globals only the kept closure uses become internal.
; CHECK-DAG: @nvshmemi_device_state_d = addrspace(4) externally_initialized global i32 0
; CHECK-DAG: @nvshmemi_device_lib_version_d = addrspace(4) externally_initialized global i32 3
; CHECK-DAG: @pe_table = internal addrspace(1) global [4 x i32]
; CHECK-DAG: declare i32 @__nv_min(i32, i32)
; CHECK-DAG: define i32 @nvshmem_my_pe()
; CHECK-DAG: define void @nvshmem_int_p(ptr %dst, i32 %v, i32 %pe)
; CHECK-DAG: define internal void @nvshmemi_transfer(

; Not reached from the kept functions: gone.
; GONE-NOT: @nvshmem_barrier_all
; GONE-NOT: @nvshmemi_barrier
; GONE-NOT: @unused_table

; MISSING: triton-raw-opt: error: extract-needed: the module does not define nvshmem_nope; check --keep
; NOKEEP: triton-raw-opt: error: pass extract-needed needs --keep
