"""NVSHMEM's own headers in raw `.cu` files: `<nvshmem.h>` and `<nvshmemx.h>`, read from a precompiled header.

Contract: a source registered with ``library="nvshmem"`` that includes ``<nvshmem.h>`` or
``<nvshmemx.h>`` (itself or through a header it includes with quotes, see
:func:`includes_nvshmem_headers`) is compiled with ``-include-pch`` of
``include/triton_raw/nvshmem_headers.h``, precompiled by :func:`precompiled_header`. That header
makes NVSHMEM's headers declare the device API instead of defining it, so the source's bitcode
keeps NVSHMEM's functions as declarations for the per-kernel NVSHMEM link, exactly as with the
plugin's prototypes header ``triton_raw/nvshmem_device.h``. Reading NVSHMEM's headers costs clang
about 10 s, which the precompiled header pays once per (NVSHMEM installation, clang, CUDA headers,
SM, ``clang_flags``); a compile that uses it takes less than one of a source without NVSHMEM's
headers (the CUDA headers come precompiled too). Precompiled headers live in the plugin's cache
under ``nvshmem_pch/<key>``. Sources that use only the prototypes header never build one.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .cache import digest, get_or_build
from .errors import RawCompileError
from .knobs import run_tool
from .nvshmem_install import find_nvshmem, identity
from .toolchain import find_clang, find_cuda_headers
from .version import code_digest

HEADER = Path(__file__).parent / "include" / "triton_raw" / "nvshmem_headers.h"
PCH_FILE = "nvshmem_headers.pch"
# -fpch-instantiate-templates: the templates NVSHMEM's headers use are instantiated once, in the
# precompiled header, not in every source. -fpch-codegen: what the headers define out of line is
# left to the header's own object (never built) instead of being emitted into each source.
# -fno-pch-timestamp: clang checks the headers' sizes, not their times, so a reinstall of the same
# NVSHMEM or CUDA version keeps the precompiled header valid.
PCH_FLAGS = ("-Xclang", "-emit-pch", "-fpch-instantiate-templates", "-fpch-codegen", "-Xclang", "-fno-pch-timestamp")
_NVSHMEM_INCLUDE = re.compile(rb'^\s*#\s*include\s*[<"]nvshmemx?\.h[>"]', re.MULTILINE)


def includes_nvshmem_headers(files: Iterable[Path]) -> bool:
    """Whether one of ``files`` (a source and the local headers it includes) includes `<nvshmem.h>` or
    `<nvshmemx.h>`."""
    return any(_NVSHMEM_INCLUDE.search(path.read_bytes()) for path in files)


def precompiled_header(options: list[str]) -> Path:
    """NVSHMEM's headers precompiled for the clang command ``options`` (the command line without its
    input and output), built once and cached; raises :class:`RawCompileError` when clang cannot read
    the headers.

    The key is the options (clang, CUDA, NVSHMEM and plugin folders, SM, flags) with the clang
    version, CUDA version, NVSHMEM installation and plugin code.
    """
    key = digest(code_digest(), find_clang().identity, str(find_cuda_headers()), identity(find_nvshmem()), *options)
    return get_or_build("nvshmem_pch", key, (PCH_FILE,), lambda folder: _build(options, folder)) / PCH_FILE


def _build(options: list[str], folder: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{PCH_FILE}.", suffix=".tmp")
    os.close(fd)
    cmd = [*options, *PCH_FLAGS, str(HEADER), "-o", tmp]
    try:
        proc = run_tool("clang", cmd, "precompiling NVSHMEM's headers", RawCompileError)
        if proc.returncode != 0:
            raise RawCompileError(
                f"clang cannot read NVSHMEM {find_nvshmem().version_str}'s headers (<nvshmem.h>, <nvshmemx.h>):\n"
                f"{proc.stderr.strip()}\ncommand: {' '.join(cmd)}\n"
                f"Include the plugin's prototypes, #include <triton_raw/nvshmem_device.h>, instead"
            )
        os.replace(tmp, folder / PCH_FILE)
    finally:
        Path(tmp).unlink(missing_ok=True)
