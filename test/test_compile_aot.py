"""Ahead-of-time compiles for sm_90 on a machine without a GPU: the compile path end to end."""

from __future__ import annotations

import re

import pytest
import triton
from conftest import aot, assert_nvshmem_linked, assert_raw_inlined, requires_nvshmem, requires_per_sm_nvshmem

from examples.kernels import raw_kernels as k
from triton_raw_ext import nvshmem_cut, nvshmem_link
from triton_raw_ext.knobs import nvshmem_transports
from triton_raw_ext.toolchain import find_llvm_link, usable_nvlink

RING_SIGNATURE = {"buf": "*i32", "slot": "*i32", "sig": "*u64", "out": "*i32", "step": "i64", "BLOCK": "constexpr"}


def _no_nvshmem(compiled) -> None:
    assert not re.search(r"\bnvshmem[ix]?_", compiled.asm["ptx"])  # symbols; the PTX's file paths may say nvshmem
    assert "raw_nvshmem" not in compiled.metadata._asdict()


@pytest.mark.parametrize("kernel", [k.elementwise_kernel, k.elementwise_direct_kernel])
def test_elementwise_raw_function(kernel):
    c = aot(kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024})
    assert_raw_inlined(c)
    _no_nvshmem(c)
    assert "add.f32" in c.asm["ptx"] or "add.rn.f32" in c.asm["ptx"]


def test_raw_call_and_direct_call_give_the_same_code():
    sig, const = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 256}
    a = aot(k.elementwise_kernel, sig, const).asm["ptx"]
    b = aot(k.elementwise_direct_kernel, sig, const).asm["ptx"]
    # The code only: line directives and the DWARF sections hold the calls' different Python columns.
    strip = lambda ptx: re.sub(r"elementwise(_direct)?_kernel", "K",  # noqa: E731
                               re.sub(r"//.*|\.loc.*|\.file.*", "", ptx.split("\t.section\t.debug")[0]))
    assert strip(a) == strip(b)


def test_pointer_function_with_syncthreads():
    c = aot(k.rotate_kernel, {"data_ptr": "*i32", "N": "constexpr"}, {"N": 128})
    assert_raw_inlined(c)
    _no_nvshmem(c)
    ptx = c.asm["ptx"]
    assert re.search(r"\bbar\.sync|\bbarrier\.sync", ptx), "__syncthreads() must reach the PTX"
    assert ".shared" in ptx, "the raw function's __shared__ tile must be in shared memory"


@triton.jit
def _fill_at_kernel(address):
    k.fill_iota(address, 128, 1.0)


def test_generic_address_to_a_shared_space_pointer():
    """An int64 is a generic address: the wrapper of fill_iota(__attribute__((address_space(3))) float *)
    converts it into the shared window (cvta.to.shared), and the raw stores are st.shared."""
    c = aot(_fill_at_kernel, {"address": "i64"})
    assert_raw_inlined(c)
    ptx = c.asm["ptx"]
    assert "cvta.to.shared.u64" in ptx and re.search(r"\bst\.shared\.(b|f|u)32\b", ptx)


def test_two_sources_defining_the_same_helper():
    c = aot(k.two_sources_kernel, {"x_ptr": "*i32", "y_ptr": "*i32", "BLOCK": "constexpr"}, {"BLOCK": 128})
    llir = c.asm["llir"]
    # The files mark `helper` __noinline__, so both copies survive, each under its own prefix.
    helpers = set(re.findall(r"^define [^@\n]*@(rawext_(\w{12})__Z6helperi)\(", llir, re.MULTILINE))
    assert len(helpers) == 2 and len({prefix for _, prefix in helpers}) == 2
    # The exported functions and their wrappers were inlined; only the helpers are called.
    called = set(re.findall(r"\bcall\b[^@\n]*@(rawext_\w+)\(", llir))
    assert called == {name for name, _ in helpers}
    ptx = c.asm["ptx"]
    assert "100" in ptx  # x + 100 from the first file
    assert re.search(r"mul\.lo\.s32.*3;|mad\.lo\.s32.*3,|\*3|shl", ptx)  # x * 3 from the second


def test_all_abi_types():
    sig = {"f64_ptr": "*fp64", "i64_ptr": "*i64", "f16_ptr": "*fp16", "bf16_ptr": "*bf16", "i32_ptr": "*i32",
           "out_ptr": "*i32", "BLOCK": "constexpr"}
    c = aot(k.types_kernel, sig, {"BLOCK": 128})
    assert_raw_inlined(c)
    ptx = c.asm["ptx"]
    assert "mul.rn.f64" in ptx or "mul.f64" in ptx
    assert "add.f16" in ptx or "add.rn.f16" in ptx
    assert "bf16" in ptx


