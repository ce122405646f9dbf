"""LLVM IR passes of triton-raw-ext, one per module, run with llvmlite (LLVM 22.1).

``PASSES`` maps each pass's command-line name (as used by ``triton-raw-opt`` and the lit tests)
to its function.
"""

from .abi_wrappers import abi_wrappers
from .extract_needed import extract_needed
from .link_library import link_library
from .pin_device_transport import pin_device_transport
from .triton_compat import triton_compat
from .unique_symbols import unique_symbols

PASSES = {
    "abi-wrappers": abi_wrappers,
    "unique-symbols": unique_symbols,
    "extract-needed": extract_needed,
    "link-library": link_library,
    "pin-device-transport": pin_device_transport,
    "triton-compat": triton_compat,
}

__all__ = [
    "PASSES", "abi_wrappers", "extract_needed", "link_library", "pin_device_transport", "triton_compat",
    "unique_symbols",
]
