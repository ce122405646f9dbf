; triton-compat: a debug unit that clang made for optimized device code (-g, -gline-tables-only) is
; directives-only; linked into a kernel whose own unit (Triton's) is line tables, LLVM's DWARF writer
; aborts on the inlined raw function's entry. The pass makes the raw unit line tables too: PTX with
; .file/.loc lines into the .cu, inside the kernel.
; RUN: not triton-raw-opt %s --verify-triton 2>&1 | FileCheck %s --check-prefix=ABORT
; RUN: triton-raw-opt %s --passes=triton-compat --verify-triton | FileCheck %s

target triple = "nvptx64-nvidia-cuda"

define ptx_kernel void @kernel(ptr addrspace(1) %p) !dbg !5 {
  %x = load float, ptr addrspace(1) %p, !dbg !8
  %y = fmul float %x, 2.0, !dbg !9
  %z = fadd float %y, 1.0, !dbg !12
  store float %z, ptr addrspace(1) %p, !dbg !8
  ret void, !dbg !8
}

!llvm.dbg.cu = !{!0, !2}
!llvm.module.flags = !{!4}

!0 = distinct !DICompileUnit(language: DW_LANG_C, file: !1, producer: "triton", isOptimized: true, runtimeVersion: 0, emissionKind: LineTablesOnly)
!1 = !DIFile(filename: "kernel.py", directory: "/work")
!2 = distinct !DICompileUnit(language: DW_LANG_C_plus_plus_14, file: !3, producer: "clang", isOptimized: true, runtimeVersion: 0, emissionKind: DebugDirectivesOnly, nameTableKind: None)
!3 = !DIFile(filename: "/work/add-device.cu", directory: "/work")
!4 = !{i32 2, !"Debug Info Version", i32 3}
!5 = distinct !DISubprogram(name: "kernel", scope: !1, file: !1, line: 10, type: !6, scopeLine: 10, spFlags: DISPFlagDefinition | DISPFlagOptimized, unit: !0)
!6 = !DISubroutineType(types: !7)
!7 = !{}
!8 = !DILocation(line: 12, column: 4, scope: !5)
!9 = !DILocation(line: 2, column: 15, scope: !10, inlinedAt: !11)
!10 = distinct !DISubprogram(name: "add_one", scope: !3, file: !3, line: 1, type: !6, scopeLine: 1, spFlags: DISPFlagDefinition | DISPFlagOptimized, unit: !2)
!11 = distinct !DILocation(line: 12, column: 35, scope: !5)
!12 = !DILocation(line: 3, column: 12, scope: !10, inlinedAt: !11)

; ABORT: Offset being queried before it's been computed
; CHECK: !DICompileUnit({{.*}}producer: "clang"{{.*}}emissionKind: LineTablesOnly
; CHECK-NOT: DebugDirectivesOnly