@requires_nvshmem
def test_nvshmem_kernel_links_nvshmem_once():
    c = aot(k.ring_kernel, RING_SIGNATURE, {"BLOCK": 128})
    assert_raw_inlined(c)
    ptx = c.asm["ptx"]
    assert set(c.metadata.raw_nvshmem) == {
        "nvshmem_barrier_all", "nvshmem_int_p", "nvshmem_my_pe", "nvshmem_n_pes", "nvshmem_ptr",
        "nvshmem_signal_wait_until", "nvshmemx_putmem_signal_block",
    }  # fmt: skip
    assert c.metadata.raw_nvshmem_objects == (["nvshmem_barrier_all"] if usable_nvlink(90) else [])
    assert len(re.findall(r"\.visible \.\w+ .*\bnvshmemi_device_state_d\[", ptx)) == 1
    assert_nvshmem_linked(c)


@requires_nvshmem
def test_nvshmem_kernel_keeps_tritons_math_intrinsics():
    """Linking NVSHMEM re-reads the kernel with llvmlite's newer LLVM, which renames Triton 3.6's exp2
    intrinsic; the kernel must still assemble, with the exp2 instruction and no call left."""
    c = aot(k.sigmoid_if_reachable_kernel, {"x": "*fp32", "sym": "*i32", "pe": "i32", "BLOCK": "constexpr"},
            {"BLOCK": 128})  # fmt: skip
    assert_raw_inlined(c)
    ptx = c.asm["ptx"]
    assert "ex2.approx" in ptx and not re.search(r"\.extern \.func[^;]*\bllvm\.", ptx)
    assert_nvshmem_linked(c)


def test_intrinsic_names_come_back_as_the_kernel_had_them():
    before = "declare float @llvm.nvvm.ex2.approx.f(float)\ndeclare i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    after = (
        "  %y = call float @llvm.nvvm.ex2.approx.f32(float %x)\ndeclare float @llvm.nvvm.ex2.approx.f32(float)\n"
        "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()\ndeclare float @llvm.nvvm.fma.rn.f(float, float, float)\n"
    )
    restored = nvshmem_link.restore_intrinsic_names(before, after)
    assert "@llvm.nvvm.ex2.approx.f(" in restored and "ex2.approx.f32" not in restored
    assert "@llvm.nvvm.fma.rn.f(" in restored  # the library's own intrinsics are left alone


@requires_nvshmem
def test_nvshmem_put_get_kernel_links_block_put_and_get():
    c = aot(k.put_get_kernel, {"buf": "*i32", "got": "*i32", "BLOCK": "constexpr"}, {"BLOCK": 1024})
    assert_raw_inlined(c)
    assert {"nvshmemx_putmem_block", "nvshmemx_getmem_block", "nvshmem_barrier_all"} <= set(c.metadata.raw_nvshmem)
    assert_nvshmem_linked(c)


@requires_nvshmem
def test_collective_links_as_a_precompiled_object(tmp_path, monkeypatch):
    """With nvlink, the kernel's PTX calls NVSHMEM's barrier, and the cubin gets it from an object built once:
    another specialisation of the kernel links the same object."""
    if usable_nvlink(90) is None:
        pytest.skip("no nvlink as new as Triton's ptxas (install the CUDA toolkit or set TRITON_RAW_NVLINK)")
    monkeypatch.setenv("TRITON_RAW_CACHE_DIR", str(tmp_path / "raw"))
    first = aot(k.ring_kernel, RING_SIGNATURE, {"BLOCK": 64})
    assert re.search(r"\.extern \.func\s+nvshmem_barrier_all\b", first.asm["ptx"])
    assert "nvshmem_barrier_all" not in re.findall(r"\.(?:visible|weak) \.func\s+(\w+)", first.asm["ptx"])
    assert_nvshmem_linked(first)
    objects = sorted((tmp_path / "raw" / "nvshmem_object").glob("*/*.o"))
    assert len(objects) == 1
    again = aot(k.ring_kernel, RING_SIGNATURE, {"BLOCK": 32})
    assert_nvshmem_linked(again)
    assert sorted((tmp_path / "raw" / "nvshmem_object").glob("*/*.o")) == objects


