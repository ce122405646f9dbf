"""Tutorial 1 on CPU: algorithm choice, workspace layout, launch configuration, reference, tolerance."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from tutorials.allreduce_rmsnorm.plan import (  # noqa: E402
    Algorithm,
    Push,
    Tuning,
    WorkspaceLayout,
    choose_algorithm,
    effective_bytes,
    grid_cap,
    launch_config,
    oneshot_max_bytes,
    programs_per_sm,
    waiting_warps,
)
from tutorials.allreduce_rmsnorm.reference import compare, make_inputs, reduce_like_allreduce, reference, tolerance  # noqa: E402

TOKENS = (1, 16, 64, 128, 256, 1024, 4096)
HIDDENS = (2048, 4096, 7168, 8192)


def test_world_one_is_local_and_needs_no_workspace():
    for t in TOKENS:
        assert choose_algorithm(1, t, 8192, 2) == Algorithm.LOCAL
    lay = WorkspaceLayout(1, 8192, 4096, 2)
    assert lay.symmetric_bytes == 0 and lay.algorithm_for(4096) == Algorithm.LOCAL


def test_two_ranks_always_oneshot_and_switch_shrinks_with_world():
    assert math.isinf(oneshot_max_bytes(2))
    assert choose_algorithm(2, 4096, 8192, 2) == Algorithm.ONESHOT
    assert oneshot_max_bytes(4) > oneshot_max_bytes(8) > 0
    assert choose_algorithm(4, 1, 8192, 2) == Algorithm.ONESHOT
    assert choose_algorithm(4, 4096, 8192, 2) == Algorithm.TWOSHOT


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_choice_is_monotone_in_tokens(world):
    for hidden in HIDDENS:
        algos = [choose_algorithm(world, t, hidden, 2) for t in range(1, 4097, 7)]
        first_two = algos.index(Algorithm.TWOSHOT) if Algorithm.TWOSHOT in algos else len(algos)
        assert all(a == Algorithm.ONESHOT for a in algos[:first_two])
        assert all(a == Algorithm.TWOSHOT for a in algos[first_two:])


def _slots(lay: WorkspaceLayout):
    """Every element range the kernel can write, by the kernel's own index formulas (kernels)."""
    w, h = lay.world, lay.hidden
    for par in range(2):
        for src in range(w):
            for row in range(lay.oneshot_rows):
                yield "oneshot", lay.oneshot_offset + ((par * w + src) * lay.oneshot_rows + row) * h
            for row in range(lay.max_tokens if lay.rs_rows else 0):
                yield "rs", lay.rs_offset + ((par * w + src) * lay.rs_rows + row // w) * h
        for row in range(lay.ag_rows):
            yield "ag", lay.ag_offset + (par * lay.max_tokens + row) * h


@pytest.mark.parametrize(
    "world,forced",
    [(2, None), (4, None), (8, None), (2, Algorithm.TWOSHOT), (4, Algorithm.ONESHOT), (3, None)],
)
def test_layout_regions_are_disjoint_and_in_bounds(world, forced):
    lay = WorkspaceLayout(world, 64, 37, 2, forced=forced)
    seen: dict[int, str] = {}
    for region, start in _slots(lay):
        assert 0 <= start and start + lay.hidden <= lay.data_elements
        assert start % lay.hidden == 0
        if start in seen:  # rows of one owner share no slot with other rows of that owner
            assert seen[start] == region
        seen[start] = region
    regions = {}
    for region, start in _slots(lay):
        regions.setdefault(region, set()).add(start)
    names = list(regions)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not regions[a] & regions[b]


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_rs_slot_unique_per_owner(world):
    lay = WorkspaceLayout(world, 8, 29, 2, forced=Algorithm.TWOSHOT)
    for owner in range(world):
        rows = [r for r in range(lay.max_tokens) if r % world == owner]
        slots = [r // world for r in rows]
        assert len(set(slots)) == len(slots) and max(slots) < lay.rs_rows


def test_layout_sizes_for_goal_shapes():
    lay = WorkspaceLayout(4, 8192, 4096, 2)
    assert lay.algorithm_for(4096) == Algorithm.TWOSHOT and lay.algorithm_for(1) == Algorithm.ONESHOT
    assert lay.oneshot_rows == int(oneshot_max_bytes(4) // (8192 * 2))
    assert lay.rs_rows == 1024 and lay.ag_rows == 4096
    assert lay.symmetric_bytes < 512 * 2**20  # fits NVSHMEM's heap with room to spare
    assert WorkspaceLayout(2, 8192, 4096, 2).rs_rows == 0  # two-shot never chosen at world 2


def test_layout_rejects_bad_arguments():
    with pytest.raises(ValueError):
        WorkspaceLayout(0, 8, 8, 2)
    with pytest.raises(ValueError):
        WorkspaceLayout(1, 8, 8, 2, forced=Algorithm.ONESHOT)
    with pytest.raises(ValueError):
        WorkspaceLayout(2, 8, 8, 2).algorithm_for(9)


def test_launch_config():
    local = launch_config(Algorithm.LOCAL, 4096, 8192, resident_programs=1)
    assert local.grid == 4096 and local.block_h == 8192 and local.num_warps == 16
    assert launch_config(Algorithm.LOCAL, 7, 7168, 1).block_h == 8192
    comm = launch_config(Algorithm.TWOSHOT, 4096, 8192, resident_programs=33)
    assert comm.grid == 33 and comm.num_warps == 4 and comm.batch_rows == 1
    assert launch_config(Algorithm.ONESHOT, 5, 2048, resident_programs=66).grid == 5
    tuned = launch_config(Algorithm.ONESHOT, 4096, 2048, 1056, Tuning(programs_per_sm=2, num_warps=8, batch_rows=4))
    assert (tuned.grid, tuned.num_warps, tuned.batch_rows) == (1056, 8, 4)
    assert launch_config(Algorithm.TWOSHOT, 4096, 2048, 1056, Tuning(batch_rows=4)).batch_rows == 1  # one-shot only
    with pytest.raises(ValueError):
        launch_config(Algorithm.ONESHOT, 0, 2048, 1)


@pytest.mark.parametrize(
    "block_h,warps", [(256, 1), (512, 1), (1024, 1), (2048, 2), (4096, 4), (8192, 4), (16384, 8), (65536, 8)]
)
def test_waiting_warps(block_h, warps):
    assert waiting_warps(block_h) == warps


@pytest.mark.parametrize(
    "kwargs", [{"programs_per_sm": 0}, {"num_warps": 3}, {"num_warps": 32}, {"batch_rows": 3}, {"batch_rows": 0}]
)
def test_tuning_rejects_bad_values(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        Tuning(**kwargs)


@pytest.mark.parametrize(
    "n_regs,warps,shared,fit",
    [
        (174, 4, 0, 2),  # a one-shot kernel at H 2048 of 4 warps, 4 rows: two programs
        (176, 8, 0, 1),  # and at H 8192 (8 warps, 2 rows): one
        (125, 2, 8, 8),  # the default one at H 2048 (2 warps, one row): eight
        (213, 4, 16, 2),  # and at H 8192 (4 warps): two
        (255, 8, 0, 1),  # the most registers a thread gets, 8 warps: still one
        (32, 1, 0, 32),  # small programs: capped at 32 programs per SM
        (33, 2, 0, 25),  # 33 registers round up to 40 (1280 per warp): 51 warps' worth, 25 programs of 2
        (64, 4, 100 * 1024, 2),  # shared memory decides: 2 x (100 KiB + 1 KiB) fit in 227 KiB
    ],
)
def test_programs_per_sm(n_regs, warps, shared, fit):
    assert programs_per_sm(n_regs, warps, shared, 227 * 1024) == fit


@pytest.mark.parametrize(
    "sms,fit,per_sm,sharing,cap",
    [
        (132, 8, 8, 1, 1056),  # one PE per GPU: as many per SM as asked for and fit
        (132, 2, 8, 1, 264),  # fewer fit than asked for
        (132, 8, 1, 1, 132),
        (132, 8, 8, 2, 66),  # two PEs share the GPU (MPS): one per SM over both, whatever fits
        (132, 8, 8, 4, 33),
        (2, 8, 8, 4, 1),  # never below one program
    ],
)
def test_grid_cap(sms, fit, per_sm, sharing, cap):
    assert grid_cap(sms, fit, per_sm, sharing) == cap


def test_grid_cap_rejects_a_kernel_that_does_not_fit():
    with pytest.raises(ValueError, match="fit=0"):
        grid_cap(132, 0, 8, 1)


def test_programs_per_sm_rejects_bad_resources():
    with pytest.raises(ValueError):
        programs_per_sm(0, 4, 0, 227 * 1024)


def test_effective_bytes_counts_five_streams():
    assert effective_bytes(4096, 8192, 2) == (4 * 4096 * 8192 + 8192) * 2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reference_matches_independent_formula(dtype):
    xs = [make_inputs(3, r, 5, 64, dtype, "cpu")[0] for r in range(3)]
    _, residual, weight = make_inputs(3, 1, 5, 64, dtype, "cpu")
    norm, res = reference(xs, residual, weight, 1e-6)
    summed = (xs[0].float() + xs[1].float() + xs[2].float()).to(dtype)
    assert torch.equal(reduce_like_allreduce(xs), summed)
    r = summed.double() + residual.double()
    expect = r / torch.sqrt((r * r).sum(-1, keepdim=True) / 64 + 1e-6) * weight.double()
    assert torch.allclose(norm, expect, rtol=1e-12, atol=0) and torch.equal(res, r)


def test_inputs_differ_per_rank_and_case_and_are_reproducible():
    a = make_inputs(1, 0, 4, 32, torch.bfloat16, "cpu")
    assert all(
        torch.equal(p, q) for p, q in zip(a, make_inputs(1, 0, 4, 32, torch.bfloat16, "cpu"), strict=True)
    )
    assert not torch.equal(a[0], make_inputs(1, 1, 4, 32, torch.bfloat16, "cpu")[0])
    assert not torch.equal(a[0], make_inputs(2, 0, 4, 32, torch.bfloat16, "cpu")[0])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_tolerance_accepts_rounding_and_rejects_two_ulps_and_nan(dtype):
    xs = [make_inputs(5, r, 8, 256, dtype, "cpu")[0] for r in range(2)]
    _, residual, weight = make_inputs(5, 0, 8, 256, dtype, "cpu")
    norm, _ = reference(xs, residual, weight, 1e-6)
    rounded = norm.to(dtype)
    assert compare(rounded, norm, dtype).ok
    # the fp32 path of the kernel: compute in fp32, round once
    r32 = reduce_like_allreduce(xs).float() + residual.float()
    fp32 = (r32 * torch.rsqrt(r32.square().mean(-1, keepdim=True) + 1e-6) * weight.float()).to(dtype)
    assert compare(fp32, norm, dtype).ok
    rtol, _ = tolerance(dtype)
    off = (rounded.double() * (1 + 2.5 * rtol)).to(dtype)
    assert not compare(off, norm, dtype).ok
    poisoned = rounded.clone()
    poisoned[3, 7] = float("nan")
    assert not compare(poisoned, norm, dtype).ok
    with pytest.raises(ValueError):
        tolerance(torch.float32)


def test_a_kernel_variant_not_loaded_at_construction_is_refused_at_world_above_one():
    from tutorials.allreduce_rmsnorm import AllReduceRMSNorm

    op = AllReduceRMSNorm.__new__(AllReduceRMSNorm)  # as built at world 2: the aligned kernels preloaded
    cfg = launch_config(Algorithm.ONESHOT, 4096, 8192, resident_programs=132)
    op.world, op._sealed = 2, True
    op._kernels = {(int(Algorithm.ONESHOT), cfg.num_warps, cfg.batch_rows, True): object()}
    with pytest.raises(ValueError, match="at world > 1 every tensor .* must start at a 16-byte aligned address"):
        op._kernel(Algorithm.ONESHOT, cfg, aligned=False)


def test_parse_tuning():
    from tutorials.allreduce_rmsnorm.allreduce_rmsnorm import parse_tuning

    assert parse_tuning("") == Tuning()
    assert parse_tuning("4") == Tuning(programs_per_sm=4)
    assert parse_tuning("8:2:1") == Tuning(programs_per_sm=8, num_warps=2, batch_rows=1)
    for bad in ("a", "1:2:3:4", "2:x"):
        with pytest.raises(ValueError, match="tuning"):
            parse_tuning(bad)


class _Mapped:
    """A stand-in for runtime.peer()'s view: only its address matters to the op's push choice."""

    def __init__(self, address: int) -> None:
        self.address = address

    def data_ptr(self) -> int:
        return self.address


def _op_choosing_push(monkeypatch, peers: dict[int, int | None], world: int = 4):
    """An op at world ``world``, rank 0, whose workspace is at 0x10000 and whose peer PE p is mapped
    ``peers[p]`` bytes away (None: not reachable by load/store)."""
    from triton_raw_ext import runtime
    from triton_raw_ext.errors import RawRuntimeError
    from tutorials.allreduce_rmsnorm import AllReduceRMSNorm

    def peer(tensor, pe):
        if peers[pe] is None:
            raise RawRuntimeError(f"PE {pe} is not reachable by load/store")
        return _Mapped(tensor.data_ptr() + peers[pe])

    monkeypatch.setattr(runtime, "peer", peer)
    op = AllReduceRMSNorm.__new__(AllReduceRMSNorm)
    op.world, op.rank, op.group = world, 0, None
    op.data = _Mapped(0x10000)
    op.data.element_size = lambda: 2
    return op


def test_push_is_stores_when_every_peer_is_mapped_16_elements_apart(monkeypatch):
    op = _op_choosing_push(monkeypatch, {1: 2 << 30, 2: -(4 << 30), 3: 6 << 30})
    assert op._choose_push(None) == Push.STORES
    assert op._choose_push(Push.PUTS) == Push.PUTS


@pytest.mark.parametrize("peers", [{1: 2 << 30, 2: None, 3: 6 << 30}, {1: 2 << 30, 2: (4 << 30) + 16, 3: 6 << 30}])
def test_push_falls_back_to_puts_and_refuses_forced_stores(monkeypatch, peers):
    """An unreachable peer, or one whose copy is not a multiple of 16 elements away (16-byte vectors
    would break), means NVSHMEM puts; forcing stores then names the reason."""
    op = _op_choosing_push(monkeypatch, peers)
    assert op._choose_push(None) == Push.PUTS
    with pytest.raises(ValueError, match="PE 2"):
        op._choose_push(Push.STORES)


def _op_to_preload(monkeypatch, shared_per_sm: int):
    """An op at world 4, rank 0, H 2048, max_tokens 4096 (both algorithms possible), whose preload
    compiles for sm_90 on the CPU against a device of 132 SMs with ``shared_per_sm`` bytes of shared
    memory; loading (128 registers per thread) and the host barrier are stubbed."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    from triton_raw_ext import kernel_loading, runtime
    from tutorials.allreduce_rmsnorm import AllReduceRMSNorm

    class Driver:
        class utils:
            @staticmethod
            def get_device_properties(index):
                return {"max_shared_mem": shared_per_sm, "multiprocessor_count": 132}

        @staticmethod
        def get_current_target():
            return GPUTarget("cuda", 90, 32)

    def load(kernel):
        kernel.n_regs = 128  # what _init_handles would read from the loaded module
        return kernel

    monkeypatch.setattr(driver, "_active", Driver())
    monkeypatch.setattr(kernel_loading, "load", load)
    monkeypatch.setattr(runtime, "host_barrier", lambda: None)
    op = AllReduceRMSNorm.__new__(AllReduceRMSNorm)
    op.world, op.rank, op.group, op.hidden, op.dtype, op.max_tokens = 4, 0, None, 2048, torch.bfloat16, 4096
    op.layout = WorkspaceLayout(4, 2048, 4096, 2)
    op.device, op.tuning, op.push = torch.device("cuda", 0), Tuning(), Push.STORES
    op._kernels, op._resident, op._sealed = {}, {}, False
    return op


def test_preload_loads_every_algorithm_before_it_seals_the_op(monkeypatch):
    """At world 4 with a large max_tokens a call may pick either algorithm: construction loads both
    kernels (the alignment guard must not refuse the second one during the preload itself),
    then refuses any other kernel."""
    op = _op_to_preload(monkeypatch, 227 * 1024)
    op._preload()
    assert set(op._resident) == {Algorithm.ONESHOT, Algorithm.TWOSHOT}
    assert {key[0] for key in op._kernels} == {int(Algorithm.ONESHOT), int(Algorithm.TWOSHOT)}
    assert op._sealed and op._resident[Algorithm.ONESHOT] == grid_cap(132, programs_per_sm(128, 2, 0, 227 * 1024), 8, 1)
    with pytest.raises(ValueError, match="16-byte aligned"):
        op._kernel(Algorithm.ONESHOT, launch_config(Algorithm.ONESHOT, 1, 2048, 1), aligned=False)


def test_preload_refuses_a_kernel_that_does_not_fit_on_an_sm(monkeypatch):
    op = _op_to_preload(monkeypatch, 512)  # less shared memory than one program reserves
    with pytest.raises(RuntimeError, match=r"the ONESHOT kernel \(H=2048\) does not fit on an SM"):
        op._preload()
    assert not op._sealed


def test_benchmark_variants_name_what_is_wrong():
    from tutorials.allreduce_rmsnorm.benchmark import _variant

    assert _variant("puts")[1:] == (Push.PUTS, Tuning())
    assert _variant("stores:8:2:1")[1:] == (Push.STORES, Tuning(8, 2, 1))
    with pytest.raises(SystemExit, match="PUSH must be puts or stores, got 'Stores'"):
        _variant("Stores:2")
    with pytest.raises(SystemExit, match="tuning: expected"):
        _variant("stores:x")
