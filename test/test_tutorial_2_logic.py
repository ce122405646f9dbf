"""Tutorial 2 (AllGather-GEMM), pure-Python parts on CPU: tile order, push order, shapes, configs,
references; the kernel's tile mapping is checked against the Python one in
Triton's interpreter (a subprocess, since TRITON_INTERPRET must be set before kernels are made)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from conftest import child_env

from tutorials.allgather_gemm import reference, schedule

CASES = [(rank, world, mt, npn, g) for world in (1, 2, 3, 4, 8) for rank in range(world)
         for mt, npn, g in ((1, 1, 8), (3, 5, 2), (8, 4, 8), (4, 7, 3))]  # fmt: skip


@pytest.mark.parametrize(("rank", "world", "mt", "npn", "group"), CASES)
def test_tile_coords_cover_every_tile_once_shard_by_shard(rank, world, mt, npn, group):
    tiles = [schedule.tile_coords(t, rank, world, mt, npn, group) for t in range(mt * world * npn)]
    assert sorted((pm, pn) for pm, pn, _ in tiles) == [(pm, pn) for pm in range(mt * world) for pn in range(npn)]
    assert all(src == pm // mt for pm, _, src in tiles), "src must be the owner rank of the tile's rows"
    # Shard s of the walk (tiles [s*mt*npn, (s+1)*mt*npn)) is rank+s's: the kernel's first loop
    # covers exactly the local tiles, the second every peer's, in the order pushes arrive.
    steps = [(src - rank) % world for _, _, src in tiles]
    assert steps == [t // (mt * npn) for t in range(mt * world * npn)]


def test_tile_order_groups_rows_for_b_reuse():
    # With GROUP_M rows per group, consecutive tiles cycle through the group's rows at one column.
    tiles = [schedule.tile_coords(t, 0, 1, 16, 4, 8) for t in range(16)]
    assert [pm for pm, _, _ in tiles[:8]] == list(range(8)) and {pn for _, pn, _ in tiles[:8]} == {0}


def test_kernel_tile_coords_match_python_in_interpreter(tmp_path):
    script = tmp_path / "interp.py"
    script.write_text(f"""
import json, sys
import torch, triton, triton.language as tl
from tutorials.allgather_gemm import kernels
CASES = {json.dumps([c for c in CASES if c[1] in (1, 3, 4)])}
@triton.jit
def coords(out_ptr, rank, world, mt, npn, GROUP_M: tl.constexpr):
    t = tl.program_id(0)
    pm, pn, src = kernels._tile_coords(t, rank, world, mt, npn, GROUP_M)
    tl.store(out_ptr + 3 * t, pm)
    tl.store(out_ptr + 3 * t + 1, pn)
    tl.store(out_ptr + 3 * t + 2, src)
res = []
for rank, world, mt, npn, g in CASES:
    n = mt * world * npn
    out = torch.full((3 * n,), -1, dtype=torch.int32)
    coords[(n,)](out, rank, world, mt, npn, GROUP_M=g)
    res.append(out.view(n, 3).tolist())
