; abi-wrappers: every exported function gets @<name>__triton with Triton's ABI types.
; RUN: triton-raw-opt %s --passes=abi-wrappers 2>/dev/null | FileCheck %s
; RUN: triton-raw-opt %s --passes=abi-wrappers 2>&1 >/dev/null | FileCheck %s --check-prefix=REPORT

target datalayout = "e-p3:32:32-p4:32:32-p5:32:32-p6:32:32-p7:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

%struct.__half = type { i16 }
%struct.__nv_bfloat16.12 = type { i16 }

define float @add_one(float %x) #0 {
  %r = fadd float %x, 1.0
  ret float %r
}

define void @store(ptr addrspace(1) %p, ptr %q, i1 zeroext %flag) #1 {
  %v = load i32, ptr %q
  %s = select i1 %flag, i32 %v, i32 0
  store i32 %s, ptr addrspace(1) %p
  ret void
}

define void @fill(ptr addrspace(3) %buf, float %v) #2 {
  store float %v, ptr addrspace(3) %buf
  ret void
}

define %struct.__half @hneg(ptr byval(%struct.__half) align 2 %x) #2 {
  %b = load i16, ptr %x
  %n = xor i16 %b, -32768
  %r = insertvalue %struct.__half poison, i16 %n, 0
  ret %struct.__half %r
}

; LLVM adds .<n> to a struct name its context already holds (a process that parsed another source).
define %struct.__nv_bfloat16.12 @bfneg(ptr byval(%struct.__nv_bfloat16.12) align 2 %x) #2 {
  %b = load i16, ptr %x
  %n = xor i16 %b, -32768
  %r = insertvalue %struct.__nv_bfloat16.12 poison, i16 %n, 0
  ret %struct.__nv_bfloat16.12 %r
}

define i32 @slow(i32 %x) #3 {
  ret i32 %x
}

define i32 @_Z6helperi(i32 %x) #0 {
  ret i32 %x
}

define <2 x float> @pair(float %x) #0 {
  %a = insertelement <2 x float> poison, float %x, i32 0
  ret <2 x float> %a
}

define float @first(<2 x float> %v) #0 {
  %a = extractelement <2 x float> %v, i32 0
  ret float %a
}

attributes #0 = { nounwind memory(none) }
attributes #1 = { convergent nounwind }
attributes #2 = { nounwind memory(argmem: read) }
attributes #3 = { noinline nounwind }

; Every function not marked noinline becomes alwaysinline, so Triton's O3 inlines the raw code.
; CHECK:       define float @add_one(float %x) [[SRC:#[0-9]+]]
; CHECK:       define i32 @slow(i32 %x) [[NOINL:#[0-9]+]]

; Pure scalar function: same types, a plain call.
; CHECK-LABEL: define float @add_one__triton(float %p0)
; CHECK-SAME:  [[PURE:#[0-9]+]]
; CHECK-NEXT:  entry:
; CHECK-NEXT:    %r = call float @add_one(float %p0)
; CHECK-NEXT:    ret float %r

; Generic and global pointers cross as i64 and are turned back with inttoptr; void returns i32 0.
; CHECK-LABEL: define i32 @store__triton(i64 %p0, i64 %p1, i1 %p2)
; CHECK-SAME:  [[CONV:#[0-9]+]]
; CHECK:         %a0 = inttoptr i64 %p0 to ptr addrspace(1)
; CHECK:         %a1 = inttoptr i64 %p1 to ptr
; CHECK:         call void @store(ptr addrspace(1) %a0, ptr %a1, i1 %p2)
; CHECK-NEXT:    ret i32 0

; The i64 is a generic address: a shared-memory pointer is made from it with addrspacecast.
; CHECK-LABEL: define i32 @fill__triton(i64 %p0, float %p1)
; CHECK-NEXT:  entry:
; CHECK-NEXT:    %a0.gen = inttoptr i64 %p0 to ptr
; CHECK-NEXT:    %a0 = addrspacecast ptr %a0.gen to ptr addrspace(3)
; CHECK-NEXT:    call void @fill(ptr addrspace(3) %a0, float %p1)

; __half passed byval: the wrapper takes half, builds the struct in an alloca, returns half.
; CHECK-LABEL: define half @hneg__triton(half %p0)
; CHECK:         %a0 = alloca %struct.__half, align 2
; CHECK:         %a0.bits = bitcast half %p0 to i16
; CHECK:         store %struct.__half %a0.val, ptr %a0, align 2
; CHECK:         %r = call %struct.__half @hneg(ptr byval(%struct.__half) align 2 %a0)
; CHECK:         %r.bits = extractvalue %struct.__half %r, 0
; CHECK:         %r.val = bitcast i16 %r.bits to half
; CHECK-NEXT:    ret half %r.val

; The same for __nv_bfloat16 under a renamed struct type.
; CHECK-LABEL: define bfloat @bfneg__triton(bfloat %p0)
; CHECK:         %a0.bits = bitcast bfloat %p0 to i16
; CHECK:         %r.val = bitcast i16 %r.bits to bfloat

; noinline in the source is respected on the function; its wrapper is still alwaysinline.
; CHECK-LABEL: define i32 @slow__triton(i32 %p0)

; C++ functions are exported under their mangled names.
; CHECK-LABEL: define i32 @_Z6helperi__triton(i32 %p0)

; Unsupported types get no wrapper.
; CHECK-NOT:   @pair__triton
; CHECK-NOT:   @first__triton

; Wrappers are alwaysinline (and convergent when the callee is); sources keep their attributes.
; CHECK-DAG:   attributes [[PURE]] = { alwaysinline nounwind }
; CHECK-DAG:   attributes [[CONV]] = { alwaysinline convergent nounwind }
; CHECK-DAG:   attributes [[SRC]] = { alwaysinline nounwind memory(none) }
; CHECK-DAG:   attributes [[NOINL]] = { noinline nounwind }

; REPORT-DAG: abi-wrappers: wrapped add_one as add_one__triton
; REPORT-DAG: abi-wrappers: wrapped store as store__triton
; REPORT-DAG: abi-wrappers: wrapped fill as fill__triton
; REPORT-DAG: abi-wrappers: wrapped hneg as hneg__triton
; REPORT-DAG: abi-wrappers: wrapped bfneg as bfneg__triton
; REPORT-DAG: abi-wrappers: wrapped _Z6helperi as _Z6helperi__triton
; REPORT-DAG: abi-wrappers: cannot wrap pair: it returns IR type <2 x float>, which Triton cannot receive
; REPORT-DAG: abi-wrappers: cannot wrap first: parameter 0 has IR type <2 x float>, which Triton cannot pass
