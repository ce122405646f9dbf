"""scripts.gpu.nvshmem_library_suite on CPU: the skip without a GPU, and every kernel of its checks
compiled ahead of time (through Triton's `llir` stage, with a call of each kind it is run with)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import RAW_FUNCTION, ROOT, aot, child_env, has_gpu, has_nvshmem

if not has_nvshmem():
    pytest.skip("needs NVSHMEM (pip install nvidia-nvshmem-cu13)", allow_module_level=True)

import triton_raw_ext.nvshmem as shm  # noqa: E402
from scripts.gpu import nvshmem_library_checks as checks  # noqa: E402
from scripts.gpu import nvshmem_library_suite as suite  # noqa: E402

POINTER = {"dest": "*i32", "source": "*i32", "out": "*i32", "buf": "*i32", "got": "*i32", "flag": "*i32",
           "flags": "*i32", "data": "*i32", "slots": "*i32", "cells": "*i32", "sig": "*i64"}  # fmt: skip
SCALAR = {"count": "i32", "pe": "i32", "value": "i32", "cond": "i32", "root": "i32", "round_number": "i32",
          "rounds": "i32"}  # fmt: skip
# kernel -> [(argument types that differ from POINTER / SCALAR, constexprs)]
LAUNCHES = {
    checks.query_kernel: [({}, {})],
    checks.transfer_kernel: [({}, {"CALL": shm.putmem_warp, "QUIET": False}),
                             ({"dest": "*fp16", "source": "*fp16"}, {"CALL": shm.half_get_nbi_block, "QUIET": True})],
    checks.p_g_kernel: [({"dest": "*bf16", "source": "*bf16", "out": "*bf16", "value": "fp32"},
                         {"P": shm.bfloat16_p, "G": shm.bfloat16_g}),
                        ({"dest": "*i8", "source": "*i8", "out": "*i8"}, {"P": shm.char_p, "G": shm.char_g})],
    checks.elementwise_kernel: [({}, {"BLOCK": checks.PER_THREAD})],
    checks.put_signal_kernel: [({"dest": "*fp32", "source": "*fp32", "out": "*i64"},
                                {"CALL": shm.float_put_signal_nbi_block, "SIG_OP": shm.SIGNAL_ADD.value})],
    checks.signal_op_kernel: [({"out": "*i64"}, {})],
    checks.wait_kernel: [({"flag": "*i16"}, {"P": shm.ushort_p, "WAIT": shm.ushort_wait_until})],
    checks.elementwise_wait_kernel: [({}, {"BLOCK": checks.PER_THREAD})],
    checks.ordering_kernel: [({}, {"QUIET": False, "BLOCK": 64})],
    checks.barrier_kernel: [({}, {"CALL": shm.team_sync_warp, "TEAMED": True, "QUIET": True}),
                            ({}, {"CALL": shm.barrier_all, "TEAMED": False, "QUIET": False})],
    checks.collective_kernel: [({"dest": "*i8", "source": "*i8"}, {"CALL": shm.int8_broadcast_block, "ROOTED": True}),
                               ({"dest": "*u8", "source": "*u8"}, {"CALL": shm.uint8_xor_reduce_block,
                                                                   "ROOTED": False})],
    checks.amo_kernel: [({"cell": "*i64", "out": "*i64"}, {"CALL": shm.ulonglong_atomic_compare_swap, "FORM": 4}),
                        ({"cell": "*fp64", "out": "*fp64", "value": "fp32", "cond": "fp32"},
                         {"CALL": shm.double_atomic_swap, "FORM": 2})],
    checks.elementwise_amo_kernel: [({}, {"BLOCK": checks.PER_THREAD})],
}  # fmt: skip


def test_the_suite_names_every_family_of_the_checks():
    assert suite.FAMILY_NAMES == tuple(checks.FAMILIES)


def test_every_collective_the_checks_call_is_prebuilt():
    used = checks.collectives_used(list(checks.FAMILIES))
    assert "nvshmemx_int32_min_reduce_block" in used and "nvshmemx_team_sync_warp" in used
    assert len(used) == len(set(used)) and all(getattr(shm, c.name).call.symbol in used for c in shm.CALLS
                                               if c.name.endswith("_reduce_block"))


@pytest.mark.parametrize("kernel", list(LAUNCHES), ids=lambda k: k.fn.__name__)
def test_check_kernels_compile(kernel, through_llir):
    params = kernel.arg_names
    for types, constexprs in LAUNCHES[kernel]:
        signature = {name: "constexpr" if name in constexprs else types.get(name) or POINTER.get(name) or SCALAR[name]
                     for name in params}  # fmt: skip
        c = aot(kernel, signature, constexprs)
        assert not RAW_FUNCTION.findall(c.asm["llir"])
        assert c.metadata.raw_nvshmem


@pytest.mark.skipif(has_gpu(), reason="on a GPU machine the suite runs for real")
def test_without_a_gpu_the_suite_writes_a_skip(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "scripts.gpu.nvshmem_library_suite"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=child_env(OUT=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "nvshmem_library_suite.json").read_text())
    assert report["passed"] is None and "no CUDA GPU" in report["skipped"]
    assert "SKIPPED: no CUDA GPU" in proc.stdout and report["worlds"] == []
    assert Path(proc.stdout.strip().splitlines()[-1].removeprefix("wrote ")) == tmp_path / suite.RESULT_FILE
