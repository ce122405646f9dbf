"""triton-raw-ext: raw CUDA device functions (and NVSHMEM) inside stock Triton kernels (3.6-3.9).

``from triton_raw_ext import dialect`` registers functions; ``import triton_raw_ext.language as raw``
gives ``raw.call``; ``triton_raw_ext.preload`` compiles and loads a kernel ahead of its launches.
Importing the package installs the backend hook (see :mod:`.backend_hook`).
"""

try:
    import llvmlite as _llvmlite  # noqa: F401
    import triton as _triton  # noqa: F401
except ImportError as _missing:  # name the fix instead of failing deep inside an import
    raise ImportError(
        f"triton-raw-ext needs a triton 3.6-3.9 wheel and llvmlite >= 0.50 ({_missing}); "
        "install them with `pip install 'triton>=3.6,<3.10' 'llvmlite>=0.50'`"
    ) from _missing

from .triton_version import unsupported_reason as _unsupported_reason  # noqa: E402

if _unsupported_reason() is not None:
    raise ImportError(_unsupported_reason())

from .backend_hook import install as _install_backend_hook  # noqa: E402
from .dialect import RawFunction, dialect  # noqa: E402
from .errors import RawCompileError, RawRuntimeError  # noqa: E402
from .kernel_loading import preload  # noqa: E402
from .knobs import knobs  # noqa: E402
from .version import __version__  # noqa: E402

_install_backend_hook()

__all__ = ["RawCompileError", "RawFunction", "RawRuntimeError", "__version__", "dialect", "knobs", "preload"]
