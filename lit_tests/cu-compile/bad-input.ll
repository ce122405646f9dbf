; Inputs the tool refuses, each with one message and exit status 2 (no traceback).
; RUN: not triton-raw-opt %S/Inputs/broken.cu 2>&1 | FileCheck %s --check-prefix=CLANG
; RUN: not triton-raw-opt %S/Inputs/missing.cu 2>&1 | FileCheck %s --check-prefix=MISSING
; RUN: not triton-raw-opt %S/Inputs/broken.cu.txt 2>&1 | FileCheck %s --check-prefix=SUFFIX
; RUN: not triton-raw-opt %s 2>&1 | FileCheck %s --check-prefix=INVALID
; RUN: not triton-raw-opt %s --passes=abi-wrappers,frobnicate 2>&1 | FileCheck %s --check-prefix=UNKNOWN
; RUN: not triton-raw-opt %S/Inputs/broken.cu 2>&1 | FileCheck %s --check-prefix=NOTRACE
; Usage and input errors exit with status 2 (a failing pass or --verify-triton: 1).
; RUN: sh -c 'triton-raw-opt %S/Inputs/broken.cu 2>/dev/null; test $? -eq 2'
; RUN: sh -c 'triton-raw-opt %s --passes=frobnicate 2>/dev/null; test $? -eq 2'

define i32 @f() {
  ret i64 0
}

; CLANG: triton-raw-opt: error: clang failed to compile {{.*}}broken.cu for sm_90:
; CLANG: error: use of undeclared identifier 'undeclared_name'
; MISSING: triton-raw-opt: error: {{.*}}missing.cu: no such file
; SUFFIX: triton-raw-opt: error: {{.*}}broken.cu.txt: unknown file type .txt; use a .ll, .bc or .cu file
; INVALID: triton-raw-opt: error: {{.*}}bad-input.ll is not valid LLVM IR:
; UNKNOWN: triton-raw-opt: error: unknown pass frobnicate; known passes: abi-wrappers, unique-symbols, extract-needed, link-library, pin-device-transport, triton-compat
; NOTRACE-NOT: Traceback
