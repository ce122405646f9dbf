"""``libs=``: a user's own NVPTX device library linked into the kernels that call into it."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import KERNELS, aot, requires_gpu, stub_in

from triton_raw_ext import RawCompileError, dialect
from triton_raw_ext.cu_compiler import CompileSpec, clang_command

USERLIB = KERNELS / "userlib"


def _build_bitcode(source: Path, output: Path) -> None:
    """Compile ``source`` to NVPTX bitcode as a user would (the plugin's own clang command line)."""
    subprocess.run(clang_command(CompileSpec(source), 90, output), check=True, capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def userlib(tmp_path_factory):
    """The kernels module, imported from a copy of test/kernels/userlib with scale-lib.bc built beside it."""
    folder = tmp_path_factory.mktemp("userlib")
    for item in USERLIB.iterdir():
        if item.suffix in (".cu", ".py"):
            shutil.copy(item, folder)
    _build_bitcode(folder / "scale-lib.cu", folder / "scale-lib.bc")
    spec = importlib.util.spec_from_file_location("userlib_kernels", folder / "userlib_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_user_library_is_linked_and_inlined(userlib):
    c = aot(userlib.userlib_kernel, userlib.SIGNATURE, {"BLOCK": 256})
    assert c.asm["cubin"][:4] == b"\x7fELF"
    llir = c.asm["llir"]
    assert not re.search(r"^declare[^\n]*@(lib_|__nv_)", llir, re.MULTILINE), "a library function stayed undefined"
    assert not re.search(r"call[^\n]*@lib_", llir), "the user library was not inlined"
    assert "lib_unused" not in llir  # only what the kernel needs is linked
    assert "ex2.approx" in c.asm["ptx"]  # expf from libdevice, after the user library


def test_editing_the_user_library_recompiles(userlib):
    fn = userlib.scaled_soft_exp
    before = fn.cache_key
    lib = fn.spec.libs[0]
    original = lib.read_bytes()
    try:
        lib.write_bytes(original + b"\n")  # any change of the library's bytes
        assert fn.cache_key != before
    finally:
        lib.write_bytes(original)
    assert fn.cache_key == before


def test_bad_user_library_names_the_file(tmp_path):
    (tmp_path / "f.cu").write_text('extern "C" __device__ float f(float x) { return x; }\n')
    (tmp_path / "notes.txt").write_text("not bitcode")
    stub = stub_in(tmp_path)
    with pytest.raises(RawCompileError, match=r"libs entry .*notes\.txt is not a \.bc or \.ll file"):
        dialect(name="cuda", file="f.cu", libs=["notes.txt"])(stub)
    (tmp_path / "host.ll").write_text('target triple = "x86_64-unknown-linux-gnu"\ndefine i32 @g() {\n  ret i32 0\n}\n')
    fn = dialect(name="cuda", file="f.cu", libs=["host.ll"])(stub)
    with pytest.raises(RawCompileError, match=r"host\.ll targets x86_64-unknown-linux-gnu, not nvptx64"):
        fn.library(90)


@requires_gpu
def test_user_library_runs(userlib):
    import torch

    n = 50_001
    x = torch.randn(n, device="cuda") * 6
    y = torch.empty_like(x)
    userlib.userlib_kernel[((n + 255) // 256,)](x, y, n, BLOCK=256)
    torch.testing.assert_close(y, torch.exp(x.clamp(max=10.0)) * 0.5, rtol=2e-6, atol=1e-6)
