; abi-wrappers, struct results: the scalar fields, flattened in order, packed low bits first into
; i64 words; @f__triton returns word 0 and @f__triton_w<k> word k. One word means one run of @f.
; RUN: triton-raw-opt %s --passes=abi-wrappers 2>/dev/null | FileCheck %s
; RUN: triton-raw-opt %s --passes=abi-wrappers 2>&1 >/dev/null | FileCheck %s --check-prefix=REPORT

target datalayout = "e-p3:32:32-p4:32:32-p5:32:32-p6:32:32-p7:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

%struct.pair = type { float, i32 }
%struct.__half = type { i16 }
%struct.__half2 = type { %struct.__half, %struct.__half }
%struct.moments = type { float, float, float }
%struct.nested = type { [2 x i16], %struct.__half, ptr }
%union.bits = type { float }
%struct.packed = type <{ i8, i32 }>

define %struct.pair @make_pair(float %a, i32 %b) #0 {
  %s = insertvalue %struct.pair poison, float %a, 0
  %r = insertvalue %struct.pair %s, i32 %b, 1
  ret %struct.pair %r
}

define void @sum_diff(ptr sret(%struct.__half2) align 4 %out, half %a) #1 {
  store half %a, ptr %out
  ret void
}

define %struct.moments @moments(float %a) #0 {
  ret %struct.moments poison
}

define %struct.moments @moments_store(float %a, ptr %p) #1 {
  store float %a, ptr %p
  ret %struct.moments poison
}

define %struct.nested @nested() #0 {
  ret %struct.nested poison
}

define { double, i8 } @literal() #0 {
  ret { double, i8 } poison
}

define %union.bits @as_union(float %a) #0 {
  ret %union.bits poison
}

define %struct.packed @as_packed() #0 {
  ret %struct.packed poison
}

define { i1, i8 } @with_i1() #0 {
  ret { i1, i8 } poison
}

attributes #0 = { nounwind memory(none) }
attributes #1 = { nounwind memory(argmem: write) }

; {float, i32} returned directly: one word, float bits low, the int above them.
; CHECK-LABEL: define i64 @make_pair__triton(float %p0, i32 %p1)
; CHECK-NEXT:  entry:
; CHECK-NEXT:    %r = call %struct.pair @make_pair(float %p0, i32 %p1)
; CHECK-NEXT:    %f0 = extractvalue %struct.pair %r, 0
; CHECK-NEXT:    %f0.bits = bitcast float %f0 to i32
; CHECK-NEXT:    %f0.z = zext i32 %f0.bits to i64
; CHECK-NEXT:    %f1 = extractvalue %struct.pair %r, 1
; CHECK-NEXT:    %f1.z = zext i32 %f1 to i64
; CHECK-NEXT:    %f1.s = shl i64 %f1.z, 32
; CHECK-NEXT:    %f1.w = or i64 %f0.z, %f1.s
; CHECK-NEXT:    ret i64 %f1.w

; __half2 through an sret pointer: the wrapper owns the slot; its two halves are bits 0-15 and 16-31.
; CHECK-LABEL: define i64 @sum_diff__triton(half %p0)
; CHECK-NEXT:  entry:
; CHECK-NEXT:    %ret = alloca %struct.__half2, align 4
; CHECK-NEXT:    call void @sum_diff(ptr sret(%struct.__half2) align 4 %ret, half %p0)
; CHECK-NEXT:    %r = load %struct.__half2, ptr %ret, align 4
; CHECK-NEXT:    %f0 = extractvalue %struct.__half2 %r, 0, 0
; CHECK:         %f1 = extractvalue %struct.__half2 %r, 1, 0
; CHECK:         %f1.s = shl i64 %f1.z, 16
; CHECK:         ret i64 %f1.w

; Three floats need two words: a pure function gets one wrapper per word.
; CHECK-LABEL: define i64 @moments__triton(float %p0)
; CHECK:         %r = call %struct.moments @moments(float %p0)
; CHECK:         %f1.s = shl i64 %f1.z, 32
; CHECK-NOT:     %f2
; CHECK:         ret i64 %f1.w
; CHECK-LABEL: define i64 @moments__triton_w1(float %p0)
; CHECK-NEXT:  entry:
; CHECK-NEXT:    %r = call %struct.moments @moments(float %p0)
; CHECK-NEXT:    %f2 = extractvalue %struct.moments %r, 2
; CHECK-NEXT:    %f2.bits = bitcast float %f2 to i32
; CHECK-NEXT:    %f2.z = zext i32 %f2.bits to i64
; CHECK-NEXT:    ret i64 %f2.z

; Arrays and nested structs are flattened; __half is one field; a pointer is a 64-bit address and
; starts a new word rather than straddle two.
; CHECK-LABEL: define i64 @nested__triton()
; CHECK:         %f0 = extractvalue %struct.nested %r, 0, 0
; CHECK:         %f1 = extractvalue %struct.nested %r, 0, 1
; CHECK:         %f2 = extractvalue %struct.nested %r, 1, 0
; CHECK:         %f2.s = shl i64 %f2.z, 32
; CHECK:         ret i64 %f2.w
; CHECK-LABEL: define i64 @nested__triton_w1()
; CHECK:         %f3 = extractvalue %struct.nested %r, 2
; CHECK-NEXT:    %f3.bits = ptrtoint ptr %f3 to i64
; CHECK-NEXT:    ret i64 %f3.bits

; Literal struct types work like named ones.
; CHECK-LABEL: define i64 @literal__triton()
; CHECK:         %f0.bits = bitcast double %f0 to i64
; CHECK-NEXT:    ret i64 %f0.bits
; CHECK-LABEL: define i64 @literal__triton_w1()
; CHECK:         %f1.z = zext i8 %f1 to i64

; CHECK-NOT:   @moments_store__triton
; CHECK-NOT:   @as_union__triton
; CHECK-NOT:   @as_packed__triton
; CHECK-NOT:   @with_i1__triton

; REPORT-DAG: abi-wrappers: wrapped make_pair as make_pair__triton
; REPORT-DAG: abi-wrappers: wrapped sum_diff as sum_diff__triton
; REPORT-DAG: abi-wrappers: wrapped moments as moments__triton, moments__triton_w1
; REPORT-DAG: abi-wrappers: wrapped nested as nested__triton, nested__triton_w1
; REPORT-DAG: abi-wrappers: cannot wrap moments_store: it returns %struct.moments, whose fields fill 2 64-bit words: each word would run the function again, and it writes memory or is convergent; return at most 64 bits of fields
; REPORT-DAG: abi-wrappers: cannot wrap as_union: it returns %union.bits, a union, whose active member the IR does not say
; REPORT-DAG: abi-wrappers: cannot wrap as_packed: it returns the packed struct %struct.packed, whose padding cannot be told from fields
; REPORT-DAG: abi-wrappers: cannot wrap with_i1: it returns a struct with a field of IR type i1, which Triton cannot receive
