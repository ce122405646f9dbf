; triton-compat on Triton 3.7 and newer (LLVM 23/24): `nocreateundeforpoison` and the target_mem
; locations in memory(...) are read as they are, so the pass keeps them and only drops what every
; version needs dropped (target attributes). Asked to prepare the IR for 3.6 it removes them.
; UNSUPPORTED: legacy-llvm
; RUN: triton-raw-opt %s --verify-triton | FileCheck %s --check-prefix=KEEP
; RUN: triton-raw-opt %s --passes=triton-compat --verify-triton | FileCheck %s --check-prefix=KEEP
; RUN: triton-raw-opt %s --passes=triton-compat --for-triton=3.6 | FileCheck %s --check-prefix=LEGACY

target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.smin.i32(i32, i32)

define i32 @peek(ptr %p, i32 %b) #0 {
  %v = load i32, ptr %p
  %m = call i32 @llvm.smin.i32(i32 %v, i32 %b)
  ret i32 %m
}

attributes #0 = { nounwind memory(argmem: read, target_mem0: readwrite) "target-cpu"="sm_90" }

; KEEP-DAG:   nocreateundeforpoison
; KEEP-DAG:   memory(argmem: read, target_mem0: readwrite)
; The attribute groups lose them (the `; Function Attrs:` comments llvmlite prints keep their text).
; LEGACY-NOT: {{^attributes .*nocreateundeforpoison}}
; LEGACY-NOT: {{^attributes .*target_mem}}
; LEGACY:     attributes #{{[0-9]+}} = { nounwind memory(readwrite) }
