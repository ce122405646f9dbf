; abi-wrappers, pointer results: the generic address crosses as i64 (ptrtoint, through a generic
; pointer for shared memory); the element type is not in the IR, so it is not the pass's business.
; RUN: triton-raw-opt %s --passes=abi-wrappers 2>/dev/null | FileCheck %s

target triple = "nvptx64-nvidia-cuda"

define ptr @_Z9row_startPKfii(ptr %base, i32 %row, i32 %stride) #0 {
  %i = mul i32 %row, %stride
  %p = getelementptr float, ptr %base, i32 %i
  ret ptr %p
}

define ptr addrspace(1) @global_slot(ptr addrspace(1) %base) #0 {
  ret ptr addrspace(1) %base
}

define ptr addrspace(3) @shared_slot(ptr addrspace(3) %base, i32 %i) #0 {
  %p = getelementptr float, ptr addrspace(3) %base, i32 %i
  ret ptr addrspace(3) %p
}

attributes #0 = { nounwind memory(none) }

; CHECK-LABEL: define i64 @_Z9row_startPKfii__triton(i64 %p0, i32 %p1, i32 %p2)
; CHECK-NEXT:  entry:
; CHECK-NEXT:    %a0 = inttoptr i64 %p0 to ptr
; CHECK-NEXT:    %r = call ptr @_Z9row_startPKfii(ptr %a0, i32 %p1, i32 %p2)
; CHECK-NEXT:    %r.addr = ptrtoint ptr %r to i64
; CHECK-NEXT:    ret i64 %r.addr

; CHECK-LABEL: define i64 @global_slot__triton(i64 %p0)
; CHECK:         %r = call ptr addrspace(1) @global_slot(ptr addrspace(1) %a0)
; CHECK-NEXT:    %r.addr = ptrtoint ptr addrspace(1) %r to i64
; CHECK-NEXT:    ret i64 %r.addr

; CHECK-LABEL: define i64 @shared_slot__triton(i64 %p0, i32 %p1)
; CHECK:         %a0 = addrspacecast ptr %a0.gen to ptr addrspace(3)
; CHECK:         %r = call ptr addrspace(3) @shared_slot(ptr addrspace(3) %a0, i32 %p1)
; CHECK-NEXT:    %r.gen = addrspacecast ptr addrspace(3) %r to ptr
; CHECK-NEXT:    %r.addr = ptrtoint ptr %r.gen to i64
; CHECK-NEXT:    ret i64 %r.addr
