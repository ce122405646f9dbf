"""Test setup: private Triton and plugin caches per session, GPU detection, AOT helper."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

_SESSION_DIR = Path(tempfile.mkdtemp(prefix="triton-raw-tests-"))
os.environ.setdefault("TRITON_CACHE_DIR", str(_SESSION_DIR / "triton"))
os.environ.setdefault("TRITON_RAW_CACHE_DIR", str(_SESSION_DIR / "raw"))
# Triton 3.9 warns that its FP-fusion default will change; the tests keep the default of 3.6-3.8.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

KERNELS = Path(__file__).parent / "kernels"
ELF_MAGIC = b"\x7fELF"
# A definition, declaration or call instruction naming a raw function (not a value named %call.i).
RAW_FUNCTION = re.compile(r"^(?:define|declare)\b[^@\n]*@rawext_\w+|(?<![%\w.])call\b[^@\n]*@rawext_\w+", re.MULTILINE)
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


def has_per_sm_nvshmem() -> bool:
    """Whether the NVSHMEM found ships per-SM device bitcode for sm_90 (3.7 and newer), not the unified file."""
    from triton_raw_ext.errors import RawCompileError
    from triton_raw_ext.nvshmem_install import find_nvshmem

    install = find_nvshmem(required=False)
    try:
        return install is not None and install.bitcode_for(90).name.startswith("libnvshmem_device_sm_")
    except RawCompileError:
        return False


requires_gpu = pytest.mark.skipif(not has_gpu(), reason="needs a CUDA GPU (none visible)")
requires_nvshmem = pytest.mark.skipif(not has_nvshmem(), reason="needs NVSHMEM (pip install nvidia-nvshmem-cu13)")
requires_per_sm_nvshmem = pytest.mark.skipif(
    not has_per_sm_nvshmem(),
    reason="needs an NVSHMEM with per-SM device bitcode (`pip install 'nvidia-nvshmem-cu13>=3.7'`, or NVSHMEM_HOME)",
)


def aot(fn, signature: dict[str, str], constexprs: dict[str, object] | None = None, **options):
    """Compile ``fn`` (``@triton.jit`` or ``@gluon.jit``) ahead of time for sm_90 (no GPU needed) and
    return Triton's CompiledKernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.experimental.gluon._runtime import GluonASTSource

    source = GluonASTSource if fn.is_gluon() else ASTSource
    src = source(fn, signature=signature, constexprs=constexprs or {})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options or None)


def assert_raw_inlined(compiled) -> None:
    """No raw function is left defined, declared or called in the kernel's LLVM IR, and the cubin was built."""
    assert not RAW_FUNCTION.findall(compiled.asm["llir"]), "a raw function survived Triton's inliner"
    assert compiled.asm["cubin"][:4] == ELF_MAGIC


@pytest.fixture
def through_llir(monkeypatch, tmp_path):
    """AOT compiles in this test run every stage up to Triton's `llir` (the raw libraries, Triton's
    inlining, the NVSHMEM link) and give empty placeholders for the PTX and the cubin, to check many
    kernels fast. Triton's cache is the test's own folder, so no other test meets a placeholder."""
    from triton import knobs

    from triton_raw_ext.triton_version import stage_hook

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))

    def placeholder_ptx(llir: str, metadata: dict) -> str:
        metadata["name"] = re.search(r"^define ptx_kernel void @(\w+)", llir, re.MULTILINE).group(1)
        return ""

    def add_stages(backend, stages, options, language, capability):
        stages["ptx"] = placeholder_ptx
        stages["cubin"] = lambda src, metadata: b""

    previous = knobs.runtime.add_stages_inspection_hook
    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", stage_hook(add_stages, "through-llir", previous))


def stub_in(folder: Path):
    """A Python stub whose defining file is in ``folder`` (paths in @dialect resolve against it)."""
    namespace: dict = {}
    exec(compile("def f(x): ...\n", str(folder / "stub.py"), "exec"), namespace)
    return namespace["f"]


def aot_error(fn, signature: dict[str, str], constexprs: dict[str, object] | None = None) -> str:
    """Compile ``fn`` as :func:`aot` does and return the text of the error it must raise (and its cause)."""
    with pytest.raises(Exception) as info:  # Triton wraps errors from builtins in CompilationError
        aot(fn, signature, constexprs)
    text = str(info.value)
    if info.value.__cause__ is not None:
        text += "\n" + str(info.value.__cause__)
    return text


