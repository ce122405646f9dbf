"""The plugin's version and a digest of its code."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from pathlib import Path

__version__ = "0.1.0"

PACKAGES = ("triton_raw_ext", "triton_raw_ext.passes", "triton_raw_ext.runtime")
CODE_SUFFIXES = (".py", ".h", ".cuh", ".cu")


def code_files() -> list[tuple[str, Path]]:
    """Every Python module and header of the plugin (its three packages, wherever the install maps them
    from), as (name inside its package, path), in a fixed order; each file once, named by the innermost
    package (a wheel nests passes/ and runtime/ inside the package folder, an editable install does not)."""
    files: dict[Path, str] = {}
    for package in reversed(PACKAGES):
        for folder in importlib.util.find_spec(package).submodule_search_locations:
            for path in Path(folder).rglob("*"):
                if path.suffix in CODE_SUFFIXES and "__pycache__" not in path.parts and path.is_file():
                    files.setdefault(path.resolve(), f"{package}/{path.relative_to(folder).as_posix()}")
    return sorted((name, path) for path, name in files.items())


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 over the plugin and Triton versions and every file of :func:`code_files`.

    Part of every cache key, so that changing any of the plugin's code (or the Triton it prepares IR
    for) invalidates its cached artifacts and the Triton kernels built from them.
    """
    import triton

    h = hashlib.sha256(f"{__version__} triton {triton.__version__}".encode())
    for name, path in code_files():
        h.update(f"{name}\0{path.stat().st_size}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()
