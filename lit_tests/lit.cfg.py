"""lit configuration for triton-raw-ext's IR pass tests: ``lit -v lit_tests`` from the repo root.

Each test is a `.ll` or `.cu` file whose RUN lines call ``triton-raw-opt`` and pipe its output into
``FileCheck`` (the pip ``filecheck`` package). Files under ``Inputs/`` folders are not tests: they
are the extra inputs RUN lines refer to (``%S/Inputs/...``). Features: ``triton-<major>.<minor>``
for the installed Triton, and ``legacy-llvm`` where that Triton's LLVM is the 22.0 pre-release
(3.6) that the ``triton-compat`` pass has more to do for.
"""

# ruff: noqa: F821 -- lit defines `config` and `lit_config` before it executes this file.

import os
import shutil
from importlib.metadata import version

import lit.formats

config.name = "triton-raw-ext"
config.test_format = lit.formats.ShTest()
config.suffixes = [".ll", ".cu"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)


def _tool(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        lit_config.fatal(f"{name} not found on PATH; {hint}")
    return path


_triton = tuple(int(x) for x in version("triton").split(".")[:2])
config.available_features.add(f"triton-{_triton[0]}.{_triton[1]}")
if _triton < (3, 7):
    config.available_features.add("legacy-llvm")

config.substitutions.append(("triton-raw-opt", _tool("triton-raw-opt", "`pip install -e .` in the repo")))
config.substitutions.append(("FileCheck", _tool("filecheck", "run `pip install filecheck`")))
for var in ("PATH", "HOME", "CUDA_HOME", "CUDA_PATH", "TRITON_RAW_CLANG", "TRITON_HOME", "TRITON_CACHE_DIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
