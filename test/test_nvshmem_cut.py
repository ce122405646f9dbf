"""Cutting NVSHMEM's device bitcode: llvm-link and llvmlite keep the same code, and the llvmlite route
caches its cut of the device API once per file (a small stand-in library; no NVSHMEM needed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import llvmlite.binding as llvm
import pytest
from triton_raw_ext.passes.module_io import classic_float_literals, parse

from triton_raw_ext import RawCompileError, nvshmem_cut, nvshmem_install
from triton_raw_ext.toolchain import find_llvm_link

# my_pe reads the state and calls libdevice; int_p reaches a linkonce helper and a table; barrier_all
# and its table are not needed; the ibgda and gpunetio states do not exist in this release.
LIBRARY = """
target triple = "nvptx64-nvidia-cuda"

@nvshmemi_device_state_d = addrspace(4) externally_initialized global i32 0
@nvshmemi_device_lib_version_d = addrspace(4) externally_initialized global i32 3
@pe_table = addrspace(1) global [4 x i32] zeroinitializer
@unused_table = addrspace(1) global [4 x i32] zeroinitializer

declare i32 @__nv_min(i32, i32)

define i32 @nvshmem_my_pe() {
  %v = load i32, ptr addrspace(4) @nvshmemi_device_state_d
  %m = call i32 @__nv_min(i32 %v, i32 3)
  ret i32 %m
}

define void @nvshmem_int_p(ptr %dst, i32 %v, i32 %pe) {
  call void @nvshmemi_transfer(ptr %dst, i32 %v, i32 %pe)
  ret void
}

define linkonce_odr void @nvshmemi_transfer(ptr %dst, i32 %v, i32 %pe) {
  %p = getelementptr [4 x i32], ptr addrspace(1) @pe_table, i32 0, i32 %pe
  %b = load i32, ptr addrspace(1) %p
  %s = add i32 %b, %v
  store i32 %s, ptr %dst
  ret void
}

define void @nvshmem_barrier_all() {
  store i32 1, ptr addrspace(1) @unused_table
  ret void
}

define void @nvshmemi_internal_only() {
  ret void
}
"""

ROUTES = ["llvm-link", "llvmlite"]


@pytest.fixture
def fake_nvshmem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An NVSHMEM installation holding LIBRARY as its unified bitcode; yields the plugin cache folder."""
    root = tmp_path / "nvshmem"
    (root / "include").mkdir(parents=True)
    (root / "include" / "nvshmem.h").write_text("")
    (root / "lib").mkdir()
    (root / "lib" / "libnvshmem_device.bc").write_bytes(parse(LIBRARY).as_bitcode())
    monkeypatch.setenv("TRITON_RAW_CACHE_DIR", str(tmp_path / "raw"))
    monkeypatch.setattr(nvshmem_install, "_candidate_roots", lambda: [root])
    nvshmem_install._find_cached.cache_clear()
    yield tmp_path / "raw"
    nvshmem_install._find_cached.cache_clear()


