"""The compiler front door: inputs that once gave wrong code, a crash or an unclear message.

Each case either works (asserted on the compiled kernel) or raises one ``RawCompileError`` whose
message names the cause and the fix (asserted on the text a user sees).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import triton
import triton.language as tl
from conftest import KERNELS, RAW_FUNCTION, aot, aot_error, child_env, requires_gpu, stub_in

from triton_raw_ext import RawCompileError, dialect

FRONT = "front-door-device.cu"


# ---- where the cache lives ------------------------------------------------------------------------


def test_cache_folder_with_non_ascii_quote_and_backslash(tmp_path):
    """A home folder like /home/jöe (the default cache lives there) compiles: Triton prints the
    library path escaped in its IR, and the plugin reads it back unescaped."""
    root = tmp_path / 'hömé "q" \\ b'
    script = (
        "from conftest import aot\nfrom examples.kernels import raw_kernels as k\n"
        "c = aot(k.elementwise_kernel, {'x_ptr': '*fp32', 'y_ptr': '*fp32', 'n': 'i32', 'BLOCK': 'constexpr'},"
        " {'BLOCK': 256})\nassert c.asm['cubin'][:4] == b'\\x7fELF'\nprint('ok')\n"
    )
    env = child_env(TRITON_RAW_CACHE_DIR=str(root / "raw"), TRITON_CACHE_DIR=str(root / "triton"))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
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


@dialect(name="cuda", file=f"kernels/{FRONT}", extern_func_name="plus_int", clang_flags=["-O0"])
def plus_int_unoptimised(x, y): ...


@triton.jit
def _unoptimised_sum(x_ptr, y_ptr):
    tl.store(y_ptr, plus_int_unoptimised(tl.load(x_ptr), 1))


def test_O0_leaves_clang_unoptimised_and_the_call_inlined():
    """clang's -O0 marks every function optnone noinline; the raw function must still inline into the
    kernel (no call in the PTX), while what clang emits stays unoptimised (the parameters' stack slots)."""
    compiled = aot(_unoptimised_sum, {"x_ptr": "*i32", "y_ptr": "*i32"})
    assert not re.search(r"^\s*call", compiled.asm["ptx"], re.MULTILINE)
    assert not RAW_FUNCTION.findall(compiled.asm["llir"])
    library = plus_int_unoptimised.library(90).path.read_text()
    assert "optnone" not in library and "alloca i32" in library


# ---- call arguments -------------------------------------------------------------------------------


@triton.jit
def _elementwise(x_ptr, y_ptr, fn: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, fn(tl.load(x_ptr + offs)))


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


def test_struct_parameter_by_value_says_how_to_pass_it(tmp_path):
    (tmp_path / "swap.cu").write_text("#include <cuda_fp16.h>\n"
                                      "__device__ __half2 swap(__half2 pair) { return __lowhigh2highlow(pair); }\n")
    swap = dialect(name="cuda", file="swap.cu", extern_func_name="swap")(stub_in(tmp_path))
    message = aot_error(_elementwise, {"x_ptr": "*fp16", "y_ptr": "*fp16", "fn": "constexpr", "BLOCK": "constexpr"},
                        {"fn": swap, "BLOCK": 64})
    assert f"raw function swap(__half2) [_Z4swap7__half2] in {tmp_path / 'swap.cu'} cannot be called from Triton: " \
           "parameter 'pair' is a struct passed by value (%struct.__half2), which Triton cannot pass; take its " \
           "fields as separate parameters (a __half2 as two __half), or a pointer to it" in message


# ---- result types ----------------------------------------------------------------------------------


@dialect(name="cuda", file=f"kernels/{FRONT}")
def twice_unsigned(x): ...


@dialect(name="cuda", file=f"kernels/{FRONT}")
def low_byte(x): ...


@dialect(name="cuda", file=f"kernels/{FRONT}")
def low_half(x): ...


@dialect(name="cuda", file=f"kernels/{FRONT}")
def widen_unsigned(x): ...


@dialect(name="cuda", file=f"kernels/{FRONT}")
def split_unsigned(x): ...


@triton.jit
def _unsigned_to_float(x_ptr, y_ptr):
    doubled = twice_unsigned(tl.load(x_ptr))
    tl.static_assert(doubled.dtype == tl.uint32)
    tl.store(y_ptr, doubled.to(tl.float32))


@triton.jit
def _unsigned_widths(x_ptr, y_ptr):
    x = tl.load(x_ptr)
    tl.static_assert(low_byte(x).dtype == tl.uint8)
    tl.static_assert(low_half(x).dtype == tl.uint16)
    tl.static_assert(widen_unsigned(x).dtype == tl.uint64)  # through a typedef and const
    high, low, tag0, tag1 = split_unsigned(x)
    tl.static_assert(high.dtype == tl.uint32 and low.dtype == tl.int32 and tag0.dtype == tl.uint8)
    tl.store(y_ptr, high.to(tl.float32) + low.to(tl.float32) + tag1.to(tl.float32))


def test_unsigned_result_converts_as_unsigned():
    """The IR has no signedness: the declaration's ``unsigned int`` must reach Triton, or values of
    2**31 and more turn negative when converted."""
    ptx = aot(_unsigned_to_float, {"x_ptr": "*u32", "y_ptr": "*fp32"}).asm["ptx"]
    assert "cvt.rn.f32.u32" in ptx and "cvt.rn.f32.s32" not in ptx


@requires_gpu
def test_unsigned_result_keeps_large_values_on_the_gpu():
    import torch

    x = torch.tensor([1_500_000_000], dtype=torch.int32, device="cuda")  # doubled: 3e9, past int32
    y = torch.zeros(1, dtype=torch.float32, device="cuda")
    _unsigned_to_float[(1,)](x, y)
    assert y.item() == 3e9


def test_unsigned_results_of_every_width_and_struct_fields():
    assert aot(_unsigned_widths, {"x_ptr": "*u32", "y_ptr": "*fp32"}).asm["cubin"][:4] == b"\x7fELF"


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
import plus_kernels  # beside this script

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


RAW_FUNCTION_AS_CONSTEXPR = EDIT_IN_ONE_PROCESS.split("x, y = ")[0] + """
x, y = torch.zeros(64), torch.zeros(64)
print("0f3F800000" in plus_kernels.apply_kernel.warmup(x, y, plus_kernels.plus, BLOCK=64, grid=(1,)).asm["ptx"])
"""
APPLY_KERNEL = """

@triton.jit
def apply_kernel(x_ptr, y_ptr, fn: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, fn(tl.load(x_ptr + offs)))
"""


def test_raw_function_as_constexpr_through_the_jit(tmp_path):
    """A raw function passed as a constexpr argument to a JIT kernel compiles: Triton serialises each new
    specialisation to JSON for the plugin's cache hook, and a raw function is not JSON."""
    (tmp_path / "plus-device.cu").write_text('extern "C" __device__ float plus(float x) { return x + 1.0f; }\n')
    (tmp_path / "plus_kernels.py").write_text(PLUS_KERNELS + APPLY_KERNEL)
    (tmp_path / "run.py").write_text(RAW_FUNCTION_AS_CONSTEXPR)
    env = {**os.environ, "TRITON_RAW_CACHE_DIR": str(tmp_path / "raw"), "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    out = subprocess.run([sys.executable, "run.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[-2] == "True"


ADD_ONE = 'extern "C" __device__ float add_one(float x) { return x + 1.0f; }\n'


def _add_one_in(folder: Path):
    (folder / "add-one.cu").write_text(ADD_ONE)
    return dialect(name="cuda", file="add-one.cu", extern_func_name="add_one")(stub_in(folder))


@pytest.mark.parametrize("name, damage", [
    ("lib.ll", lambda text: text[: len(text) // 2]),  # truncated
    ("signature.json", lambda text: text.replace('"functions"', '"functoins"')),  # garbled, same length
])  # fmt: skip
def test_damaged_cache_entry_is_rebuilt_with_a_warning(tmp_path, monkeypatch, name, damage):
    from triton_raw_ext.cu_compiler import compile_raw_library

    monkeypatch.setenv("TRITON_RAW_CACHE_DIR", str(tmp_path / "raw"))
    fn = _add_one_in(tmp_path)
    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "fn": "constexpr", "BLOCK": "constexpr"}
    aot(_elementwise, signature, {"fn": fn, "BLOCK": 64})
    entry = fn.library(90).path.parent
    good = (entry / name).read_text()
    (entry / name).write_text(damage(good))
    compile_raw_library.cache_clear()  # as in a new process
    with pytest.warns(UserWarning, match=f"rebuilding the damaged cache entry {entry}: {name} does not match its "
                                         f"recorded digest"):
        compiled = aot(_elementwise, signature, {"fn": fn, "BLOCK": 128})  # a new kernel reads the entry
    assert "0f3F800000" in compiled.asm["ptx"] and compiled.asm["cubin"][:4] == b"\x7fELF"
    assert (entry / name).read_text() == good
    assert sorted(json.loads((entry / "digests.json").read_text())) == ["lib.ll", "signature.json"]


def test_full_disk_names_the_cache_folder_and_the_fix(tmp_path, monkeypatch):
    """Every file the cache writes goes to /dev/full, which fails each write with ENOSPC as a full disk
    does; once there is room again the entry is built without complaint."""
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    monkeypatch.setenv("TRITON_RAW_CACHE_DIR", str(tmp_path / "raw"))
    fn = _add_one_in(tmp_path)
    make_temporary = tempfile.mkstemp

    def temporary_on_a_full_disk(*args, **kwargs):
        fd, name = make_temporary(*args, **kwargs)
        os.close(fd)
        return os.open("/dev/full", os.O_WRONLY), name

    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "fn": "constexpr", "BLOCK": "constexpr"}
    with monkeypatch.context() as patch:
        patch.setattr(tempfile, "mkstemp", temporary_on_a_full_disk)
        message = aot_error(_elementwise, signature, {"fn": fn, "BLOCK": 64})
    assert f"cannot write the triton-raw-ext cache in {tmp_path / 'raw' / 'raw_lib'}" in message
    assert "No space left on device; free space there, or set TRITON_RAW_CACHE_DIR " \
           "(triton_raw_ext.knobs.cache_dir) to a writable folder with room" in message
    assert aot(_elementwise, signature, {"fn": fn, "BLOCK": 64}).asm["cubin"][:4] == b"\x7fELF"


def test_cache_folder_that_cannot_be_created(tmp_path, monkeypatch):
    root = Path("/sys/triton-raw-cache")  # sysfs refuses new folders, even to root
    try:
        root.mkdir()
    except OSError:
        pass
    else:
        root.rmdir()
        pytest.skip("/sys accepts new folders here")
    monkeypatch.setenv("TRITON_RAW_CACHE_DIR", str(root))
    with pytest.raises(RawCompileError, match=rf"cannot write the triton-raw-ext cache in {root}: .*; free space "
                                              r"there, or set TRITON_RAW_CACHE_DIR"):
        _add_one_in(tmp_path).library(90)


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


HANGING_PTXAS = """#!/bin/sh
case "$1" in --version) exec {real} --version;; esac
exec sleep 60
"""


def test_hanging_ptxas_on_raw_code_is_stopped(tmp_path, monkeypatch):
    from triton.backends.nvidia.compiler import get_ptxas

    ptxas = tmp_path / "ptxas"
    ptxas.write_text(HANGING_PTXAS.format(real=get_ptxas(90).path))
    ptxas.chmod(0o755)
    monkeypatch.setenv("TRITON_RAW_CACHE_DIR", str(tmp_path / "raw"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    fn = _add_one_in(tmp_path)
    fn.library(90)  # clang's part, before the bound is made short
    monkeypatch.setenv("TRITON_RAW_TOOL_TIMEOUT_S", "2")
    monkeypatch.setenv("TRITON_PTXAS_PATH", str(ptxas))
    monkeypatch.setenv("TRITON_PTXAS_BLACKWELL_PATH", str(ptxas))  # Triton 3.9 assembles sm_90 with this one
    message = aot_error(_elementwise, {"x_ptr": "*fp32", "y_ptr": "*fp32", "fn": "constexpr", "BLOCK": "constexpr"},
                        {"fn": fn, "BLOCK": 64})
    assert "ptxas did not finish within 2 s on a kernel with raw code (it was stopped; raise " \
           "TRITON_RAW_TOOL_TIMEOUT_S if it needs longer)" in message


def test_tool_timeout_must_be_positive(monkeypatch):
    from triton_raw_ext.knobs import tool_timeout_s

    monkeypatch.setenv("TRITON_RAW_TOOL_TIMEOUT_S", "soon")
    with pytest.raises(ValueError, match="TRITON_RAW_TOOL_TIMEOUT_S='soon': give a positive number of seconds"):
        tool_timeout_s()


# ---- triton-raw doctor ----------------------------------------------------------------------------


def test_doctor_without_llvmlite_reports_it_and_checks_the_rest(tmp_path):
    """An llvmlite that fails to import (a folder first on PYTHONPATH whose llvmlite raises ImportError)."""
    hidden = tmp_path / "hide" / "llvmlite"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ImportError("No module named \'llvmlite\'")\n')
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "hide"), "TRITON_RAW_CACHE_DIR": str(tmp_path / "raw")}
    doctor = "import sys; from triton_raw_ext.doctor import main; sys.exit(main(sys.argv[1:]))"
    out = subprocess.run([sys.executable, "-c", doctor, "doctor"], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 1, out.stderr[-3000:]
    report = out.stdout
    assert "llvmlite: MISSING\n  problem: llvmlite cannot be imported (No module named 'llvmlite')\n" \
           "  fix: `pip install 'llvmlite>=0.50'`" in report
    assert "clang: ok" in report and "cuda headers: ok" in report and "plugin cache: ok" in report
    assert "compile path: NOT usable" in report
    use = "from triton_raw_ext import dialect"
    out = subprocess.run([sys.executable, "-c", use], env=env, capture_output=True, text=True, timeout=300)
    assert "triton-raw-ext needs llvmlite >= 0.50 to compile raw functions (No module named 'llvmlite'); " \
           "install it with `pip install 'llvmlite>=0.50'`" in out.stderr


# ---- line information: Nsight Compute's source view shows the .cu lines ---------------------------

LINES = KERNELS / "lines-device.cu"
COMPILE_WITH_EACH_LINE_FLAG = """
import json, os, sys
from conftest import aot
from kernels import line_kernels as k

def ptx_and_cubin_names_cu(kernel):
    asm = aot(kernel, k.SIGNATURE, {"BLOCK": 64}).asm
    return asm["ptx"], sys.argv[2].encode() in asm["cubin"]

out = {flag: ptx_and_cubin_names_cu(kernel) for flag, kernel in k.KERNELS.items()}
os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
out["TRITON_DISABLE_LINE_INFO=1"] = ptx_and_cubin_names_cu(k.default_kernel)
json.dump(out, open(sys.argv[1], "w"))
"""


def _line_of(path: Path, text: str) -> int:
    """The 1-based number of the first line of ``path`` that contains ``text``."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _lines_in_ptx(ptx: str, source: Path) -> list[int]:
    """The line numbers of the ``.loc`` directives into ``source`` (through its ``.file`` entry)."""
    files = [n for n, path in re.findall(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', ptx, re.MULTILINE) if path == str(source)]
    return [int(line) for n in files for line in re.findall(rf"^\s*\.loc\s+{n}\s+(\d+)\s", ptx, re.MULTILINE)]


def test_debug_flags_compile_and_the_ptx_points_into_the_cu(tmp_path):
    """-g, -gline-tables-only, -lineinfo (nvcc's spelling) and no flag compile (the first two once
    aborted the process in LLVM's DWARF writer; run in a child so that a crash fails only this test),
    and the kernel's PTX has a .file for the .cu with .loc lines of the raw function's body, as it has
    for the kernel's Python lines; ptxas keeps them in the cubin's line table, which Nsight Compute
    reads. TRITON_DISABLE_LINE_INFO, Triton's switch, turns them off too."""
    out = subprocess.run([sys.executable, "-c", COMPILE_WITH_EACH_LINE_FLAG, str(tmp_path / "out.json"), LINES.name],
                         cwd=Path(__file__).parent, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    compiled = json.loads((tmp_path / "out.json").read_text())
    body = range(_line_of(LINES, "scale_add(") + 1, _line_of(LINES, "}"))
    for flag in ("(default)", "-g", "-gline-tables-only", "-lineinfo"):
        ptx, cubin_names_cu = compiled[flag]
        lines = _lines_in_ptx(ptx, LINES)
        assert lines and all(line in body or line == 0 for line in lines), (flag, lines)
        assert _lines_in_ptx(ptx, KERNELS / "line_kernels.py"), flag  # and the kernel's Python lines
        assert cubin_names_cu, flag
    ptx, cubin_names_cu = compiled["TRITON_DISABLE_LINE_INFO=1"]
    assert ".loc" not in ptx and not cubin_names_cu


# ---- code ptxas would reject: named by .cu, line and function -------------------------------------

PTXAS_ERRORS = KERNELS / "ptxas-errors-device.cu"


@dialect(name="cuda", file=f"kernels/{PTXAS_ERRORS.name}")
def uses_helper(x): ...


@dialect(name="cuda", file=f"kernels/{PTXAS_ERRORS.name}")
def uses_cxx_helper(x): ...


@dialect(name="cuda", file=f"kernels/{PTXAS_ERRORS.name}")
def bad_asm(x): ...


@dialect(name="cuda", file=f"kernels/{PTXAS_ERRORS.name}")
def twice(x): ...


@triton.jit
def _calls_undefined(x_ptr):
    tl.store(x_ptr, uses_helper(tl.load(x_ptr)))


@triton.jit
def _calls_undefined_cxx(x_ptr):
    tl.store(x_ptr, uses_cxx_helper(tl.load(x_ptr)))


@triton.jit
def _bad_inline_ptx(x_ptr):
    tl.store(x_ptr, bad_asm(tl.load(x_ptr)))


@triton.jit
def _bad_triton_inline_ptx(x_ptr):
    x = tl.inline_asm_elementwise("not.an.instruction; mov.b32 $0, $1;", "=r,r", [tl.load(x_ptr)], dtype=tl.float32,
                                  is_pure=True, pack=1)
    tl.store(x_ptr, twice(x))


def test_undefined_callee_names_the_cu_line_function_and_fix():
    message = aot_error(_calls_undefined, {"x_ptr": "*i32"})
    assert f"raw function uses_helper at {PTXAS_ERRORS}:{_line_of(PTXAS_ERRORS, 'return helper(')} calls helper, " \
           f"which is declared but defined nowhere in the kernel (not in {PTXAS_ERRORS}, its libs=, libdevice nor " \
           f"NVSHMEM); define helper in {PTXAS_ERRORS.name} or a file it includes, or give the device library that " \
           f"defines it with @dialect(libs=[...])" in message
    assert "Internal Triton PTX codegen error" not in message


def test_undefined_cxx_callee_is_named_by_its_signature():
    message = aot_error(_calls_undefined_cxx, {"x_ptr": "*i32"})
    assert f"raw function uses_cxx_helper at {PTXAS_ERRORS}:{_line_of(PTXAS_ERRORS, 'cxx_helper(x)')} calls " \
           "cxx_helper(int) [_Z10cxx_helperi], which is declared but defined nowhere" in message


def test_undefined_callee_without_line_tables_names_the_function(monkeypatch):
    monkeypatch.setenv("TRITON_DISABLE_LINE_INFO", "1")
    message = aot_error(_calls_undefined, {"x_ptr": "*i32"})
    assert f"raw function uses_helper in {PTXAS_ERRORS} calls helper, which is declared but defined nowhere" in message


def test_inline_ptx_that_ptxas_rejects_names_the_cu_line_and_function(capfd):
    message = aot_error(_bad_inline_ptx, {"x_ptr": "*fp32"})
    line = _line_of(PTXAS_ERRORS, "not.an.instruction")
    assert f"raw function bad_asm at {PTXAS_ERRORS}:{line}: ptxas (sm_90a) rejects the PTX it compiles to: " \
           "Unknown modifier '.an'" in message
    assert "PTX line " in message and ": not.an.instruction;" in message
    assert f"fix the PTX of the asm statement at {PTXAS_ERRORS}:{line}" in message
    assert "please share the reproducer" not in capfd.readouterr().out  # Triton's printout of the whole PTX


def test_ptxas_error_in_the_triton_code_stays_tritons(capfd):
    from triton.runtime.errors import PTXASError

    with pytest.raises(PTXASError, match="Internal Triton PTX codegen error"):
        aot(_bad_triton_inline_ptx, {"x_ptr": "*fp32"})
    assert "please share the reproducer" in capfd.readouterr().out
