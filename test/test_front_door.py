"""The compiler front door: inputs that once gave wrong code, a crash or an unclear message.

Each case either works (asserted on the compiled kernel) or raises one ``RawCompileError`` whose
message names the cause and the fix (asserted on the text a user sees).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton
import triton.language as tl
from conftest import KERNELS, aot, aot_error, stub_in

from triton_raw_ext import RawCompileError, dialect

FRONT = "front-door-device.cu"


# ---- where the cache lives ------------------------------------------------------------------------


def test_cache_folder_with_non_ascii_quote_and_backslash(tmp_path):
    """A home folder like /home/jöe (the default cache lives there) compiles: Triton prints the
    library path escaped in its IR, and the plugin reads it back unescaped."""
    root = tmp_path / 'hömé "q" \\ b'
    script = (
        "from conftest import aot\nfrom kernels import raw_kernels as k\n"
        "c = aot(k.elementwise_kernel, {'x_ptr': '*fp32', 'y_ptr': '*fp32', 'n': 'i32', 'BLOCK': 'constexpr'},"
        " {'BLOCK': 256})\nassert c.asm['cubin'][:4] == b'\\x7fELF'\nprint('ok')\n"
    )
    env = {**os.environ, "TRITON_RAW_CACHE_DIR": str(root / "raw"), "TRITON_CACHE_DIR": str(root / "triton")}
    out = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parent, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


# ---- @dialect arguments ---------------------------------------------------------------------------


def test_numeric_define_value_is_its_text():
    @dialect(name="cuda", file=f"kernels/{FRONT}", defines={"TILE": 128})
    def tile(): ...

    @triton.jit
    def kernel(y_ptr):
        tl.store(y_ptr, tile())

    assert tile.spec.defines == ("TILE=128",)
    assert "128" in aot(kernel, {"y_ptr": "*i32"}).asm["ptx"]


@pytest.mark.parametrize("defines, message", [
    ({"TILE": True}, r"defines=\{'TILE': True\}: a macro value must be a string or a number"),
    ([128], r"defines= takes strings; got 128 \(int\)"),
])  # fmt: skip
def test_bad_define(defines, message):
    with pytest.raises(RawCompileError, match=message):
        dialect(name="cuda", file=f"kernels/{FRONT}", defines=defines)


def test_file_must_be_a_path_string():
    with pytest.raises(RawCompileError, match=r'file= takes the path of the \.cu source as a string .*got 123 \(int\)'):
        dialect(name="cuda", file=123)


def test_file_that_is_a_folder(tmp_path):
    (tmp_path / "src").mkdir()
    with pytest.raises(RawCompileError, match=r"file 'src' is a folder .*; name the \.cu source inside it"):
        dialect(name="cuda", file="src")(stub_in(tmp_path))


@pytest.mark.parametrize("flag, why", [
    ("-E", "preprocesses only"),
    ("--cuda-gpu-arch=sm_80", "is set per kernel target"),
    ("-o", "names the output"),
])  # fmt: skip
def test_clang_flags_the_plugin_sets_itself(flag, why):
    with pytest.raises(RawCompileError, match=f"{flag!r} is not allowed: the plugin's clang command {why}; remove it"):
        dialect(name="cuda", file=f"kernels/{FRONT}", clang_flags=[flag])


def test_clang_flags_given_as_one_string():
    with pytest.raises(RawCompileError, match=r"one flag per list item \(clang_flags=\['-O3', '-ffast-math'\]\)"):
        dialect(name="cuda", file=f"kernels/{FRONT}", clang_flags=["-O3 -ffast-math"])


# ---- call arguments -------------------------------------------------------------------------------


@dialect(name="cuda", file=f"kernels/{FRONT}")
def plus_int(x, y): ...


@dialect(name="cuda", file=f"kernels/{FRONT}")
def plus_short(x, y): ...


@triton.jit
def _int_too_wide(y_ptr):
    tl.store(y_ptr, plus_int(1, 2**40 + 5))


@triton.jit
def _short_too_wide(y_ptr):
    tl.store(y_ptr, plus_short(1, 70000).to(tl.int32))


@triton.jit
def _unsigned_int_fits(y_ptr):
    tl.store(y_ptr, plus_int(1, 4_000_000_000))


def test_python_int_that_does_not_fit_the_parameter():
    message = aot_error(_int_too_wide, {"y_ptr": "*i32"})
    assert "parameter 'y' (int) got 1099511627781, which does not fit in 32 bits" in message
    message = aot_error(_short_too_wide, {"y_ptr": "*i32"})
    assert "parameter 'y' (short) got 70000, which does not fit in 16 bits (-32768..65535)" in message
    assert aot(_unsigned_int_fits, {"y_ptr": "*i32"}).asm["cubin"][:4] == b"\x7fELF"  # an unsigned int's range


@dialect(name="cuda", file=f"kernels/{FRONT}")
def fill_kernel(x): ...


@dialect(name="cuda", file=f"kernels/{FRONT}", extern_func_name="__reserved")
def reserved(x): ...


@triton.jit
def _calls_a_global(x_ptr):
    fill_kernel(x_ptr)


@triton.jit
def _calls_a_reserved_name(x_ptr):
    tl.store(x_ptr, reserved(tl.load(x_ptr)))


def test_global_function_is_refused_not_compiled_to_a_trap():
    message = aot_error(_calls_a_global, {"x_ptr": "*fp32"})
    assert f"raw function fill_kernel in {KERNELS / FRONT} cannot be called from Triton: it is a __global__ " \
           "kernel, which a Triton kernel cannot call; make it a __device__ function" in message


def test_reserved_name_says_why():
    message = aot_error(_calls_a_reserved_name, {"x_ptr": "*fp32"})
    assert "raw function __reserved in" in message and "names starting with __ are reserved" in message


# ---- the kernel cache -----------------------------------------------------------------------------

EDIT_IN_ONE_PROCESS = """
import sys
import torch
from triton.backends.compiler import GPUTarget
from triton.runtime import driver


