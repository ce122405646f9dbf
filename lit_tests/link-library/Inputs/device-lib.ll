; A device library for link-library.ll (not a test itself): an API function, a helper that must
; stay out of line (its operation chosen by an argument), a state global the host looks up by name,
; and a private table.
target datalayout = "e-p3:32:32-p4:32:32-p5:32:32-p6:32:32-p7:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

@lib_state_d = addrspace(1) externally_initialized global i32 0
@lib_table = addrspace(1) global [4 x i32] [i32 10, i32 20, i32 30, i32 40]

define i32 @lib_get(i32 %i) {
  %p = getelementptr [4 x i32], ptr addrspace(1) @lib_table, i32 0, i32 %i
  %v = load i32, ptr addrspace(1) %p
  %s = load volatile i32, ptr addrspace(1) @lib_state_d
  %r = add i32 %v, %s
  ret i32 %r
}

define void @lib_slow_path(ptr addrspace(1) %out, i32 %op) noinline {
  %set = icmp eq i32 %op, 9
  br i1 %set, label %store, label %increment
store:
  store volatile i32 7, ptr addrspace(1) %out
  ret void
increment:
  %old = load volatile i32, ptr addrspace(1) %out
  %new = add i32 %old, 1
  store volatile i32 %new, ptr addrspace(1) %out
  ret void
}

define void @lib_unused() {
  ret void
}
