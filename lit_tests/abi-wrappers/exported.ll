; abi-wrappers, which functions are exported: external and weak_odr (an explicit template
; instantiation) definitions, C or C++ names; not internal (static, anonymous namespace),
; linkonce_odr (inline, implicit instantiation) or private ones, kernels, or __ names.
; RUN: triton-raw-opt %s --passes=abi-wrappers 2>/dev/null | FileCheck %s
; RUN: triton-raw-opt %s --passes=abi-wrappers 2>&1 >/dev/null | FileCheck %s --check-prefix=REPORT

target triple = "nvptx64-nvidia-cuda"

$_Z5scaleIfET_S0_S0_ = comdat any
$_Z5halvef = comdat any

define float @add_one(float %x) #0 {
  %r = fadd float %x, 1.0
  ret float %r
}

define float @_Z9VectorAddff(float %a, float %b) #0 {
  %r = fadd float %a, %b
  ret float %r
}

define weak_odr float @_Z5scaleIfET_S0_S0_(float %x, float %a) #1 comdat {
  %r = fmul float %x, %a
  ret float %r
}

define linkonce_odr float @_Z5halvef(float %x) #1 comdat {
  %r = fmul float %x, 0.5
  ret float %r
}

define internal float @_ZL5twicef(float %x) #0 {
  %r = fmul float %x, 2.0
  ret float %r
}

define internal float @_ZN12_GLOBAL__N_16thriceEf(float %x) #0 {
  %r = fmul float %x, 3.0
  ret float %r
}

define private float @hidden(float %x) #0 {
  ret float %x
}

define ptx_kernel void @_Z6kernelPf(ptr %p) #1 {
  ret void
}

define float @__reserved(float %x) #0 {
  ret float %x
}

attributes #0 = { nounwind memory(none) }
attributes #1 = { nounwind }

; A weak_odr instantiation becomes external, and its inferred memory effects make it pure.
; CHECK:       define float @_Z5scaleIfET_S0_S0_(float %x, float %a) [[SCALE:#[0-9]+]] comdat
; CHECK:       define linkonce_odr float @_Z5halvef(float %x)

; CHECK-LABEL: define float @add_one__triton(float %p0)
; CHECK-LABEL: define float @_Z9VectorAddff__triton(float %p0, float %p1)
; CHECK-LABEL: define float @_Z5scaleIfET_S0_S0___triton(float %p0, float %p1)
; CHECK-NOT:   @_Z5halvef__triton
; CHECK-NOT:   @_ZL5twicef__triton
; CHECK-NOT:   @_ZN12_GLOBAL__N_16thriceEf__triton
; CHECK-NOT:   @hidden__triton
; CHECK-NOT:   @_Z6kernelPf__triton
; CHECK-NOT:   @__reserved__triton
; CHECK:       attributes [[SCALE]] = { alwaysinline {{.*}}memory(none)

; REPORT:      abi-wrappers: wrapped add_one as add_one__triton
; REPORT-NEXT: abi-wrappers: wrapped _Z9VectorAddff as _Z9VectorAddff__triton
; REPORT-NEXT: abi-wrappers: wrapped _Z5scaleIfET_S0_S0_ as _Z5scaleIfET_S0_S0___triton
; REPORT-NOT:  wrapped
