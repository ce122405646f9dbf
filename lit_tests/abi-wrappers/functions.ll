; abi-wrappers --functions: wrap exactly the named functions (C++ names included); a name the module
; does not define is an error.
; RUN: triton-raw-opt %s --passes=abi-wrappers --functions=_Z6helperi 2>/dev/null | FileCheck %s
; RUN: not triton-raw-opt %s --passes=abi-wrappers --functions=add_one,nope 2>&1 | FileCheck %s --check-prefix=MISSING
; RUN: not triton-raw-opt %s --functions=add_one 2>&1 | FileCheck %s --check-prefix=UNUSED

target triple = "nvptx64-nvidia-cuda"

define float @add_one(float %x) {
  %r = fadd float %x, 1.0
  ret float %r
}

define i32 @_Z6helperi(i32 %x) {
  ret i32 %x
}

; CHECK:     define i32 @_Z6helperi__triton(i32 %p0)
; CHECK-NOT: @add_one__triton

; MISSING: triton-raw-opt: error: abi-wrappers: no defined function named nope
; UNUSED:  triton-raw-opt: error: --functions is only used by abi-wrappers, which --passes does not name
