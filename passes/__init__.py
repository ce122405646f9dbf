"""LLVM IR passes of triton-raw-ext, one per module, run with llvmlite (LLVM 22.1).

Each module holds its pass function and declares how ``triton-raw-opt`` runs it
(:class:`~triton_raw_ext.passes.tool_pass.ToolPass`); ``TOOL_PASSES`` lists those declarations in the
order the tool names them.
"""

from .abi_wrappers import ABI_WRAPPERS_PASS, abi_wrappers
from .extract_needed import EXTRACT_NEEDED_PASS, extract_needed
from .link_library import LINK_LIBRARY_PASS, link_library
from .pin_device_transport import PIN_DEVICE_TRANSPORT_PASS, pin_device_transport
from .triton_compat import TRITON_COMPAT_PASS, triton_compat
from .unique_symbols import UNIQUE_SYMBOLS_PASS, unique_symbols

TOOL_PASSES = (ABI_WRAPPERS_PASS, UNIQUE_SYMBOLS_PASS, EXTRACT_NEEDED_PASS, LINK_LIBRARY_PASS,
               PIN_DEVICE_TRANSPORT_PASS, TRITON_COMPAT_PASS)

__all__ = [
    "TOOL_PASSES", "abi_wrappers", "extract_needed", "link_library", "pin_device_transport", "triton_compat",
    "unique_symbols",
]
