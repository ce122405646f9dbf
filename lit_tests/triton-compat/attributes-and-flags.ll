; triton-compat: "target-cpu"/"target-features" come off every function (they stop Triton's O3 from
; inlining raw functions into the kernel); the nvvm-reflect-ftz module flag goes (Triton sets it to
; 1, clang writes 0, and the conflict at link time kills the process); other module flags stay.
; RUN: triton-raw-opt %s --passes=triton-compat --verify-triton | FileCheck %s

target triple = "nvptx64-nvidia-cuda"

define float @add_one(float %x) #0 {
  %r = fadd float %x, 1.0
  ret float %r
}

define float @twice(float %x) #1 {
  %r = fmul float %x, 2.0
  ret float %r
}

attributes #0 = { alwaysinline nounwind "frame-pointer"="all" "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" }
attributes #1 = { "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" }

!llvm.module.flags = !{!0, !1, !2}
!0 = !{i32 1, !"wchar_size", i32 4}
!1 = !{i32 4, !"nvvm-reflect-ftz", i32 0}
!2 = !{i32 7, !"frame-pointer", i32 2}

; CHECK-DAG: attributes #0 = { alwaysinline nounwind "frame-pointer"="all" }
; An attribute group left empty gets `nounwind`, which holds for all NVPTX code.
; CHECK-DAG: attributes #1 = { nounwind }
; CHECK-DAG: !llvm.module.flags = !{!0, !2}
; CHECK-DAG: !0 = !{i32 1, !"wchar_size", i32 4}
; CHECK-DAG: !2 = !{i32 7, !"frame-pointer", i32 2}
; CHECK-NOT: target-cpu
; CHECK-NOT: target-features
; CHECK-NOT: nvvm-reflect-ftz