@requires_nvshmem
def test_collectives_are_inlined_without_nvlink(monkeypatch):
    monkeypatch.setattr(nvshmem_link, "usable_nvlink", lambda arch: None)
    c = aot(k.ring_kernel, RING_SIGNATURE, {"BLOCK": 16})
    assert c.metadata.raw_nvshmem_objects == []
    assert not re.search(r"\.extern \.func[^;]*\bnvshmem", c.asm["ptx"])
    assert_nvshmem_linked(c)


@requires_per_sm_nvshmem
@pytest.mark.parametrize(("route", "transports"), [("llvm-link", "proxy"), ("llvmlite", "proxy"), ("llvm-link", "all")])
def test_nvshmem_kernel_links_per_sm_bitcode(route, transports, tmp_path, monkeypatch):
    """NVSHMEM 3.7 and newer ship one bitcode file per SM, with the IBGDA and GPUNetIO transports in it;
    a first compile cuts it with llvm-link, or without one with llvmlite. Compiled for the proxy
    transport only, the kernel keeps none of their code and traps if a job selects one of them."""
    if route == "llvm-link" and find_llvm_link() is None:
        pytest.skip("no llvm-link of llvmlite's LLVM version (apt-get install llvm-22)")
    if route == "llvmlite":
        monkeypatch.setattr(nvshmem_cut, "find_llvm_link", lambda: None)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))  # a first compile: nothing cached
    monkeypatch.setenv("TRITON_RAW_CACHE_DIR", str(tmp_path / "raw"))
    monkeypatch.setenv("TRITON_RAW_NVSHMEM_TRANSPORTS", transports)
    c = aot(k.put_pe_kernel, {"slot": "*i32"})
    assert_raw_inlined(c)
    assert set(c.metadata.raw_nvshmem) == {"nvshmem_int_p", "nvshmem_my_pe", "nvshmem_n_pes"}
    ptx = c.asm["ptx"]
    for state in ("nvshmemi_device_state_d", "nvshmemi_ibgda_device_state_d", "nvshmemi_gpunetio_device_state_d"):
        assert len(re.findall(rf"\.visible \.\w+ .*\b{state}\[", ptx)) == 1, f"{state} must be visible once"
    externs = set(re.findall(r"\.extern \.func[^(]*\((?:[^)]*)\)\s*(\w+)", ptx))
    assert externs <= {"__assertfail", "vprintf"}, f"unresolved functions: {externs}"
    device_initiated = re.findall(r"\[nvshmemi_(?:ibgda|gpunetio)_device_state_d\b", ptx)
    pinned = "compiled for the proxy transport only" in _ptx_strings(ptx)
    assert (bool(device_initiated), pinned) == ((False, True) if transports == "proxy" else (True, False))


def _ptx_strings(ptx: str) -> str:
    """The text of the PTX's byte-array constants (printf formats), decoded."""
    arrays = re.findall(r"\.b8 [\w$]+\[\d+\] = \{([\d, ]+)\}", ptx)
    return "\n".join(bytes(int(b) for b in body.split(",")).decode("latin-1") for body in arrays)


@pytest.mark.parametrize(("environment", "expected"), [
    ({}, "proxy"),
    ({"NVSHMEM_IB_ENABLE_IBGDA": "1"}, "all"),
    ({"NVSHMEM_IB_ENABLE_IBGDA": "false"}, "proxy"),
    ({"NVSHMEM_REMOTE_TRANSPORT": "gpunetio", "NVSHMEM_GPUNETIO_ENABLE_GDAKI": "1"}, "all"),
    ({"NVSHMEM_IB_ENABLE_IBGDA": "1", "TRITON_RAW_NVSHMEM_TRANSPORTS": "proxy"}, "proxy"),
])  # fmt: skip
def test_nvshmem_transports_follow_nvshmem_environment(environment, expected, monkeypatch):
    for name in ("NVSHMEM_IB_ENABLE_IBGDA", "NVSHMEM_REMOTE_TRANSPORT", "NVSHMEM_GPUNETIO_ENABLE_GDAKI",
                 "TRITON_RAW_NVSHMEM_TRANSPORTS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert nvshmem_transports() == expected


def test_nvshmem_transports_setting_is_checked(monkeypatch):
    monkeypatch.setenv("TRITON_RAW_NVSHMEM_TRANSPORTS", "ibgda")
    with pytest.raises(ValueError, match="TRITON_RAW_NVSHMEM_TRANSPORTS='ibgda': use one of all, proxy"):
        nvshmem_transports()
