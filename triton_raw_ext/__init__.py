"""triton-raw-ext: raw CUDA device functions (and NVSHMEM) inside stock Triton kernels (3.6-3.9).

``from triton_raw_ext import dialect`` registers functions; ``import triton_raw_ext.language as raw``
gives ``raw.call``; ``triton_raw_ext.preload`` compiles and loads a kernel ahead of its launches.
Importing the package installs the backend hook (see :mod:`.backend_hook`). Without llvmlite the
package still imports, so that ``triton-raw doctor`` can report what is missing; ``dialect`` and
``RawFunction`` then raise ImportError naming the install command.
"""

try:
    import triton as _triton  # noqa: F401
except ImportError as _missing:  # name the fix instead of failing deep inside an import
    raise ImportError(
        f"triton-raw-ext needs a triton 3.6-3.9 wheel ({_missing}); install it with `pip install 'triton>=3.6,<3.10'`"
    ) from _missing

from .triton_version import unsupported_reason as _unsupported_reason  # noqa: E402

if _unsupported_reason() is not None:
    raise ImportError(_unsupported_reason())

from .errors import RawCompileError, RawRuntimeError  # noqa: E402
from .kernel_loading import preload  # noqa: E402
from .knobs import knobs  # noqa: E402
from .toolchain import LLVMLITE_INSTALL_HINT as _LLVMLITE_INSTALL_HINT  # noqa: E402
from .version import __version__  # noqa: E402

try:
    import llvmlite as _llvmlite  # noqa: F401
except ImportError as _missing:
    _LLVMLITE_MISSING: ImportError | None = ImportError(
        f"triton-raw-ext needs llvmlite >= 0.50 to compile raw functions ({_missing}); install it with "
        f"{_LLVMLITE_INSTALL_HINT}"
    )
else:
    _LLVMLITE_MISSING = None
    from .backend_hook import install as _install_backend_hook
    from .dialect import RawFunction, dialect

    _install_backend_hook()


def __getattr__(name: str):
    if name in ("RawFunction", "dialect") and _LLVMLITE_MISSING is not None:
        raise _LLVMLITE_MISSING
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["RawCompileError", "RawFunction", "RawRuntimeError", "__version__", "dialect", "knobs", "preload"]
