; link-library: link a device library into a kernel module, make what it brought internal (except
; --keep-globals), inline what is not noinline, propagate constants into what is, clean the kernel
; up, and delete what it does not reach. The kernel itself keeps its name and linkage.
; RUN: triton-raw-opt %s --passes=link-library --library=%S/Inputs/device-lib.ll --keep-globals=lib_state_d \
; RUN:   2>/dev/null | FileCheck %s
; RUN: triton-raw-opt %s --passes=link-library --library=%S/Inputs/device-lib.ll --keep-globals=lib_state_d \
; RUN:   2>&1 >/dev/null | FileCheck %s --check-prefix=REPORT
; RUN: not triton-raw-opt %s --passes=link-library 2>&1 | FileCheck %s --check-prefix=NOLIB
; RUN: not triton-raw-opt %s --passes=link-library --library=%S/Inputs/missing.ll 2>&1 \
; RUN:   | FileCheck %s --check-prefix=BADLIB

target datalayout = "e-p3:32:32-p4:32:32-p5:32:32-p6:32:32-p7:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @lib_get(i32)
declare void @lib_slow_path(ptr addrspace(1), i32)

define ptx_kernel void @kernel(ptr addrspace(1) %out) {
  %v = call i32 @lib_get(i32 2)
  store i32 %v, ptr addrspace(1) %out
  call void @lib_slow_path(ptr addrspace(1) %out, i32 9)
  ret void
}

; The kept global stays external; the library's table became internal.
; CHECK-DAG:   @lib_state_d = addrspace(1) externally_initialized global i32 0
; CHECK-DAG:   @lib_table = internal addrspace(1) global [4 x i32]

; lib_get is inlined (its constant index folded into the address) and deleted; the noinline
; helper stays out of line, internal.
; CHECK-LABEL: define ptx_kernel void @kernel(ptr addrspace(1) {{.*}}%out)
; CHECK-NOT:     call {{.*}}@lib_get
; CHECK:         load i32, ptr addrspace(1) getelementptr inbounds {{.*}}@lib_table, i64 8)
; CHECK:         load volatile i32, ptr addrspace(1) @lib_state_d
; CHECK:         call void @lib_slow_path(ptr addrspace(1) %out, i32 9)
; CHECK-LABEL: define internal void @lib_slow_path(
; Its one caller passes op 9: only the store path is left.
; CHECK:         store volatile i32 7
; CHECK-NOT:     add i32
; CHECK-NOT:   @lib_get
; CHECK-NOT:   @lib_unused

; REPORT-DAG: link-library: linked lib_get
; REPORT-DAG: link-library: linked lib_slow_path
; REPORT-DAG: link-library: linked lib_unused
; NOLIB: triton-raw-opt: error: pass link-library needs --library
; BADLIB: triton-raw-opt: error: {{.*}}Inputs/missing.ll: no such file