def _use(route: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if route == "llvm-link" and find_llvm_link() is None:
        pytest.skip("no llvm-link of llvmlite's LLVM version (apt-get install llvm-22)")
    if route == "llvmlite":
        monkeypatch.setattr(nvshmem_cut, "find_llvm_link", lambda: None)


def _contents(path: Path) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """Defined functions and global variables with their linkage, and the declared functions."""
    mod = parse(path.read_text())
    functions = {f.name: str(f.linkage) for f in mod.functions if not f.is_declaration}
    variables = {g.name: str(g.linkage) for g in mod.global_variables if not g.is_declaration}
    declared = sorted(f.name for f in mod.functions if f.is_declaration and not f.name.startswith("llvm."))
    return functions, variables, declared


@pytest.mark.parametrize("route", ROUTES)
def test_the_cut_keeps_what_the_symbols_reach(route, fake_nvshmem, monkeypatch):
    _use(route, monkeypatch)
    functions, variables, declared = _contents(nvshmem_cut.nvshmem_subset(90, ["nvshmem_int_p", "nvshmem_my_pe"]))
    external, internal = str(llvm.Linkage.external), str(llvm.Linkage.internal)
    assert functions.pop("nvshmem_int_p") == external and functions.pop("nvshmem_my_pe") == external
    assert functions.pop("nvshmemi_transfer") == internal
    assert functions.pop("__nv_min") == internal  # linked from Triton's libdevice
    assert not functions, f"not reached from the symbols, yet kept: {functions}"
    # Both states stay external, used or not; the ones this release lacks are not even declared.
    assert variables == {"nvshmemi_device_state_d": external, "nvshmemi_device_lib_version_d": external,
                         "pe_table": internal}
    assert declared == []


def test_both_routes_give_the_same_subset(fake_nvshmem, monkeypatch):
    if find_llvm_link() is None:
        pytest.skip("no llvm-link of llvmlite's LLVM version (apt-get install llvm-22)")
    symbols = ["nvshmem_barrier_all", "nvshmem_int_p"]
    by_tool = _contents(nvshmem_cut.nvshmem_subset(90, symbols))
    monkeypatch.setattr(nvshmem_cut, "find_llvm_link", lambda: None)
    monkeypatch.setenv("TRITON_RAW_CACHE_DIR", str(fake_nvshmem.parent / "raw-llvmlite"))
    assert _contents(nvshmem_cut.nvshmem_subset(90, symbols)) == by_tool


def test_llvmlite_cuts_the_device_api_once_per_file(fake_nvshmem, monkeypatch):
    _use("llvmlite", monkeypatch)
    assert {"nvshmem_int_p", "nvshmem_my_pe", "nvshmem_barrier_all"} <= nvshmem_cut.device_api()
    nvshmem_cut.nvshmem_subset(90, ["nvshmem_int_p"])
    nvshmem_cut.nvshmem_subset(90, ["nvshmem_my_pe"])
    entries = [e for e in (fake_nvshmem / "nvshmem_api").iterdir() if e.is_dir()]
    assert len(entries) == 1
    functions = {f.name for f in parse((entries[0] / "api.bc").read_bytes()).functions if not f.is_declaration}
    assert "nvshmemi_internal_only" not in functions  # not reached from the header's API
    # A symbol outside the header's API is cut from the whole file.
    functions, _, _ = _contents(nvshmem_cut.nvshmem_subset(90, ["nvshmemi_internal_only"]))
    assert functions == {"nvshmemi_internal_only": str(llvm.Linkage.external)}


@pytest.mark.parametrize("route", ROUTES)
def test_an_unknown_symbol_is_named(route, fake_nvshmem, monkeypatch):
    _use(route, monkeypatch)
    with pytest.raises(RawCompileError, match=r"does not define nvshmem_nope; check the names"):
        nvshmem_cut.nvshmem_subset(90, ["nvshmem_int_p", "nvshmem_nope"])


def test_a_stuck_llvm_link_is_stopped(fake_nvshmem, monkeypatch, tmp_path):
    stuck = tmp_path / "llvm-link"
    major = llvm.llvm_version_info[0]
    stuck.write_text(f'#!/bin/sh\n[ "$1" = --version ] && echo "LLVM version {major}.1.0" && exit 0\nexec sleep 30\n')
    stuck.chmod(0o755)
    monkeypatch.setenv("TRITON_RAW_LLVM_LINK", str(stuck))
    monkeypatch.setenv("TRITON_RAW_TOOL_TIMEOUT_S", "1")
    with pytest.raises(RawCompileError, match=r"llvm-link did not finish within 1 s .*TRITON_RAW_TOOL_TIMEOUT_S"):
        nvshmem_cut.nvshmem_subset(90, ["nvshmem_int_p"])


def test_float_constants_in_newer_llvm_spelling_are_read():
    """Triton 3.8+'s LLVM prints `f0x<float bits>`, `-inf` and `nan`; the llvmlite reader gets a double's hex
    bits for each, the same values, and identifiers or strings that merely contain the words stay."""
    text = ('define float @k(float %x, i1 %c) {\n  %inf = fmul float %x, f0xBFB8AA3B\n'
            '  %a = select i1 %c, float -inf, float %inf\n  %b = select i1 %c, float nan, float %a\n'
            '  ret float %b\n}\n!0 = !{!"inf"}\n')  # fmt: skip
    classic = classic_float_literals(text)
    assert "0xBFF7154760000000" in classic and "float 0xFFF0000000000000" in classic
    assert "float 0x7FF8000000000000" in classic and "%inf = fmul" in classic and '!{!"inf"}' in classic
    assert "define float @k" in str(parse(text, "newer spelling"))
