"""Every bad input gives one clear error that names the cause and the fix."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import triton
import triton.language as tl
from conftest import EXAMPLE_KERNELS, KERNELS, aot, aot_error, child_env, requires_nvshmem

import triton_raw_ext.language as raw
from triton_raw_ext import RawCompileError, dialect, knobs, nvshmem_install
from triton_raw_ext.toolchain import find_clang, find_llvm_link, find_nvlink

SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": "constexpr"}


def _compile_error(kernel, signature=SIG, constexprs=None) -> str:
    """Compile ``kernel`` and return the text of the error it must raise."""
    return aot_error(kernel, signature, constexprs or {"BLOCK": 128})


@pytest.fixture
def fresh_clang():
    yield
    knobs.clang = None


def _copy_kernel_dir(tmp_path: Path) -> Path:
    dst = tmp_path / "kernels"
    shutil.copytree(KERNELS, dst, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    return dst


def test_clang_missing(fresh_clang):
    knobs.clang = "/nonexistent/clang-22"
    with pytest.raises(RawCompileError, match=r"TRITON_RAW_CLANG=/nonexistent/clang-22 does not run.*apt-get install"):
        find_clang()


def test_clang_too_old(fresh_clang, tmp_path):
    fake = tmp_path / "clang"
    fake.write_text("#!/bin/sh\necho 'Debian clang version 14.0.6'\n")
    fake.chmod(0o755)
    knobs.clang = str(fake)
    with pytest.raises(RawCompileError, match=r"is clang 14; clang >= 20 is needed.*clang-22"):
        find_clang()


@pytest.fixture
def fresh_llvm_link():
    yield
    knobs.llvm_link = None


def test_llvm_link_of_another_llvm_is_refused(fresh_llvm_link, tmp_path):
    fake = tmp_path / "llvm-link"
    fake.write_text("#!/bin/sh\necho 'LLVM (http://llvm.org/):'\necho '  LLVM version 14.0.6'\n")
    fake.chmod(0o755)
    knobs.llvm_link = str(fake)
    with pytest.raises(RawCompileError, match=r"TRITON_RAW_LLVM_LINK=.* is LLVM 14.0.6; install LLVM \d+'s llvm-link"):
        find_llvm_link()
    knobs.llvm_link = "/nonexistent/llvm-link"
    with pytest.raises(RawCompileError, match=r"/nonexistent/llvm-link does not run as llvm-link.*apt-get"):
        find_llvm_link()


@pytest.fixture
def fresh_nvlink():
    yield
    knobs.nvlink = None


def test_nvlink_setting_that_does_not_run_names_the_fix(fresh_nvlink):
    knobs.nvlink = "/nonexistent/nvlink"
    with pytest.raises(RawCompileError, match=r"TRITON_RAW_NVLINK=/nonexistent/nvlink does not run as nvlink.*CUDA"):
        find_nvlink()


def test_nvlink_older_than_triton_ptxas_is_not_used(fresh_nvlink, tmp_path):
    """An nvlink cannot read objects of a newer ptxas: collectives are then inlined, as without one."""
    from triton_raw_ext.toolchain import usable_nvlink

    fake = tmp_path / "nvlink"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 11.8, V11.8.89'\n")
    fake.chmod(0o755)
    knobs.nvlink = str(fake)
    assert find_nvlink().version == (11, 8)
    assert usable_nvlink(90) is None


def test_clang_missing_reaches_the_kernel_compile(fresh_clang):
    @dialect(name="cuda", file=str(EXAMPLE_KERNELS / "add-device.cu"))
    def add_one(x): ...

    @triton.jit
    def kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, add_one(tl.load(x_ptr + offs)))

    knobs.clang = "/nonexistent/clang-22"
    assert "apt-get install clang-22" in _compile_error(kernel)


def test_syntax_error_shows_clang_diagnostics():
    @dialect(name="cuda", file="kernels/bad-syntax-device.cu")
    def broken(x): ...

    @triton.jit
    def kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, broken(tl.load(x_ptr + offs)))

    text = _compile_error(kernel)
    assert "clang failed to compile" in text
    assert "bad-syntax-device.cu:2:" in text and "expected expression" in text


def test_function_not_found_lists_what_exists():
    @dialect(name="cuda", file=str(EXAMPLE_KERNELS / "add-device.cu"), extern_func_name="add_two")
    def add_two(x): ...

    @triton.jit
    def kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, raw.call(add_two, [tl.load(x_ptr + offs)]))

    text = _compile_error(kernel)
    assert "function 'add_two' not found" in text and "it defines: add_one, add_one_i32" in text


def test_wrong_arity():
    @dialect(name="cuda", file=str(EXAMPLE_KERNELS / "add-device.cu"))
    def add_one(x): ...

    @triton.jit
    def kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        tl.store(y_ptr + offs, raw.call(add_one, [x, x]))

    assert "add_one(float x) takes 1 argument, got 2" in _compile_error(kernel)


def test_wrong_type_names_function_parameter_and_both_types():
    @dialect(name="cuda", file=str(EXAMPLE_KERNELS / "add-device.cu"))
    def add_one(x): ...

    @triton.jit
    def kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, add_one(tl.load(x_ptr + offs)))

    text = _compile_error(kernel, {"x_ptr": "*i32", "y_ptr": "*fp32", "BLOCK": "constexpr"})
    assert "raw function add_one: parameter 'x' (float) expects fp32, got int32" in text


def test_pointer_parameter_rejects_float():
    @dialect(name="cuda", file=str(EXAMPLE_KERNELS / "shift-device.cu"))
    def rotate_block(data, n): ...

    @triton.jit
    def kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
        rotate_block(tl.load(x_ptr), 4)

    assert "parameter 'data' (pointer) got fp32; pass a Triton pointer or an int64 address" in _compile_error(kernel)


def test_unknown_library_and_dialect():
    with pytest.raises(RawCompileError, match=r"unknown library 'mpi'; supported: nvshmem"):
        dialect(name="cuda", file=str(EXAMPLE_KERNELS / "add-device.cu"), library="mpi")
    with pytest.raises(RawCompileError, match=r"unknown dialect 'hip'; supported: cuda"):
        dialect(name="hip", file=str(EXAMPLE_KERNELS / "add-device.cu"))


def test_file_not_found():
    with pytest.raises(RawCompileError, match=r"file 'kernels/nope-device.cu' not found \(looked for .*test/kernels/"):

        @dialect(name="cuda", file="kernels/nope-device.cu")
        def nope(x): ...


def test_nvshmem_use_without_library_declared():
    @dialect(name="cuda", file=str(EXAMPLE_KERNELS / "shmem-device.cu"))
    def my_pe(): ...

    @triton.jit
    def kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
        tl.store(y_ptr, my_pe().to(tl.float32))

    assert 'add library="nvshmem"' in _compile_error(kernel)


def test_call_outside_a_kernel():
    @dialect(name="cuda", file=str(EXAMPLE_KERNELS / "add-device.cu"))
    def add_one(x): ...

    with pytest.raises(RawCompileError, match="can only be called inside a @triton.jit or @gluon.jit function"):
        add_one(1.0)


@pytest.fixture
def no_nvshmem(monkeypatch):
    nvshmem_install._find_cached.cache_clear()
    monkeypatch.setattr(nvshmem_install, "_candidate_roots", lambda: [])
    yield
    nvshmem_install._find_cached.cache_clear()


def test_nvshmem_not_installed(no_nvshmem):
    @dialect(name="cuda", file=str(EXAMPLE_KERNELS / "shmem-device.cu"), library="nvshmem")
    def my_pe(): ...

    @triton.jit
    def kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
        tl.store(y_ptr, my_pe().to(tl.float32))

    assert "pip install nvidia-nvshmem-cu13" in _compile_error(kernel)


@requires_nvshmem
def test_no_bitcode_for_the_arch(tmp_path, monkeypatch):
    real = nvshmem_install.find_nvshmem()
    fake = tmp_path / "nvshmem"
    shutil.copytree(real.include_dir, fake / "include")
    (fake / "lib").mkdir()
    (fake / "lib" / "libnvshmem_device_sm_100.bc").write_bytes(b"BC not really")
    monkeypatch.setenv("NVSHMEM_HOME", str(fake))
    nvshmem_install._find_cached.cache_clear()
    try:
        @dialect(name="cuda", file=str(EXAMPLE_KERNELS / "shmem-device.cu"), library="nvshmem")
        def my_pe(): ...

        @triton.jit
        def kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
            tl.store(y_ptr, my_pe().to(tl.float32))

        text = _compile_error(kernel)
        assert "ships no device bitcode usable for sm_90 (found: libnvshmem_device_sm_100.bc)" in text
    finally:
        monkeypatch.delenv("NVSHMEM_HOME")
        nvshmem_install._find_cached.cache_clear()
    assert os.environ.get("NVSHMEM_HOME") is None


def test_lossless_widening_is_accepted_and_narrowing_is_not():
    @dialect(name="cuda", file=str(EXAMPLE_KERNELS / "types-device.cu"))
    def add_i64(x, y): ...

    @dialect(name="cuda", file=str(EXAMPLE_KERNELS / "types-device.cu"))
    def twice_f16(x): ...

    @triton.jit
    def widen(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)  # int32 into long long: fine
        tl.store(y_ptr + offs, add_i64(x, x).to(tl.float32))

    @triton.jit
    def narrow(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, twice_f16(tl.load(x_ptr + offs)).to(tl.float32))  # fp32 into __half: no

    c = aot(widen, {"x_ptr": "*i32", "y_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 128})
    assert "arith.extsi" in c.asm["ttir"] and c.asm["cubin"][:4] == b"\x7fELF"
    assert "parameter 'x' (__half) expects fp16, got fp32" in _compile_error(narrow)


def test_missing_triton_names_the_fix():
    import subprocess
    import sys

    # -S: no site-packages, so no Triton; the plugin itself comes from the repository root on PYTHONPATH
    out = subprocess.run([sys.executable, "-S", "-c", "import triton_raw_ext"], env=child_env(), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0
    assert "triton-raw-ext needs a triton 3.6-3.9 wheel" in out.stderr
    assert "install it with `pip install 'triton>=3.6,<3.10'`" in out.stderr
