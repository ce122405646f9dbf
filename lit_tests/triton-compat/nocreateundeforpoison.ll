; triton-compat: LLVM 22.1 puts `nocreateundeforpoison` on intrinsic declarations (llvm.smin/umax/
; bitreverse ...); Triton 3.6's LLVM (22.0git) cannot parse it. The pass removes it.
; Triton 3.7 and newer read the input as is; the pass leaves it alone for them (keep-new.ll).
; REQUIRES: legacy-llvm
; RUN: not triton-raw-opt %s --verify-triton 2>&1 | FileCheck %s --check-prefix=REJECT
; RUN: triton-raw-opt %s --passes=triton-compat --verify-triton | FileCheck %s

target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.smin.i32(i32, i32)
declare i32 @llvm.bitreverse.i32(i32)

define i32 @clamp_rev(i32 %a, i32 %b) {
  %m = call i32 @llvm.smin.i32(i32 %a, i32 %b)
  %r = call i32 @llvm.bitreverse.i32(i32 %m)
  ret i32 %r
}

; REJECT: triton-raw-opt: error: Triton's LLVM cannot read this IR: {{.*}}failed to parse IR
; REJECT: run the triton-compat pass last

; CHECK:     declare i32 @llvm.smin.i32(i32, i32) [[INTR:#[0-9]+]]
; CHECK:     attributes [[INTR]] = { nocallback nofree nosync nounwind speculatable willreturn memory(none) }
; CHECK-NOT: nocreateundeforpoison
