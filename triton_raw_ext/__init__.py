"""triton-raw-ext: raw CUDA device functions (and NVSHMEM) inside stock Triton 3.6 kernels.

``from triton_raw_ext import dialect`` registers functions; ``import triton_raw_ext.language as raw``
gives ``raw.call``. Importing the package installs the backend hook (see :mod:`.backend_hook`).
"""

from .backend_hook import install as _install_backend_hook
from .dialect import RawFunction, dialect
from .errors import RawCompileError, RawRuntimeError
from .knobs import knobs
from .version import __version__

_install_backend_hook()

__all__ = ["RawCompileError", "RawFunction", "RawRuntimeError", "__version__", "dialect", "knobs"]
