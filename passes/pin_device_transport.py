"""Pass `pin-device-transport`: NVSHMEM device code for the proxy transport only.

Contract: every ``load i32`` of NVSHMEM's ``selected_device_transport`` (found by its TBAA access
type, ``nvshmemi_selected_device_transport_t``) becomes the constant PROXY (0), after a call to
``@triton_raw.require_proxy_transport`` with the value read: when a running job selected another
device transport (IBGDA, GPUNetIO GDAKI) it prints which and what to set, then traps. Constant
folding then deletes the device-initiated transports' code, which NVSHMEM's per-SM releases put
behind that switch (a single ``nvshmem_int_p`` carries 85 KB of PTX of it, most of a kernel's
ptxas time). Text in, text out; IR without such loads comes back unchanged, with a count of 0.
"""

from __future__ import annotations

import re

from .tool_pass import OptionValues, ToolPass

CHECK = "triton_raw.require_proxy_transport"
_TYPE_NODE = re.compile(r'^(!\d+) = !\{!"_ZTS\d+nvshmemi_selected_device_transport_t"', re.MULTILINE)
_LOAD = re.compile(r"^(\s*)(%[-\w.$]+) = load i32, (ptr[^\n]*?), !tbaa (!\d+)([^\n]*)$", re.MULTILINE)
_MESSAGE = (
    "triton-raw-ext: NVSHMEM selected device transport %d (1: IBGDA, 2: GPUNetIO GDAKI), but this kernel "
    "was compiled for the proxy transport only; set NVSHMEM_IB_ENABLE_IBGDA=1 (or "
    "TRITON_RAW_NVSHMEM_TRANSPORTS=all) where the kernel is compiled\n"
)


def _access_tags(text: str, type_node: str) -> set[str]:
    """Metadata nodes that are TBAA access tags whose access type is ``type_node``."""
    tag = re.compile(rf"^(!\d+) = !\{{!\d+, {re.escape(type_node)}, i64 \d+[^}}]*\}}", re.MULTILINE)
    scalar = re.compile(rf"^(!\d+) = !\{{{re.escape(type_node)}, {re.escape(type_node)}, i64 0[^}}]*\}}", re.MULTILINE)
    return set(tag.findall(text)) | set(scalar.findall(text))


def _check_function(text: str) -> str:
    """The check's definition, with the declarations it needs that ``text`` lacks."""
    message = _MESSAGE.encode()
    escaped = "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}" for b in message)
    lines = [
        f'@{CHECK}.message = internal unnamed_addr constant [{len(message) + 1} x i8] c"{escaped}\\00"',
        f"define internal void @{CHECK}(i32 %selected) alwaysinline {{",
        "  %args = alloca i32, align 4",
        "  %proxy = icmp eq i32 %selected, 0",
        "  br i1 %proxy, label %ok, label %other",
        "other:",
        "  store i32 %selected, ptr %args, align 4",
        f"  %printed = call i32 @vprintf(ptr @{CHECK}.message, ptr %args)",
        "  call void @llvm.trap()",
        "  unreachable",
        "ok:",
        "  ret void",
        "}",
    ]
    if not re.search(r"^declare [^\n]*@vprintf\(", text, re.MULTILINE):
        lines.append("declare i32 @vprintf(ptr, ptr)")
    if not re.search(r"^declare [^\n]*@llvm\.trap\(", text, re.MULTILINE):
        lines.append("declare void @llvm.trap()")
    return "\n".join(lines) + "\n"


def pin_device_transport(text: str) -> tuple[str, int]:
    """Return ``text`` with the transport loads pinned to PROXY, and how many loads were pinned."""
    type_node = _TYPE_NODE.search(text)
    tags = _access_tags(text, type_node.group(1)) if type_node else set()
    count = 0

    def pin(m: re.Match[str]) -> str:
        nonlocal count
        indent, value, pointer, tag, rest = m.groups()
        if tag not in tags:
            return m.group(0)
        count += 1
        seen = f"%{CHECK}.seen{count}"
        return (f"{indent}{seen} = load i32, {pointer}, !tbaa {tag}{rest}\n"
                f"{indent}call void @{CHECK}(i32 {seen})\n"
                f"{indent}{value} = add i32 0, 0")

    text = _LOAD.sub(pin, text) if tags else text
    if count:
        text = text.rstrip("\n") + "\n\n" + _check_function(text)
    return text, count


def _rewrite(text: str, options: OptionValues) -> tuple[str, list[str]]:
    text, pinned = pin_device_transport(text)
    return text, [f"pinned {pinned} device transport load{'s' * (pinned != 1)} to the proxy"]


PIN_DEVICE_TRANSPORT_PASS = ToolPass("pin-device-transport", rewrite_text=_rewrite)