def assert_no_spills(ptx: str, tmp_path: Path) -> None:
    """Assemble ``ptx`` with the ptxas Triton uses for sm_90a (``-v``) and require 0 bytes of spill
    stores in every function it reports."""
    import subprocess

    from triton.backends.nvidia.compiler import get_ptxas

    source = tmp_path / "kernel.ptx"
    source.write_text(ptx)
    report = subprocess.run(
        [get_ptxas(90).path, "-v", "-arch=sm_90a", str(source), "-o", str(tmp_path / "kernel.cubin")],
        capture_output=True, text=True, check=True,
    ).stderr  # fmt: skip
    spills = re.findall(r"(\d+) bytes spill stores", report)
    assert spills and all(int(n) == 0 for n in spills), report


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


GPU_SCRIPTS = Path(__file__).resolve().parents[1] / "scripts" / "gpu"
FAKE_SMI = """#!/bin/sh
case "$*" in
  *--list-gpus*) i=0; while [ $i -lt {gpus} ]; do echo "GPU $i: NVIDIA H200 (UUID: GPU-$i)"; i=$((i+1)); done ;;
  *) i=0; while [ $i -lt {gpus} ]; do echo "NVIDIA H200, 580.159.04"; i=$((i+1)); done ;;
esac
"""


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | 0o100)


def fake_gpu_host(tmp_path: Path, script: str, gpus: int, fake_python: str | None = None) -> tuple[Path, Path]:
    """Run ``scripts/gpu/<script>`` on CPU: a copy of it beside the real stacks.sh, results.sh and
    machine.py, a setup.sh that only sources stacks.sh (no install, no clang), and a bin folder holding a
    fake ``nvidia-smi`` that lists ``gpus`` H200s and, if given, ``fake_python`` (formatted with
    ``real``, this interpreter) as ``python3``. Returns (the script's copy, the bin folder to put first
    on PATH)."""
    import sys

    gpu_dir = tmp_path / "repo" / "scripts" / "gpu"
    gpu_dir.mkdir(parents=True)
    shutil.copy(GPU_SCRIPTS / script, gpu_dir)
    for helper in ("stacks.sh", "results.sh", "machine.py"):
        shutil.copy(GPU_SCRIPTS / helper, gpu_dir)
    (gpu_dir / "setup.sh").write_text('set -euo pipefail\nsource "$(dirname "${BASH_SOURCE[0]}")/stacks.sh"\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "nvidia-smi", FAKE_SMI.format(gpus=gpus))
    if fake_python is not None:
        _executable(bin_dir / "python3", fake_python.format(real=sys.executable))
    return gpu_dir / script, bin_dir


def cubin_symbols(cubin: bytes) -> dict[str, bool]:
    """The named symbols of an ELF cubin's symbol tables, each with whether it is defined (its section
    index is not 0). Raises AssertionError unless ``cubin`` is an executable 64-bit ELF."""
    import struct

    assert cubin[:4] == ELF_MAGIC and cubin[4] == 2, "not a 64-bit ELF"
    assert struct.unpack_from("<H", cubin, 0x10)[0] == 2, "not an executable ELF (ET_EXEC): the link did not run"
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    symbols: dict[str, bool] = {}
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        strings = sections[link][4]
        for at in range(offset, offset + size, entsize):
            name_at, _, _, shndx = struct.unpack_from("<IBBH", cubin, at)
            name = cubin[strings + name_at : cubin.index(b"\0", strings + name_at)].decode()
            if name:
                symbols[name] = symbols.get(name, False) or shndx != 0
    return symbols


DRIVER_SYMBOLS = ("__assertfail", "vprintf")  # left undefined by ptxas; the driver provides them at load


def assert_nvshmem_linked(compiled) -> None:
    """The kernel's cubin is executable, defines NVSHMEM's device state and every collective that was linked
    as a precompiled object, and leaves nothing undefined but what the driver provides (its reserved
    shared-memory symbols, ``__assertfail``, ``vprintf``)."""
    symbols = cubin_symbols(compiled.asm["cubin"])
    undefined = [name for name, defined in symbols.items()
                 if not defined and not name.startswith(".nv.reserved") and name not in DRIVER_SYMBOLS]
    assert not undefined, f"unresolved symbols in the cubin: {undefined}"
    assert symbols.get("nvshmemi_device_state_d"), "NVSHMEM's device state must be defined in the cubin"
    objects = compiled.metadata.raw_nvshmem_objects
    assert all(symbols.get(name) for name in objects), f"collectives missing from the cubin: {objects}"
