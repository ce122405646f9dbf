; pin-device-transport: the load of NVSHMEM's selected device transport (its TBAA access type names
; it) becomes PROXY (0) after a checked read; other loads, even of the same state, stay as they are.
; RUN: triton-raw-opt %s --passes=pin-device-transport 2>/dev/null | FileCheck %s
; RUN: triton-raw-opt %s --passes=pin-device-transport 2>&1 >/dev/null | FileCheck %s --check-prefix=REPORT
; RUN: triton-raw-opt %s --passes=pin-device-transport,triton-compat --verify-triton >/dev/null
; RUN: not triton-raw-opt %s --passes=pin-device-transport,unique-symbols --prefix=p_ 2>&1 \
; RUN:   | FileCheck %s --check-prefix=ORDER

target triple = "nvptx64-nvidia-cuda"

%struct.state = type { i32, i32 }
@nvshmemi_device_state_d = addrspace(4) externally_initialized constant %struct.state zeroinitializer

declare void @ibgda_put(ptr, i32)
declare void @proxy_put(ptr, i32)

; CHECK-LABEL: define void @transfer(
; CHECK: %[[SEEN:.*]] = load i32, ptr getelementptr inbounds nuw (i8, ptr addrspacecast (ptr addrspace(4) @nvshmemi_device_state_d to ptr), i64 4)
; CHECK-NEXT: call void @triton_raw.require_proxy_transport(i32 %[[SEEN]])
; CHECK-NEXT: %[[SEL:.*]] = add i32 0, 0
; CHECK-NEXT: switch i32 %[[SEL]]
; CHECK: %npes = load i32, ptr addrspacecast (ptr addrspace(4) @nvshmemi_device_state_d to ptr), align 4, !tbaa
define void @transfer(ptr %dst, i32 %v) {
  %sel = load i32, ptr getelementptr inbounds nuw (i8, ptr addrspacecast (ptr addrspace(4) @nvshmemi_device_state_d to ptr), i64 4), align 4, !tbaa !5
  switch i32 %sel, label %proxy [
    i32 1, label %ibgda
  ]
ibgda:
  call void @ibgda_put(ptr %dst, i32 %v)
  ret void
proxy:
  %npes = load i32, ptr addrspacecast (ptr addrspace(4) @nvshmemi_device_state_d to ptr), align 4, !tbaa !6
  %w = add i32 %v, %npes
  call void @proxy_put(ptr %dst, i32 %w)
  ret void
}

; The check prints the transport seen and traps unless it is the proxy (0).
; CHECK-LABEL: define internal void @triton_raw.require_proxy_transport(i32 %selected)
; CHECK: icmp eq i32 %selected, 0
; CHECK: call i32 @vprintf(ptr @triton_raw.require_proxy_transport.message
; CHECK: call void @llvm.trap()
; CHECK-DAG: declare i32 @vprintf(ptr, ptr)
; CHECK-DAG: declare void @llvm.trap()

; REPORT: triton-raw-opt: pin-device-transport: pinned 1 device transport load to the proxy
; ORDER: error: pin-device-transport works on text: name it after every module pass in --passes (here before unique-symbols)

!0 = !{!"omnipotent char", !1, i64 0}
!1 = !{!"Simple C++ TBAA"}
!2 = !{!"int", !0, i64 0}
!3 = !{!"_ZTS36nvshmemi_selected_device_transport_t", !0, i64 0}
!4 = !{!"_ZTS13state", !2, i64 0, !3, i64 4}
!5 = !{!4, !3, i64 4}
!6 = !{!4, !2, i64 0}
