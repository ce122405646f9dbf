; triton-compat: LLVM 22.1 prints the target_mem0/target_mem1 locations inside memory(...) (NVSHMEM
; 3.8's bitcode has them; -O3 adds them to kernels); Triton 3.6's LLVM cannot parse them. The pass
; removes the locations and keeps the rest of the memory effects.
; Triton 3.7 and newer read the input as is; the pass leaves it alone for them (keep-new.ll).
; REQUIRES: legacy-llvm
; RUN: not triton-raw-opt %s --verify-triton 2>&1 | FileCheck %s --check-prefix=REJECT
; RUN: triton-raw-opt %s --passes=triton-compat --verify-triton | FileCheck %s

target triple = "nvptx64-nvidia-cuda"

define i32 @peek(ptr %p) #0 {
  %v = load i32, ptr %p
  ret i32 %v
}

define void @poke(ptr %p) #1 {
  store i32 1, ptr %p
  ret void
}

define void @sync(ptr %p) #2 {
  ret void
}

define void @flag() #3 {
  ret void
}

attributes #0 = { nounwind memory(read, inaccessiblemem: none, target_mem0: none, target_mem1: none) }
attributes #1 = { nounwind memory(readwrite, target_mem0: none, target_mem1: none) }
attributes #2 = { nounwind memory(argmem: read, target_mem0: readwrite) }
attributes #3 = { nounwind memory(target_mem1: write) }

; REJECT: triton-raw-opt: error: Triton's LLVM cannot read this IR: {{.*}}failed to parse IR

; CHECK-DAG: attributes #0 = { nounwind memory(read, inaccessiblemem: none) }
; CHECK-DAG: attributes #1 = { nounwind memory(readwrite) }
; Effects on target memory are added to every other location (Triton's LLVM has no location for
; it), so they are never lost: the result only widens.
; CHECK-DAG: attributes #2 = { nounwind memory(readwrite) }
; CHECK-DAG: attributes #3 = { nounwind memory(write) }
; CHECK-NOT: target_mem
