"""NVSHMEM's own headers (`<nvshmem.h>`, `<nvshmemx.h>`) in raw `.cu` files, through the precompiled header."""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from conftest import EXAMPLE_KERNELS, KERNELS, aot, assert_nvshmem_linked, assert_raw_inlined, requires_nvshmem
from kernels import nvshmem_header_kernels as hk

from triton_raw_ext import RawCompileError, cu_compiler
from triton_raw_ext.cache import cache_dir
from triton_raw_ext.cu_compiler import CompileSpec, clang_command, compile_raw_library

pytestmark = requires_nvshmem

HEADERS_SOURCE = KERNELS / hk.SOURCE
CALLED = {
    "nvshmem_my_pe", "nvshmem_n_pes", "nvshmem_int_p", "nvshmem_quiet", "nvshmemx_putmem_signal_block",
    "nvshmem_signal_wait_until", "nvshmem_ptr", "nvshmemx_barrier_all_block",
}  # fmt: skip


def _precompiled_headers() -> list[Path]:
    return sorted((cache_dir() / "nvshmem_pch").glob("*/*.pch"))


def _fresh_source(folder: Path, body: str) -> Path:
    """A `.cu` no cache has seen: ``body`` under a unique comment."""
    path = folder / f"fresh-{uuid.uuid4().hex[:12]}-device.cu"
    path.write_text(f"// {uuid.uuid4()}\n{body}")
    return path


def test_kernel_links_nvshmem_called_through_its_headers():
    c = aot(hk.header_ring_kernel, hk.SIGNATURE, {"BLOCK": 128})
    assert_raw_inlined(c)
    assert set(c.metadata.raw_nvshmem) == CALLED
    assert_nvshmem_linked(c)
    assert len(re.findall(r"\.visible \.\w+ .*\bnvshmemi_device_state_d\[", c.asm["ptx"])) == 1


def test_nvshmem_functions_stay_declarations():
    """The raw library defines the source's functions only; NVSHMEM's are left to the kernel's link."""
    lib = hk.ring_shift.library(90)
    text = lib.path.read_text()
    defined = set(re.findall(r"^define [^@\n]*@(\w+)", text, re.MULTILINE))
    assert not {name for name in defined if "nvshmem" in name and not name.startswith("rawext_")}, defined
    declared = set(re.findall(r"^declare [^@\n]*@(nvshmemx?_\w+)\(", text, re.MULTILINE))
    assert declared == CALLED
    assert "nvshmemi_device_state_d" not in text  # NVSHMEM's inline code was not compiled into the source
    assert set(lib.functions) == {"my_pe", "ring_shift", "ring_put_signal", "wait_signal", "next_pe_ptr",
                                  "barrier_all"}  # fmt: skip
    assert lib.pointees == {"next_pe_ptr": "int32"}  # the debug compile reads the headers from the same PCH


def test_precompiled_header_is_built_once_and_shared(tmp_path):
    """A new source with the same clang flags, other include folders and defines, reuses the precompiled
    header; its compile time is printed (``pytest -rP``), not asserted."""
    body = HEADERS_SOURCE.read_text()
    body = body[: body.index("// The whole CTA")]
    compile_raw_library(CompileSpec(_fresh_source(tmp_path, body), library="nvshmem"), uuid.uuid4().hex, 90)
    built = _precompiled_headers()
    assert built
    spec = CompileSpec(_fresh_source(tmp_path, body), include_dirs=(tmp_path,), defines=("RING_TAG=1",),
                       library="nvshmem")  # fmt: skip
    start = time.perf_counter()
    lib = compile_raw_library(spec, uuid.uuid4().hex, 90)
    print(f"a new source including NVSHMEM's headers compiled in {time.perf_counter() - start:.2f} s")
    assert set(lib.functions) == {"my_pe", "ring_shift"}
    assert _precompiled_headers() == built
    assert clang_command(spec, 90, tmp_path / "out.bc").count("-include-pch") == 1


def test_stale_precompiled_header_names_the_fix(tmp_path, monkeypatch):
    """A header changed in place after the precompile (same versions, so the same cache key): clang
    refuses the precompiled header, and the error names the folder to delete."""
    source = _fresh_source(tmp_path, '#include <nvshmem.h>\nextern "C" __device__ void q() { nvshmem_quiet(); }\n')
    spec = CompileSpec(source, library="nvshmem")
    cmd = clang_command(spec, 90, tmp_path / "out.bc")
    pch = Path(cmd[cmd.index("-include-pch") + 1])
    refusal = (f"fatal error: file '/usr/local/cuda/include/cuda.h' has been modified since the precompiled header "
               f"'{pch}' was built: size changed (was 1, now 2)")  # fmt: skip
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", refusal))
    with pytest.raises(RawCompileError, match=f"Delete {re.escape(str(pch.parent))};"):
        cu_compiler.compile_to_module(spec, 90, tmp_path)


def test_headers_reached_through_a_quoted_include(tmp_path):
    (tmp_path / "ring.cuh").write_text("#include <nvshmemx.h>\n")
    source = _fresh_source(tmp_path, '#include "ring.cuh"\nextern "C" __device__ void fin(void) { nvshmem_quiet(); }\n')
    lib = compile_raw_library(CompileSpec(source, library="nvshmem"), uuid.uuid4().hex, 90)
    assert re.search(r"^declare [^@\n]*@nvshmem_quiet\(", lib.path.read_text(), re.MULTILINE)


def test_prototypes_header_needs_no_precompiled_header(tmp_path):
    spec = CompileSpec(EXAMPLE_KERNELS / "shmem-device.cu", library="nvshmem")
    assert "-include-pch" not in clang_command(spec, 90, tmp_path / "out.bc")


def test_headers_without_library_nvshmem_name_the_fix(tmp_path):
    body = '#include <nvshmem.h>\nextern "C" __device__ int pe() { return nvshmem_my_pe(); }\n'
    source = _fresh_source(tmp_path, body)
    with pytest.raises(RawCompileError, match=r'includes NVSHMEM\'s headers .* add library="nvshmem"'):
        clang_command(CompileSpec(source), 90, tmp_path / "out.bc")
