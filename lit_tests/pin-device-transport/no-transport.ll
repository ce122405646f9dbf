; pin-device-transport: IR without NVSHMEM's selected device transport (the unified 3.4 bitcode, any
; raw library) comes back unchanged, and no check function is added.
; RUN: triton-raw-opt %s --passes=pin-device-transport 2>/dev/null | FileCheck %s
; RUN: triton-raw-opt %s --passes=pin-device-transport 2>&1 >/dev/null | FileCheck %s --check-prefix=REPORT

target triple = "nvptx64-nvidia-cuda"

@state = addrspace(4) externally_initialized constant i32 0

; CHECK-LABEL: define i32 @read_state(
; CHECK-NEXT: %v = load i32, ptr addrspacecast (ptr addrspace(4) @state to ptr), align 4, !tbaa
; CHECK-NEXT: ret i32 %v
; CHECK-NOT: require_proxy_transport
define i32 @read_state() {
  %v = load i32, ptr addrspacecast (ptr addrspace(4) @state to ptr), align 4, !tbaa !3
  ret i32 %v
}

; REPORT: triton-raw-opt: pin-device-transport: pinned 0 device transport loads to the proxy

!0 = !{!"omnipotent char", !1, i64 0}
!1 = !{!"Simple C++ TBAA"}
!2 = !{!"int", !0, i64 0}
!3 = !{!2, !2, i64 0}
