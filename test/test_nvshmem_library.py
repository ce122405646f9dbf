"""triton_raw_ext.nvshmem: NVSHMEM's device API from Triton kernels, compiled ahead of time for sm_90.

Every call of the library is compiled in one kernel per family through Triton's `llir` stage, in
its per-program form and, for the untyped calls and a few element types, its elementwise form: the
raw wrappers, Triton's inlining and the NVSHMEM link all run, and nothing of NVSHMEM is left
undefined but the collectives, which NVSHMEM's device bitcode must define. Those kernels leave the
collectives to nvlink's object link, as where nvlink is usable: inlined, every collective of every
element type would take minutes on two cores. The inlined form is compiled for every collective of
one element type. Generating and assembling the inlined NVSHMEM code of every call would take
minutes too; kernels of every point-to-point call of those element types, in both forms, and of a
barrier and a sync of each granularity go through LLVM's NVPTX backend, ptxas and nvlink to cubins,
and the GPU suite (scripts/gpu/nvshmem_library_suite.py) compiles and runs every family.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from conftest import RAW_FUNCTION, aot, aot_error, assert_nvshmem_linked, assert_raw_inlined, has_nvshmem

from triton_raw_ext import RawCompileError, nvshmem_link
from triton_raw_ext.cu_compiler import CompileSpec, compile_raw_library
from triton_raw_ext.nvshmem_install import find_nvshmem
from triton_raw_ext.nvshmem_objects import links_separately
from triton_raw_ext.toolchain import find_llvm_link, usable_nvlink

if not has_nvshmem():
    pytest.skip("needs NVSHMEM (pip install nvidia-nvshmem-cu13)", allow_module_level=True)

from kernels import nvshmem_library_kernels as lk  # noqa: E402 (they read NVSHMEM's headers)

import triton_raw_ext.nvshmem as shm  # noqa: E402
from triton_raw_ext.nvshmem import calls, constants, generate  # noqa: E402

LIBRARY = Path(shm.__file__).parent
# The element types whose calls are also compiled in their elementwise form and assembled in full: a
# 16-bit float (Triton's LLVM refused NVSHMEM's half p) and a 64-bit integer (atomics, waits).
ASSEMBLED_TYPES = ("half", "uint64")


def _nvshmem_defines() -> set[str]:
    """The functions NVSHMEM's sm_90 device bitcode defines (llvm-nm reads the bitcode's symbol table)."""
    tool = find_llvm_link()
    beside = shutil.which("llvm-nm", path=str(Path(tool.path).parent)) if tool else None
    nm = beside or shutil.which(f"llvm-nm-{tool.version[0]}" if tool else "llvm-nm")
    if nm is None:
        pytest.skip("no llvm-nm to read NVSHMEM's symbols (apt-get install llvm-22)")
    out = subprocess.run([nm, "--defined-only", str(find_nvshmem().bitcode_for(90))], capture_output=True,
                         text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def _called(family_calls: list[calls.Call]) -> set[str]:
    """The NVSHMEM functions the wrappers of ``family_calls`` call."""
    return {re.search(r"\bnvshmemx?_\w+", c.invoke).group() if c.invoke else c.symbol for c in family_calls}


def test_generated_sources_are_up_to_date():
    assert generate.main(["--check"]) == 0, "run `python -m triton_raw_ext.nvshmem.generate` and commit the result"


def test_every_call_has_a_python_name_and_wrappers():
    assert len({c.name for c in calls.CALLS}) == len(calls.CALLS)
    for call in calls.CALLS:
        assert getattr(shm, call.name).call is call
        source = (LIBRARY / f"{call.family}.cu").read_text()
        for wrapper in filter(None, (call.elementwise_wrapper, call.program_wrapper)):
            assert re.search(rf"\b{wrapper}\(", source), f"{wrapper} is not in {call.family}.cu"
    assert {"my_pe", "n_pes", "ptr", "putmem_block", "putmem_nbi_warp", "getmem", "int_p", "putmem_signal_block",
            "signal_op", "signal_fetch", "signal_wait_until", "int_wait_until", "longlong_wait_until", "fence",
            "quiet", "barrier_all_block", "sync_all_block", "team_my_pe", "team_n_pes", "barrier", "team_sync",
            "broadcastmem_block", "alltoallmem_block", "fcollectmem_block", "int32_min_reduce_block",
            "bfloat16_sum_reduce_block", "double_prod_reduce_warp", "uint8_xor_reduce", "int_atomic_fetch_add",
            "uint64_atomic_compare_swap", "float_atomic_fetch", "int64_atomic_set"} <= {c.name for c in calls.CALLS}


def test_the_docs_list_every_call():
    """docs/nvshmem.md names each call as `<name>` (thread, warp and block forms under the thread
    form's name), a typed one as `<T>_<name>`."""
    doc = (LIBRARY.parents[1] / "docs" / "nvshmem.md").read_text()
    for call in calls.CALLS:
        name = call.name.removesuffix(calls.GROUPS[call.scope][0]) if call.scope in calls.GROUPS else call.name
        pattern = f"<T>{name[len(call.type_name):]}" if call.type_name else name
        assert f"`{pattern}`" in doc, f"docs/nvshmem.md does not list {call.name} (as `{pattern}`)"


def test_constants_are_those_of_the_headers(tmp_path):
    """The values read from the headers at import are the values clang gives NVSHMEM's names."""
    body = "".join(f'extern "C" __device__ int value_of_{name}(void) {{ return {name}; }}\n'
                   for name in constants.NAMES)
    source = tmp_path / "constants-device.cu"
    source.write_text(f"#include <nvshmem.h>\n#include <nvshmemx.h>\n{body}")
    ir = compile_raw_library(CompileSpec(source, library="nvshmem"), uuid.uuid4().hex, 90).path.read_text()
    for name in constants.NAMES:
        value = re.search(rf"@rawext_\w+_value_of_{name}\(\)[^{{]*\{{\s*(?:\w+:\s*)?ret i32 (-?\d+)", ir)
        assert value, f"no value for {name} in the compiled constants"
        assert getattr(shm, constants.python_name(name)).value == int(value.group(1)), name


def test_enumerators_are_counted_as_c_counts_them():
    known: dict = {"ELSEWHERE": 7}
    constants.enumerators("""
        typedef enum { A = -1, B, C = 0x10, D, /* E = 99, */ F = INT_MAX, G = D } one_t;
        enum named : int { H = ELSEWHERE, I, J = 1 << 3, K, L = 4u };  // J's shift is not evaluated
        struct not_an_enum { int M; };
    """, known)
    assert known == {"ELSEWHERE": 7, "A": -1, "B": 0, "C": 16, "D": 17, "F": 2**31 - 1, "G": 17, "H": 7, "I": 8,
                     "J": None, "K": None, "L": 4}  # fmt: skip


def test_a_wrong_signature_in_the_table_does_not_compile(tmp_path):
    source = tmp_path / "wrong-device.cu"
    source.write_text('#include "program.cuh"\nSAME_SIGNATURE(nvshmem_int_p, void (*)(long *, int, int));\n'
                      'extern "C" __device__ int pe(void) { return nvshmem_my_pe(); }\n')
    spec = CompileSpec(source, include_dirs=(LIBRARY,), library="nvshmem")
    with pytest.raises(RawCompileError, match=r"(?s)nvshmem_int_p.*void \(\*\)\(long \*, int, int\)"):
        compile_raw_library(spec, uuid.uuid4().hex, 90)


def _check_linked(c, family_calls: list[calls.Call], collectives: list[str]) -> None:
    """``c`` (compiled through `llir`) inlines every raw function, records the NVSHMEM functions of
    ``family_calls`` and leaves undefined only ``collectives``, which NVSHMEM's bitcode defines."""
    llir = c.asm["llir"]
    assert not RAW_FUNCTION.findall(llir), "a raw function survived Triton's inliner"
    assert set(c.metadata.raw_nvshmem) == _called(family_calls)
    assert c.metadata.raw_nvshmem_objects == collectives
    undefined = set(re.findall(r"^declare [^@\n]*@(\w+)\(", llir, re.MULTILINE))
    assert not {s for s in undefined if s.startswith("nvshmem")} - set(collectives)
    if collectives:
        assert not set(collectives) - _nvshmem_defines()


@pytest.mark.parametrize("family", calls.FAMILIES)
def test_every_call_compiles(family, through_llir, tmp_path, monkeypatch):
    monkeypatch.setattr(nvshmem_link, "usable_nvlink", lambda arch: True)  # collectives left for nvlink
    family_calls = lk.selected((family,))
    c = aot(lk.every_call_kernel(family_calls, tmp_path, ASSEMBLED_TYPES), lk.SIGNATURE, {"BLOCK": lk.PER_THREAD})
    _check_linked(c, family_calls, sorted(s for s in _called(family_calls) if links_separately(s)))


def test_collectives_are_inlined_without_nvlink(through_llir, tmp_path, monkeypatch):
    """Where nvlink cannot link the collectives' objects, NVSHMEM's bitcode of every collective (each
    reduction, each granularity) is inlined into the kernel."""
    monkeypatch.setattr(nvshmem_link, "usable_nvlink", lambda arch: None)
    collective = [c for c in lk.selected(calls.FAMILIES, ("uint64",)) if c.collective and c.family != "sync"]
    assert {c.family for c in collective} >= {"broadcast", "alltoall", "fcollect", "reduce_sum", "reduce_and"}
    c = aot(lk.every_call_kernel(collective, tmp_path, ()), lk.SIGNATURE, {"BLOCK": lk.PER_THREAD})
    _check_linked(c, collective, [])


def test_point_to_point_calls_assemble_and_link(tmp_path):
    """Every query, rma, put, get, signal, put-with-signal and atomic call of a few element types
    (16-bit floats among them), in both forms, through ptxas to the cubin."""
    selection = lk.selected(("query", "rma", "put", "get", "signal", "put_signal", "atomics"), ASSEMBLED_TYPES)
    c = aot(lk.every_call_kernel(selection, tmp_path, ASSEMBLED_TYPES), lk.SIGNATURE, {"BLOCK": lk.PER_THREAD})
    assert_raw_inlined(c)
    assert_nvshmem_linked(c)
    assert set(c.metadata.raw_nvshmem) == _called(selection)


def test_barriers_and_syncs_assemble_and_link(tmp_path):
    chosen = ("fence", "quiet", "barrier_all", "barrier_all_warp", "barrier_block", "team_sync_block")
    c = aot(lk.every_call_kernel([c for c in calls.CALLS if c.name in chosen], tmp_path), lk.SIGNATURE,
            {"BLOCK": 32})
    assert_raw_inlined(c)
    assert_nvshmem_linked(c)
    assert len(c.metadata.raw_nvshmem_objects) == (4 if usable_nvlink(90) else 0)


def test_scalar_arguments_run_once_per_program_tensors_once_per_element():
    c = aot(lk.forms_kernel, {"dest": "*i32", "out": "*i32", "pe": "i32", "BLOCK": "constexpr"}, {"BLOCK": 64})
    ttir = c.asm["ttir"]
    assert "shm_int_p__thread0__triton" in ttir and re.search(r"shm_int_p__triton\b", ttir)
    assert "shm_int_g__thread0__triton" in ttir
    assert re.search(r"\bbar\.sync|\bbarrier\.sync", c.asm["ptx"]), "the per-program form waits for thread 0"
    assert_raw_inlined(c)


def test_results_have_the_c_types():
    c = aot(lk.typed_results_kernel, {"sig": "*u64", "buf": "*fp16", "out": "*u32", "pe": "i32"})
    assert_raw_inlined(c)


def test_tensors_are_refused_by_block_calls():
    error = aot_error(lk.block_call_with_tensor_kernel, {"dest": "*i8", "pe": "i32", "BLOCK": "constexpr"},
                      {"BLOCK": 32})
    assert ("triton_raw_ext.nvshmem.putmem_block is a block call, made once per program: pass scalars and "
            "pointers, not tensors") in error


def test_an_atomic_on_a_tensor_smaller_than_the_program_is_refused():
    sig = {"cells": "*i32", "pe": "i32", "BLOCK": "constexpr"}
    error = aot_error(lk.small_tensor_atomic_kernel, sig, {"BLOCK": 64})
    assert ("triton_raw_ext.nvshmem.int_atomic_add with a tensor of 64 elements in a program of 128 threads: Triton "
            "gives each element to several threads") in error
    assert_raw_inlined(aot(lk.small_tensor_atomic_kernel, sig, {"BLOCK": 128}))


def test_a_pointer_of_another_type_is_refused():
    error = aot_error(lk.wrong_pointer_kernel, {"dest": "*fp32", "pe": "i32"})
    assert "triton_raw_ext.nvshmem.int_p: parameter 'dest' (int *) points to int32, got a pointer to fp32" in error


def test_a_wrong_argument_count_names_the_parameters():
    error = aot_error(lk.wrong_count_kernel, {"dest": "*i32", "pe": "i32"})
    assert "triton_raw_ext.nvshmem.int_p(dest, value, pe) takes 3 arguments, got 2" in error
