; unique-symbols: definitions get the prefix, references follow; declarations (NVSHMEM, libdevice,
; vprintf, intrinsics) and LLVM's reserved globals keep their names.
; RUN: triton-raw-opt %s --passes=unique-symbols --prefix=rawext_0123_ 2>/dev/null | FileCheck %s
; RUN: triton-raw-opt %s --passes=unique-symbols --prefix=rawext_0123_ 2>&1 >/dev/null \
; RUN:   | FileCheck %s --check-prefix=REPORT
; RUN: triton-raw-opt %s --passes=unique-symbols --prefix=rawext_0123_ 2>&1 | FileCheck %s --check-prefix=ONCE
; RUN: not triton-raw-opt %s --passes=unique-symbols --prefix=bad-prefix 2>&1 | FileCheck %s --check-prefix=BAD
; RUN: not triton-raw-opt %s --passes=unique-symbols 2>&1 | FileCheck %s --check-prefix=NOPREFIX

target triple = "nvptx64-nvidia-cuda"

@table = addrspace(1) global [2 x i32] [i32 1, i32 2]
@scale = addrspace(4) externally_initialized constant float 2.0
@fmt = private unnamed_addr constant [4 x i8] c"%d\0A\00"
@extern_state = external addrspace(1) global i32
@llvm.compiler.used = appending global [1 x ptr] [ptr addrspacecast (ptr addrspace(4) @scale to ptr)], section "llvm.metadata"
@rawext_0123_done = global i32 0

declare i32 @nvshmem_my_pe()
declare i32 @__nv_min(i32, i32)
declare i32 @vprintf(ptr, ptr)
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()

define internal i32 @helper(i32 %x) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %m = call i32 @__nv_min(i32 %x, i32 %t)
  ret i32 %m
}

define i32 @entry(i32 %x) {
  %pe = call i32 @nvshmem_my_pe()
  %h = call i32 @helper(i32 %pe)
  %p = getelementptr [2 x i32], ptr addrspace(1) @table, i32 0, i32 1
  %v = load i32, ptr addrspace(1) %p
  %s = load i32, ptr addrspace(1) @extern_state
  %r = call i32 @vprintf(ptr @fmt, ptr null)
  ret i32 %v
}

; CHECK-DAG: @rawext_0123_table = addrspace(1) global [2 x i32]
; CHECK-DAG: @rawext_0123_scale = addrspace(4) externally_initialized constant float
; CHECK-DAG: @rawext_0123_fmt = private unnamed_addr constant
; CHECK-DAG: @extern_state = external addrspace(1) global i32
; CHECK-DAG: @llvm.compiler.used = appending global [1 x ptr] [ptr addrspacecast (ptr addrspace(4) @rawext_0123_scale to ptr)]
; CHECK-DAG: @rawext_0123_done = global i32 0
; CHECK-DAG: declare i32 @nvshmem_my_pe()
; CHECK-DAG: declare i32 @__nv_min(i32, i32)
; CHECK-DAG: declare i32 @vprintf(ptr, ptr)
; CHECK-DAG: declare {{.*}}i32 @llvm.nvvm.read.ptx.sreg.tid.x()

; CHECK-LABEL: define internal i32 @rawext_0123_helper(i32 %x)
; CHECK:         call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
; CHECK:         call i32 @__nv_min(

; CHECK-LABEL: define i32 @rawext_0123_entry(i32 %x)
; CHECK:         call i32 @nvshmem_my_pe()
; CHECK:         call i32 @rawext_0123_helper(i32 %pe)
; CHECK:         getelementptr [2 x i32], ptr addrspace(1) @rawext_0123_table
; CHECK:         load i32, ptr addrspace(1) @extern_state
; CHECK:         call i32 @vprintf(ptr @rawext_0123_fmt, ptr null)

; Names that already carry the prefix are left alone (no double prefix).
; ONCE-NOT: rawext_0123_rawext_0123_

; REPORT-DAG: unique-symbols: renamed helper to rawext_0123_helper
; REPORT-DAG: unique-symbols: renamed table to rawext_0123_table
; REPORT-NOT: renamed llvm.compiler.used
; REPORT-NOT: renamed nvshmem_my_pe

; BAD: triton-raw-opt: error: unique-symbols: prefix 'bad-prefix' must be non-empty [A-Za-z0-9_.]
; NOPREFIX: triton-raw-opt: error: pass unique-symbols needs --prefix
