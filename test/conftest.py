"""Test setup: private Triton and plugin caches per session, GPU detection, AOT helper."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

_SESSION_DIR = Path(tempfile.mkdtemp(prefix="triton-raw-tests-"))
os.environ.setdefault("TRITON_CACHE_DIR", str(_SESSION_DIR / "triton"))
os.environ.setdefault("TRITON_RAW_CACHE_DIR", str(_SESSION_DIR / "raw"))

KERNELS = Path(__file__).parent / "kernels"
SM90 = None  # set lazily: importing triton here would read the cache env above too early


def has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def has_nvshmem() -> bool:
    from triton_raw_ext.nvshmem_install import find_nvshmem

    return find_nvshmem(required=False) is not None


requires_gpu = pytest.mark.skipif(not has_gpu(), reason="needs a CUDA GPU (none visible)")
requires_nvshmem = pytest.mark.skipif(not has_nvshmem(), reason="needs NVSHMEM (pip install nvidia-nvshmem-cu13)")


def aot(fn, signature: dict[str, str], constexprs: dict[str, object] | None = None, **options):
    """Compile ``fn`` ahead of time for sm_90 (no GPU needed) and return Triton's CompiledKernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(fn, signature=signature, constexprs=constexprs or {})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options or None)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_SESSION_DIR, ignore_errors=True)


TUTORIALS = Path(__file__).resolve().parents[1] / "tutorials"


def load_tutorial_aot(folder: str, module: str = "aot"):
    """Import ``tutorials/<folder>/<module>.py`` under a name of its own.

    Every tutorial has an ``aot.py`` and a ``benchmark.py``: imported by their plain names, the
    first tutorial's would shadow the others'.
    """
    import importlib.util
    import sys

    path = TUTORIALS / folder / f"{module}.py"
    name = f"tutorial_{module}_{folder.replace('-', '_')}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
