"""The plugin's version and a digest of the code that shapes compiled artifacts."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

__version__ = "0.1.0"

_PACKAGE = Path(__file__).parent


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 over the plugin and Triton versions, the passes, the compile and call code, the headers.

    Part of every cache key, so that changing the plugin (or the Triton it prepares IR for)
    invalidates its cached artifacts and the Triton kernels built from them.
    """
    import triton

    from triton_raw_ext import passes

    files = sorted(Path(passes.__file__).parent.glob("*.py"))
    files += [_PACKAGE / name for name in ("cu_compiler.py", "debug_types.py", "nvshmem_cut.py", "nvshmem_link.py",
                                          "nvshmem_objects.py", "backend_hook.py", "nvshmem_headers.py",
                                          "cxx_names.py", "language.py", "nvshmem/calls.py",
                                          "nvshmem/device_call.py")]
    files += sorted((_PACKAGE / "include").rglob("*.h"))
    h = hashlib.sha256(f"{__version__} triton {triton.__version__}".encode())
    for path in files:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()