print(json.dumps(res))
""")
    env = child_env(TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    cases = [c for c in CASES if c[1] in (1, 3, 4)]
    for (rank, world, mt, npn, g), rows in zip(cases, got, strict=True):
        want = [list(schedule.tile_coords(t, rank, world, mt, npn, g)) for t in range(mt * world * npn)]
        assert rows == want, (rank, world, mt, npn, g)


# (rank, world, m_per_rank, n, k, grid, NUM_SMS): fewer programs than tiles, more programs than local
# tiles (the 1024^3 case on 132 SMs), a grid below NUM_SMS (fewer tiles than SMs), first, middle and
# last rank, world 1.
WALK_CASES = [(1, 3, 64, 96, 64, 5, 5), (0, 2, 64, 64, 32, 8, 8), (2, 3, 64, 96, 64, 7, 7),
              (1, 2, 32, 32, 32, 2, 4), (0, 1, 64, 96, 64, 3, 3), (3, 4, 96, 64, 32, 5, 5)]  # fmt: skip


def test_kernel_walk_computes_every_tile_from_the_right_buffer_in_interpreter(tmp_path):
    """The whole GEMM kernel (no waits) in Triton's interpreter over :data:`WALK_CASES`: the local
    shard must come from ``local_desc`` (the workspace's local slot holds NaN, as it does in the
    operator), the peers' rows from ``gathered_desc``, and every output tile be written once."""
    script = tmp_path / "walk.py"
    script.write_text(f"""
import json, sys
import torch
import triton.runtime.interpreter as interpreter
from triton.tools.tensor_descriptor import TensorDescriptor
from tutorials.allgather_gemm import kernels

# Triton 3.6's interpreter turns scalars into 1-element arrays, which NumPy >= 2.3 refuses to int():
# index them explicitly so that range() over program_id-based bounds runs.
patch_tensor = interpreter._patch_lang_tensor
def index_first(tensor, scope):
    patch_tensor(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
interpreter._patch_lang_tensor = index_first
errors = []
for rank, world, m, n, k, grid, num_sms in {WALK_CASES!r}:
    bm = bn = bk = 32
    torch.manual_seed(0)
    gathered = torch.randn(world * m, k).to(torch.float16)
    a = gathered[rank * m:(rank + 1) * m].clone()
    gathered[rank * m:(rank + 1) * m] = float("nan")
    b = torch.randn(k, n).to(torch.float16)
    c = torch.full((world * m, n), float("nan"), dtype=torch.float16)
    ready = torch.zeros(world, dtype=torch.int32)
    descs = [TensorDescriptor.from_tensor(t, shape) for t, shape in ((a, [bm, bk]), (gathered, [bm, bk]),
                                                                      (b, [bk, bn]), (c, [bm, bn]))]
    kernels.ag_gemm_kernel[(grid,)](*descs, ready, 1, rank, world, m, n, k, 1000, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                       GROUP_M=2, NUM_SMS=num_sms, WAIT=False, FLATTEN=False, EPILOGUE_SUBTILE=False)
    full = gathered.clone()
    full[rank * m:(rank + 1) * m] = a
    ref = full.float() @ b.float()
    errors.append(((c.float() - ref).abs().max() / ref.abs().max()).item())
print("ERRORS", json.dumps(errors))
""")
    env = child_env(TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    errors = json.loads(proc.stdout.split("ERRORS")[-1])
    for case, err in zip(WALK_CASES, errors, strict=True):
        assert err < 1e-2, (case, err)  # NaN (a tile never written, or read from the local slot) fails too


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_push_order_serves_destinations_in_order_of_need(world):
    for rank in range(world):
        order = schedule.push_order(rank, world)
        assert sorted(order) == sorted(set(range(world)) - {rank})
        need = [(rank - dst) % world for dst in order]  # position of `rank` in dst's walk
        assert need == sorted(need) == list(range(1, world))


def test_check_shapes_accepts_the_five_shapes_and_explains_rejections():
    for m, n, k in ((1024, 1024, 1024), (4096, 1024, 8192), (4096, 8192, 8192), (8192, 8192, 8192),
                    (4096, 8192, 28672)):
        schedule.check_shapes(m, n, k, schedule.DEFAULT_CONFIG)
    with pytest.raises(ValueError, match="multiple of BLOCK_M=128"):
        schedule.check_shapes(1000, 1024, 1024, schedule.DEFAULT_CONFIG)
    with pytest.raises(ValueError, match="16 bytes"):
        schedule.check_shapes(1024, 1024, 1020, schedule.DEFAULT_CONFIG)
    with pytest.raises(ValueError, match="positive"):
        schedule.check_shapes(0, 1024, 1024, schedule.DEFAULT_CONFIG)
    with pytest.raises(ValueError, match="shared memory"):
        schedule.check_shapes(1024, 1024, 1024, schedule.GemmConfig(num_stages=6))


def test_candidate_configs_fit_and_are_distinct():
    descs = [c.describe() for c in schedule.CANDIDATE_CONFIGS]
    assert len(set(descs)) == len(descs)
    assert schedule.CANDIDATE_CONFIGS[0] == schedule.DEFAULT_CONFIG
    for c in schedule.CANDIDATE_CONFIGS:
        assert c.smem_bytes() <= schedule.SMEM_LIMIT_BYTES
        assert 4096 % c.block_m == 0 and 1024 % c.block_m == 0


def test_workspace_and_flops():
    assert schedule.workspace_bytes(4096, 8192, 2) == 2 * (2 * 4096 * 8192 * 2) + 16  # two buffers
    assert schedule.workspace_bytes(128, 64, 5) == 2 * (5 * 128 * 64 * 2) + 32
    assert schedule.gemm_flops(4096, 8192, 8192, 1) == 2.0 * 4096 * 8192 * 8192


def test_inputs_are_deterministic_per_rank_and_call():
    a0, b0 = reference.make_inputs(64, 32, 48, torch.bfloat16, 7, 0, 1, "cpu")
    a1, b1 = reference.make_inputs(64, 32, 48, torch.bfloat16, 7, 0, 1, "cpu")
    assert torch.equal(a0, a1) and torch.equal(b0, b1)
    assert not torch.equal(a0, reference.make_inputs(64, 32, 48, torch.bfloat16, 7, 1, 1, "cpu")[0])
    assert not torch.equal(a0, reference.make_inputs(64, 32, 48, torch.bfloat16, 7, 0, 2, "cpu")[0])
    gathered = reference.rebuild_gathered(64, 32, 48, torch.bfloat16, 7, 0, 3, "cpu")
    assert gathered.shape == (192, 48) and torch.equal(gathered[64:128], a0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_tolerance_passes_output_rounding_and_fails_a_wrong_tile(dtype):
    a, b = reference.make_inputs(256, 128, 512, dtype, 0, 0, 0, "cpu")
    ref = reference.reference(a, b)
    rounded = ref.to(dtype)
    err = reference.relative_error(rounded, ref)
    assert err < reference.TOLERANCE[dtype] / 2
    wrong = rounded.clone()
    wrong[:64, :64] = reference.reference(a[64:128], b)[:, :64].to(dtype)  # one tile from the wrong rows
    assert reference.relative_error(wrong, ref) > reference.TOLERANCE[dtype]
    poisoned = rounded.clone()
    poisoned[3, 5] = float("nan")
    assert reference.relative_error(poisoned, ref) != reference.relative_error(poisoned, ref)  # NaN


def test_operator_refuses_graph_capture_with_a_reason(monkeypatch):
    from tutorials.allgather_gemm import allgather_gemm

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(RuntimeError, match="cannot be captured in a CUDA graph at world > 1.*stale flags"):
        allgather_gemm.refuse_graph_capture("AllGatherGEMM.__call__")
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    allgather_gemm.refuse_graph_capture("AllGatherGEMM.__call__")  # eager: no error


def test_baseline_gemm_refusals_name_the_tensor_and_the_reason():
    """``gemm()``'s messages, on an operator shell with its shapes set (building one needs a GPU)."""
    from tutorials.allgather_gemm import AllGatherGEMM

    op = object.__new__(AllGatherGEMM)
    op.m_per_rank, op.n, op.k, op.world, op.rank, op.epoch = 64, 32, 48, 2, 1, 0
    op.dtype, op.device = torch.bfloat16, torch.device("cpu")
    b = torch.zeros(48, 32, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"gathered must be a contiguous \(128, 48\) torch.bfloat16 tensor on cpu at "
                                         r"a 16-byte aligned address, got \(64, 48\)"):  # fmt: skip
        op.gemm(torch.zeros(64, 48, dtype=torch.bfloat16), b)
    with pytest.raises(ValueError, match=r"gathered must be .* aligned address, got \(128, 48\) .* at 0x\w*[^0]$"):
        op.gemm(torch.zeros(128 * 48 + 1, dtype=torch.bfloat16)[1:].view(128, 48), b)
    with pytest.raises(ValueError, match=r"b must be a contiguous \(48, 32\)"):
        op.gemm(torch.zeros(128, 48, dtype=torch.bfloat16), b.t().contiguous().t())
    with pytest.raises(ValueError, match=r"gemm\(checks=True\) needs world > 1 and a completed call"):
        op.gemm(torch.zeros(128, 48, dtype=torch.bfloat16), b, checks=True)


def test_a_given_output_is_refused_naming_what_it_must_be():
    """``out``: the operator's output shape and dtype, contiguous, on its device (an operator shell on the CPU)."""
    from tutorials.allgather_gemm import AllGatherGEMM

    op = object.__new__(AllGatherGEMM)
    op.dtype, op.device = torch.bfloat16, torch.device("cpu")
    op._output_like = torch.empty((1, 1), dtype=torch.bfloat16).expand(128, 32)
    fine = torch.zeros(128, 32, dtype=torch.bfloat16)
    assert op._output(fine) is fine
    assert op._output(None).shape == (128, 32) and op._output(None).is_contiguous()
    with pytest.raises(ValueError, match=r"out must be a contiguous \(128, 32\) torch.bfloat16 tensor on cpu at a "
                                         r"16-byte aligned address, got \(128, 32\) torch.bfloat16 on meta"):
        op._output(torch.empty(128, 32, dtype=torch.bfloat16, device="meta"))
    with pytest.raises(ValueError, match=r"out must be .* got \(128, 32\) torch.bfloat16 on cpu \(contiguous=False\)"):
        op._output(torch.zeros(32, 128, dtype=torch.bfloat16).t())
    with pytest.raises(ValueError, match=r"out must be .* got \(128, 32\) torch.float16"):
        op._output(torch.zeros(128, 32, dtype=torch.float16))