class Sm90:  # what JIT compiles ask the driver; warmup() compiles without launching
    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0


driver.set_active(Sm90())
sys.path.insert(0, ".")
import plus_kernels

x, y = torch.zeros(64), torch.zeros(64)
ptx = [plus_kernels.plus_kernel.warmup(x, y, BLOCK=64, grid=(1,)).asm["ptx"]]
open("plus-device.cu", "w").write('extern "C" __device__ float plus(float x) { return x + 2.0f; }\\n')
ptx.append(plus_kernels.plus_kernel.warmup(x, y, BLOCK=64, grid=(1,)).asm["ptx"])
ptx.append(plus_kernels.plus_kernel.warmup(x, y, BLOCK=32, grid=(1,)).asm["ptx"])  # a new specialisation
print(" ".join(str(("0f3F800000" in p, "0f40000000" in p)) for p in ptx))
"""
PLUS_KERNELS = """
import triton
import triton.language as tl
from triton_raw_ext import dialect


@dialect(name="cuda", file="plus-device.cu")
def plus(x): ...


@triton.jit
def plus_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, plus(tl.load(x_ptr + offs)))
"""


def test_cu_edit_in_one_process_reaches_the_next_compile(tmp_path):
    """A notebook edits the .cu between two launches of one kernel: the second launch compiles the
    new code (adding 2, not 1), also for a new specialisation, and the disk cache keeps both apart."""
    (tmp_path / "plus-device.cu").write_text('extern "C" __device__ float plus(float x) { return x + 1.0f; }\n')
    (tmp_path / "plus_kernels.py").write_text(PLUS_KERNELS)
    (tmp_path / "run.py").write_text(EDIT_IN_ONE_PROCESS)
    env = {**os.environ, "TRITON_RAW_CACHE_DIR": str(tmp_path / "raw"), "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    out = subprocess.run([sys.executable, "run.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[-2] == "(True, False) (False, True) (False, True)"
    # A later process with the old text gets the old code back from the disk cache, not the new one.
    (tmp_path / "plus-device.cu").write_text('extern "C" __device__ float plus(float x) { return x + 1.0f; }\n')
    out = subprocess.run([sys.executable, "run.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.split("\n")[-2] == "(True, False) (False, True) (False, True)"


# ---- external tools -------------------------------------------------------------------------------

HANGING_CLANG = """#!/bin/sh
case "$1" in --version) echo "clang version 22.1.8"; exit 0;; esac
exec sleep 60
"""


def test_hanging_clang_is_stopped_and_frees_the_cache_entry(tmp_path, monkeypatch):
    from triton_raw_ext import knobs

    clang = tmp_path / "clang"
    clang.write_text(HANGING_CLANG)
    clang.chmod(0o755)
    (tmp_path / "f.cu").write_text('extern "C" __device__ float f(float x) { return x; }\n')
    monkeypatch.setenv("TRITON_RAW_TOOL_TIMEOUT_S", "1")
    monkeypatch.setenv("TRITON_RAW_CACHE_DIR", str(tmp_path / "cache"))
    knobs.clang = str(clang)
    try:
        fn = dialect(name="cuda", file="f.cu")(stub_in(tmp_path))
        for _ in range(2):  # the second try takes the lock the first one held: it was released
            with pytest.raises(RawCompileError, match=r"clang did not finish within 1 s on .*f\.cu .*raise "
                                                      r"TRITON_RAW_TOOL_TIMEOUT_S if it needs longer"):
                fn.library(90)
    finally:
        knobs.clang = None


def test_tool_timeout_must_be_positive(monkeypatch):
    from triton_raw_ext.knobs import tool_timeout_s

    monkeypatch.setenv("TRITON_RAW_TOOL_TIMEOUT_S", "soon")
    with pytest.raises(ValueError, match="TRITON_RAW_TOOL_TIMEOUT_S='soon': give a positive number of seconds"):
        tool_timeout_s()
