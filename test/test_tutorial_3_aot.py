"""Tutorial 3 (MegaMoE): every kernel (bf16 and fp8) compiles ahead of time for sm_90 (no GPU needed)."""

from __future__ import annotations

import re

import pytest
import triton
from conftest import (
    assert_bounded_wait,
    assert_no_spills,
    assert_no_spills_in_wgmma_loops,
    assert_wgmma_pipelined,
    entry_param,
    wgmma_loop_spills,
)
from triton.backends.compiler import GPUTarget

from tutorials.common.aot import launch_source
from tutorials.megamoe import aot
from tutorials.megamoe.launch import barrier_launch

KERNELS = aot.kernels()
FP8_GEMMS = ("moe_l1_swiglu_fp8", "moe_l2_fp8")
SHARED_LIMIT = 232448  # bytes of shared memory one block may use on the H100/H200 (227 KB)


@pytest.mark.nvshmem
@pytest.mark.parametrize("name,src", KERNELS, ids=[n for n, _ in KERNELS])
def test_kernel_compiles_for_sm90(name, src):
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=aot.options_for(name))
    assert compiled.asm["cubin"]
    assert compiled.metadata.shared <= SHARED_LIMIT, f"{compiled.metadata.shared} B of shared memory cannot launch"
    ttgir, ptx = compiled.asm["ttgir"], compiled.asm["ptx"]
    if name in ("moe_l1_swiglu", "moe_l2", "moe_gemms", *FP8_GEMMS):
        assert "warp_group_dot" in ttgir, "the grouped GEMM must use Hopper's wgmma"
        assert "async_copy_global_to_local" in ttgir, "the grouped GEMM must be software-pipelined"
    if name == "moe_gemms":  # L1's weights through TMA (choose_tiles), L2's h past the L1 cache
        assert "async_tma_copy_global_to_local" in ttgir
        assert re.search(r"async_copy_global_to_local .*cache_?[mM]odifier = cg", ttgir)  # moe_l2 alone has none
        # an L1 tile releases its M tile's count (an atom, or a red where the result is unused: Triton
        # 3.9's LLVM); an L2 tile spins on it with acquire loads
        assert re.search(r"(atom|red)\.global\.gpu\.release\.add", ptx) and "ld.global.gpu.acquire" in ptx
    if name in FP8_GEMMS:
        assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k32\.f32\.e4m3\.e4m3", ptx), (
            "the fp8 GEMM must run e4m3 x e4m3 wgmma (fp8 wgmma reads B K-major from shared memory)"
        )
        assert re.search(r"nvmma_shared<\{[^}]*transposed = true[^}]*elementBitWidth = 8", ttgir), (
            "the K-major weight tile must be staged K-contiguous in shared memory"
        )
    if name in ("moe_route_fp8", "moe_l1_swiglu_fp8"):
        assert "cvt.rn.satfinite.e4m3x2.f32" in ptx, "quantization must round to nearest even (as quant)"
        assert "div.rn.f32" in ptx, "the scale division must be IEEE (as torch in quant)"
    if name in ("moe_dispatch", "moe_combine", "moe_dispatch_fp8"):
        assert "nvshmemi_device_state_d" in ptx, "NVSHMEM's device library must be linked"
    if name == "moe_barrier":  # a bounded wait for each peer's word, after this PE's signals
        assert set(compiled.metadata.raw_nvshmem) == {"nvshmemx_signal_op"}
        assert "fence.sc.sys" in ptx or "membar.sys" in ptx, "earlier stores must be published before the signal"
        params = [p for p, _ in barrier_launch(aot.REPRESENTATIVE).params]
        assert_bounded_wait(ptx, entry_param(ptx, params.index("wait_ms")))


def test_every_kernel_listed():
    assert [n for n, _ in KERNELS] == [
        "moe_route",
        "moe_plan",
        "moe_dispatch",
        "moe_place",
        "moe_l1_swiglu",
        "moe_l2",
        "moe_combine",
        "moe_reduce",
        "moe_gemms",
        "moe_route_fp8",
        "moe_dispatch_fp8",
        "moe_l1_swiglu_fp8",
        "moe_l2_fp8",
        "moe_barrier",
        "moe_persistent",
        "moe_persistent_fp8",
        "moe_persistent_gluon",
        "moe_persistent_gluon_bf16",
    ]


@pytest.mark.nvshmem
def test_world_one_variants_compile_without_row_copies():
    """World 1's route, dispatch and combine (no copy, pull or push) compile for sm_90; without the
    pull and push the combine no longer needs NVSHMEM at all."""
    import dataclasses

    world_one = dataclasses.replace(aot.REPRESENTATIVE, num_experts=16, world=1)
    for cfg, launch in aot.all_launches((world_one,)):
        if launch.name not in ("moe_route", "moe_dispatch", "moe_combine"):
            continue
        options = {"num_warps": launch.num_warps, "num_stages": launch.num_stages}
        ptx = triton.compile(aot.ast_source(launch, cfg), target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]
        assert "ld.global.cg.v4" not in ptx or launch.name == "moe_route", f"{launch.name} still copies rows"
        if launch.name == "moe_combine":
            assert "nvshmemi_device_state_d" not in ptx, "world 1's combine must not link NVSHMEM"


@pytest.mark.parametrize("name", ["moe_l1_swiglu", "moe_l2"])
def test_tma_variant_loads_through_tma_and_runs_wgmma(name):
    """Tiles(tma_l1/tma_l2=True): the grouped GEMM creates its descriptors on the device and stages the
    weight (and L2's h) tiles with TMA copies feeding wgmma; it fits in shared memory."""
    import dataclasses

    from tutorials.megamoe.config import choose_tiles
    from tutorials.megamoe.launch import launches

    cfg = aot.REPRESENTATIVE
    tiles = dataclasses.replace(choose_tiles(256, cfg.hidden, cfg.intermediate), tma_l1=True, tma_l2=True)
    (launch,) = [lc for lc in launches(cfg, tiles, cfg.max_tokens) if lc.name == name]
    options = {"num_warps": launch.num_warps, "num_stages": launch.num_stages}
    compiled = triton.compile(aot.ast_source(launch, cfg), target=GPUTarget("cuda", 90, 32), options=options)
    ttgir = compiled.asm["ttgir"]
    assert "ttng.tensormap_create" in ttgir and "ttng.async_tma_copy_global_to_local" in ttgir
    assert "warp_group_dot" in ttgir
    assert compiled.metadata.global_scratch_size > 0, "device-side descriptors need the scratch allocator"
    assert compiled.metadata.shared <= SHARED_LIMIT


@pytest.mark.nvshmem
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.parametrize("world", [1, 2])
def test_persistent_kernel_compiles_with_wgmma_tma_and_bounded_waits(precision, world, tmp_path):
    """impl="persistent" with its default knobs at the production per-rank load: one kernel that runs the
    GEMMs on wgmma (fp8: e4m3 x e4m3, L1's gate and up dots one after the other), pipelines the A rows
    (gathered, or through TMA in pair order), loads L1's weights through TMA, publishes work with release
    atomics and waits with acquire loads through the bounded wait (its bound the wait_ms parameter),
    signals peers with release stores at system scope, fits in shared memory and keeps its registers
    out of local memory."""
    import dataclasses

    from tutorials.megamoe.persistent_launch import choose_persistent, persistent_launch

    cfg = dataclasses.replace(aot.REPRESENTATIVE, precision=precision, world=world, num_experts=16 * world)
    pc = choose_persistent(cfg, gluon=False)
    launch = persistent_launch(cfg, pc, aot.PERSISTENT_PROGRAMS)
    options = {"num_warps": launch.num_warps, "num_stages": launch.num_stages}
    compiled = triton.compile(aot.ast_source(launch, cfg), target=GPUTarget("cuda", 90, 32), options=options)
    ttgir, ptx = compiled.asm["ttgir"], compiled.asm["ptx"]
    assert compiled.metadata.shared <= SHARED_LIMIT
    # L1's K loop keeps num_stages buffers of its A rows and both weight blocks (a loop Triton's pipeliner
    # skips, e.g. for a scale carried to the next step unchanged, gets one)
    element = 1 if precision == "fp8" else 2
    stage = (pc.block_m + 2 * pc.block_n1) * pc.block_k * element
    assert compiled.metadata.shared >= pc.num_stages * stage, (compiled.metadata.shared, stage)
    assert "warp_group_dot" in ttgir and "async_copy_global_to_local" in ttgir
    assert "async_tma_copy_global_to_local" in ttgir, "L1's weights must come through TMA"
    if precision == "fp8":
        assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k32\.f32\.e4m3\.e4m3", ptx)
        # per K block: L1's gate and up dots, L2's two 128-column dots (a w2 scale block each)
        assert ttgir.count("ttng.warp_group_dot ") == 4
        assert "cvt.rn.satfinite.e4m3x2.f32" in ptx and "div.rn.f32" in ptx, "quantization as quant's"
    assert re.search(r"(atom|red)\.release\.gpu\.global\.add|(atom|red)\.global\.gpu\.release\.add", ptx)
    assert "ld.acquire.sys" in ptx and "st.release.sys" in ptx and "fence.proxy.async" in ptx
    assert "nvshmemi_device_state_d" in ptx
    before = launch.params[: [p for p, _ in launch.params].index("wait_ms")]
    # a 2-D tensor descriptor is five .entry parameters: the TMA map, then its shape and strides
    index = sum(5 if key.endswith("_desc") else 1 for _, key in before)
    assert_bounded_wait(ptx, f"moe_persistent_param_{index}")
    assert_wgmma_pipelined(ptx, tmp_path)
    # bf16's half tail tiles make ptxas spill a few per-item values (76 B with Triton 3.6), none in a K loop;
    # the fp8 tiles were chosen with Triton 3.6, and Triton 3.7's register allocation spills 24-52 B there.
    assert_no_spills_in_wgmma_loops(compiled.asm["cubin"], tmp_path)
    if precision == "fp8" and triton.__version__.startswith("3.6."):
        assert_no_spills(ptx, tmp_path)


@pytest.mark.nvshmem
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_persistent_kernel_with_tma_a_loads_l1s_rows_through_tma(precision, tmp_path):
    """``tma_a``: L1's A rows come through a descriptor too (one more descriptor load than the weights and h
    the knobs name), and the kernel still fits in shared memory, pipelines its wgmma and does not spill in
    its K loops."""
    import dataclasses

    from tutorials.megamoe.persistent_launch import choose_persistent, persistent_launch

    cfg = dataclasses.replace(aot.REPRESENTATIVE, precision=precision, world=1, num_experts=16)
    pc = dataclasses.replace(choose_persistent(cfg, gluon=False), tma_a=True)
    launch = persistent_launch(cfg, pc, aot.PERSISTENT_PROGRAMS)
    options = {"num_warps": launch.num_warps, "num_stages": launch.num_stages}
    compiled = triton.compile(aot.ast_source(launch, cfg, pc), target=GPUTarget("cuda", 90, 32), options=options)
    weights = 2 * pc.tma_w1 + (2 if precision == "fp8" else 1) * pc.tma_w2  # two boxes: gate/up; fp8 L2's halves
    tiles = 2 if pc.half_tail else 1  # the half tail tiles load weights and h through the same descriptors
    assert compiled.asm["ttir"].count("tt.descriptor_load") == (weights + pc.tma_h) * tiles + 1
    assert compiled.metadata.shared <= SHARED_LIMIT
    assert_wgmma_pipelined(compiled.asm["ptx"], tmp_path)
    assert_no_spills_in_wgmma_loops(compiled.asm["cubin"], tmp_path)


@pytest.mark.parametrize("name", ["moe_l1_swiglu", "moe_l2", "moe_gemms", *FP8_GEMMS])
def test_grouped_gemm_tiles_do_not_spill(name, tmp_path):
    """The tiles the layer picks keep every GEMM's registers out of local memory (ptxas -v, sm_90a):
    the first fp8 tiles spilled 84 and 240 B and were slower than bf16 on the H200."""
    (src,) = [s for n, s in KERNELS if n == name]
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=aot.options_for(name))
    assert_no_spills(compiled.asm["ptx"], tmp_path)


def test_kernels_do_not_specialise_on_the_integers_of_a_call():
    """The layer preloads each kernel once, from ``meta_bindings`` (max_tokens tokens, rank 0), before any
    call: every later call, with any T, on any rank, must launch that very kernel, so none specialises
    on T, W, me or wait_ms (Triton would on an integer equal to 1 or divisible by 16)."""
    for cfg, launch in aot.all_launches():
        preloaded = aot.ast_source(launch, cfg)
        for ints in ({"T": 1, "me": 1, "W": 1, "wait_ms": 1, "item_begin": 1, "item_end": 1},
                     {"T": 48, "me": 16, "W": 32, "wait_ms": 32000, "item_begin": 16, "item_end": 4096}):  # fmt: skip
            bindings = {**aot.launch_bindings(launch, cfg), **ints}
            source, _ = launch_source(launch.fn, *launch.arguments(bindings), **launch.constexprs)
            assert (source.signature, source.constants, source.attrs) == (
                preloaded.signature, preloaded.constants, preloaded.attrs), (launch.name, ints)


@pytest.mark.parametrize("variant", ["plain", "halves", "scaled", "prefetch", "wide", "fresh", "noload"])
def test_gemm_ceiling_tiles_compile_with_pipelined_wgmma(variant, tmp_path):
    """``gemm_ceiling``'s dense fp8 tiles (the persistent layer's L1 shape, 128 x 256 x 128; ``fresh``
    128 x 128) compile for sm_90 on wgmma of the tile's width with four multi-buffered stages of TMA
    loads and no spill in the K loop, whichever way the scales come in: its comparison is of the K step
    alone."""
    from triton.compiler import ASTSource

    from tutorials.megamoe.gemm_ceiling import dense_tiles

    scaled = {"scaled": 1, "prefetch": 2, "wide": 2, "fresh": 2, "noload": 3}.get(variant, 0)
    block_n = 128 if variant == "fresh" else 256
    box = 128 if variant in ("scaled", "prefetch", "noload", "halves") else block_n
    signature = {"a_desc": "tensordesc<fp8e4nv[128, 128]>", "b_desc": f"tensordesc<fp8e4nv[{box}, 128]>",
                 "c_ptr": "*bf16", "a_scale": "*fp32", "b_scale": "*fp32", "M": "i32", "N": "i32",
                 "K": "i32"}  # fmt: skip
    constexprs = {"NUM_PROGRAMS": 132, "BLOCK_M": 128, "BLOCK_N": block_n, "BLOCK_K": 128, "GROUP_M": 8,
                  "SCALED": scaled, "HALVES": variant == "halves", "WIDE": variant == "wide",
                  "FRESH": variant == "fresh"}  # fmt: skip
    source = ASTSource(dense_tiles, {**signature, **dict.fromkeys(constexprs, "constexpr")}, constexprs)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 4})
    width = 256 if variant in ("plain", "wide") else 128
    assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n{width}k32\.f32\.e4m3\.e4m3", compiled.asm["ptx"])
    assert 4 * (128 + block_n) * 128 <= compiled.metadata.shared <= SHARED_LIMIT
    assert_wgmma_pipelined(compiled.asm["ptx"], tmp_path)
    assert_no_spills_in_wgmma_loops(compiled.asm["cubin"], tmp_path)


def _gluon_scaled_tiles(scaled: bool, fast_accum: bool = False):
    """``gluon_scaled_tiles.scaled_tiles`` compiled for sm_90 as ``scaled_tiles_call`` launches it at MegaMoE's
    L1 shape at the production load (M 4096, N 3072, K 4096): fp8 A and B in [128, 128] blocks with float32
    scales (``scaled``; ``fast_accum``: sums kept in the tensor cores), or bf16 in [128, 64] blocks without."""
    from conftest import aot
    from triton.experimental.gluon import language as gl

    from tutorials.megamoe.gluon_scaled_tiles import consumer_regs, scaled_tiles

    dtype, name, block = (gl.float8e4nv, "fp8e4nv", [128, 128]) if scaled else (gl.bfloat16, "bf16", [128, 64])
    desc = f"tensordesc<{name}[{block[0]}, {block[1]}],{gl.NVMMASharedLayout.get_default_for(block, dtype)!r}>"
    c_layout = gl.NVMMASharedLayout.get_default_for([64, 128], gl.bfloat16)
    scale = "*fp32" if scaled else "*bf16"  # without scales the call passes C, which the kernel does not read
    signature = {"a_desc": desc, "b_desc": desc, "c_desc": f"tensordesc<bf16[64, 128],{c_layout!r}>",
                 "a_scale": scale, "b_scale": scale}  # fmt: skip
    constexprs = {"M": 4096, "N": 3072, "K": 4096, "NUM_PROGRAMS": 132, "GROUP_M": 8, "STAGES": 4,
                  "CONSUMER_REGS": consumer_regs(scaled, fast_accum), "LOADER_REGS": 40, "SCALED": scaled,
                  "FAST_ACCUM": fast_accum}  # fmt: skip
    return aot(scaled_tiles, {**signature, **dict.fromkeys(constexprs, "constexpr")}, constexprs, num_warps=4)


def test_gluon_scaled_tiles_warp_specialize_and_promote_each_k_block(tmp_path):
    """``gluon_scaled_tiles`` (the warp-specialized fp8 tile) compiles for sm_90 with fp8 wgmma on four TMA
    stages, its partitions' registers reallocated (setmaxnreg: the two float32 sums and the K block's
    product fit); ptxas spills nothing inside the K loops (per-tile values around them) and neither
    serializes its wgmmas nor adds waits (C75xx); in the
    SASS each consumer waits for each K block's lo and hi products (``WARPGROUP.DEPBAR.LE gsb0, 0x0``, no
    other kind of wait) and promotes both into their sums: a fused multiply-add per accumulator register of
    a thread (64 x 128 / 128) for each, some of them beside its next wgmma. Each consumer
    stores its tile's two halves by TMA (two bulk tensor stores each) from a store buffer of its own."""
    from conftest import ptxas_report, sass, wgmma_loop_spills

    compiled = _gluon_scaled_tiles(scaled=True)
    ptx = compiled.asm["ptx"]
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n128k32\.f32\.e4m3\.e4m3", ptx)
    assert "setmaxnreg.inc.sync.aligned.u32 \t248" in ptx and "setmaxnreg.dec.sync.aligned.u32 \t40" in ptx
    assert 4 * 3 * 128 * 128 + 2 * 64 * 128 * 2 <= compiled.metadata.shared <= SHARED_LIMIT
    report = ptxas_report(ptx, tmp_path)
    assert not re.search(r"\(C75\d\d\)", report), report
    code = sass(compiled.asm["cubin"], tmp_path)
    assert not wgmma_loop_spills(code.splitlines())
    assert len(re.findall(r"\bUTMASTG\.2D\b", code)) == 4, "two TMA stores per consumer"
    ops = re.findall(r"\b(FFMA|QGMMA|WARPGROUP\.DEPBAR\.LE gsb0, 0x\d)", code)
    waits = [i for i, op in enumerate(ops) if op.startswith("WARPGROUP")]
    assert {ops[i] for i in waits} == {"WARPGROUP.DEPBAR.LE gsb0, 0x0"}, ops
    assert len(waits) == 4, ops  # lo and hi, per consumer
    for lo, end in ((waits[0], waits[2]), (waits[2], len(ops))):  # ptxas may promote lo after hi's wait
        assert ops[lo + 1 : end].count("FFMA") >= 2 * 64 * 128 // 128, ops[lo + 1 : end]


def test_gluon_scaled_tiles_fast_accum_rescales_beside_wgmma(tmp_path):
    """``gluon_scaled_tiles`` with ``FAST_ACCUM`` (each sum kept in the tensor cores, rescaled per K block)
    compiles for sm_90 with no spills and no wgmma serialized (C75xx); in the SASS each consumer waits three
    times per two K blocks with one wgmma left in flight (``WARPGROUP.DEPBAR.LE gsb0, 0x1``), and each such
    wait is followed, before the next wait, by the rescale that runs beside that wgmma: a multiply per
    accumulator register of a thread (64 x 128 / 128)."""
    from conftest import ptxas_report, sass

    compiled = _gluon_scaled_tiles(scaled=True, fast_accum=True)
    ptx = compiled.asm["ptx"]
    assert_no_spills(ptx, tmp_path)
    assert not re.search(r"\(C75\d\d\)", ptxas_report(ptx, tmp_path))
    code = sass(compiled.asm["cubin"], tmp_path)
    ops = re.findall(r"\b(FMUL|WARPGROUP\.DEPBAR\.LE gsb0, 0x\d)", code)
    waits = [i for i, op in enumerate(ops) if op == "WARPGROUP.DEPBAR.LE gsb0, 0x1"]
    assert len(waits) == 6, ops  # three per consumer
    for i in waits:
        following = ops[i + 1 :]
        beside = following[: next((j for j, op in enumerate(following) if op != "FMUL"), len(following))]
        assert len(beside) >= 64 * 128 // 128 - 2, following


def test_gluon_scaled_tiles_without_scales_run_the_bf16_k_loop(tmp_path):
    """``gluon_scaled_tiles`` without scales (bf16, ``SCALED`` off) compiles for sm_90 with bf16 wgmma on four
    TMA stages and the persistent kernel's bf16 K loop: per four K blocks each consumer waits three times with
    a K block's pair of wgmmas in flight and once for all; no spills, no wgmma serialized (C75xx)."""
    from conftest import ptxas_report, sass

    compiled = _gluon_scaled_tiles(scaled=False)
    ptx = compiled.asm["ptx"]
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16", ptx)
    assert "e4m3" not in ptx
    assert_no_spills(ptx, tmp_path)
    report = ptxas_report(ptx, tmp_path)
    assert not re.search(r"\(C75\d\d\)", report), report
    waits = re.findall(r"\bWARPGROUP\.DEPBAR\.LE gsb0, 0x(\d)", sass(compiled.asm["cubin"], tmp_path))
    assert sorted(set(waits)) == ["0", "2"] and waits.count("2") == 3 * waits.count("0"), waits


def _assert_k_loops_reload_only_the_shared_memory_base(code: str) -> None:
    """In the SASS ``code`` of a Gluon persistent kernel, the wgmma loops reload at most the shared memory base
    from the stack (an LDL of a word at [R1 + offset], kept there across the partitions' register
    reallocation), twice at most, and spill nothing else."""
    spills = wgmma_loop_spills(code.splitlines())
    assert len(spills) <= 2 and all(re.search(r"\bLDL R\d+, \[R1(\+0x[0-9a-f]+)?\] ;", line) for line in spills), spills


@pytest.mark.parametrize("name", ["moe_persistent_gluon", "moe_persistent_gluon_bf16"])
def test_gluon_persistent_kernel_compiles_with_tma_stages_and_inlined_waits(name, tmp_path):
    """``gluon_persistent.moe_persistent_gluon`` (the call at world 1 in Gluon) with ``tma_a`` (dispatch copies the pair
    rows, L1 loads them by TMA), fp8 and bf16, compiles for sm_90 with four stages: fp8 / bf16 wgmma from the
    stages, registers reallocated per partition, shared memory within an SM's, the raw bounded waits, signal and
    SwiGLU inlined (no raw function left), no wgmma serialized and no wait added by ptxas (C75xx). fp8: each
    consumer's two K loops (L1's, L2's) wait for each K block's lo and hi products, none left in flight; bf16: its
    one K loop (L1's and L2's) three times per four K blocks with two (a K block's pair) in flight, then for all. In
    the K loops ptxas reloads at most one word from the stack (the shared memory base, kept there across the
    partitions' register reallocation), and nothing else: the buffers' addresses come from a table where they are
    used, so no consumer holds them. The loader stores the dispatch items' rows by TMA and waits for their writes
    before counting them."""
    import dataclasses

    from conftest import assert_raw_inlined, ptxas_report, sass

    from tutorials.megamoe.persistent_launch import choose_persistent, persistent_launch

    fp8 = name == "moe_persistent_gluon"
    ((cfg, default),) = [(c, launch) for c, launch in aot.all_launches() if launch.name == name]
    assert (cfg.world, cfg.precision) == (1, "fp8" if fp8 else "bf16")
    pc = dataclasses.replace(choose_persistent(cfg), tma_a=True, dispatch_rows=4 if fp8 else 2)
    launch = persistent_launch(cfg, pc, aot.PERSISTENT_PROGRAMS)
    compiled = triton.compile(aot.ast_source(launch, cfg, pc), target=GPUTarget("cuda", 90, 32),
                              options=aot.options_for(default.name))  # fmt: skip
    ptx = compiled.asm["ptx"]
    assert_raw_inlined(compiled)
    mma = r"m64n128k32\.f32\.e4m3\.e4m3" if fp8 else r"m64n128k16\.f32\.bf16\.bf16"
    assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.{mma}", ptx)
    regs = 248 if fp8 else 232  # fp8: two float32 sums and a K block's product per consumer
    assert f"setmaxnreg.inc.sync.aligned.u32 \t{regs}" in ptx and "setmaxnreg.dec.sync.aligned.u32 \t40" in ptx
    assert "st.release.sys.b64" in ptx and "nanosleep" in ptx, "the plan flag's signal; the gentle polls"
    assert "ex2.approx.ftz.f32" in ptx and "rcp.approx.ftz.f32" in ptx, "the SwiGLU epilogue's raw moe_swiglu"
    # what an expired wait writes into its report, byte by byte: the plan item waits for the routed tokens
    reported = "".join(chr(int(b)) for b in re.findall(r"st\.volatile\.b8\s+\[[^\]]+\],\s*(\d+);", ptx))
    assert "tokens routed" in reported and "plan flag" not in reported
    assert 4 * 3 * 128 * 128 <= compiled.metadata.shared <= SHARED_LIMIT
    # dispatch in the loader: each of an item's rows (fp8: 4 tokens, bf16: 2) stored by TMA to its 8 pairs'
    # places, then a wait for the stores' writes (not only their reads of shared memory) and the proxy fence
    # before the counts; bf16's token rows through a descriptor the kernel makes (x changes from call to call)
    stores = re.findall(r"cp\.async\.bulk\.tensor\.3d\.global\.shared::cta", ptx)
    assert len(stores) == (4 if fp8 else 2) * 8
    code = [line.strip() for line in ptx.splitlines() if line.strip() and not line.strip().startswith((".loc", "//"))]
    waits = [code[i + 1] for i, line in enumerate(code) if line == "cp.async.bulk.wait_group 0;"]
    assert waits == ["fence.proxy.async.global;"]
    assert ("fence.proxy.tensormap::generic.acquire.gpu" in ptx) is not fp8
    assert not re.search(r"\(C75\d\d\)", ptxas_report(ptx, tmp_path))
    code = sass(compiled.asm["cubin"], tmp_path)
    waits = [int(n, 16) for n in re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x\d+)\b", code)]
    if fp8:  # per consumer and K loop: the lo and the hi product of a K block, each before it is promoted
        assert waits == [0] * 2 * 2 * 2, waits
    else:
        assert (waits.count(2), waits.count(0), len(waits)) == (2 * 3, 2, 2 * 4)
    _assert_k_loops_reload_only_the_shared_memory_base(code)


@pytest.mark.parametrize("name", ["moe_persistent_gluon", "moe_persistent_gluon_bf16"])
def test_gluon_persistent_kernel_gathers_l1s_rows_without_tma_a(name, tmp_path):
    """The Gluon kernel as the layer launches it (``tma_a`` off) compiles for sm_90 with L1's A rows gathered by its
    loader, now 4 warps within the registers its warpgroup had: 16-byte cp.async copies into the stages, each
    thread's copies counted on the stage's barrier (one cp.async.mbarrier.arrive, after which the partition syncs
    before one thread's expect-tx arrival), a proxy fence after each L1 stage's wait in each consumer (generic
    writes read by wgmma), and no TMA stores: dispatch copies no row. No wgmma is serialized and the K loops reload
    at most the shared memory base from the stack."""

    from conftest import ptxas_report, sass

    from tutorials.megamoe.persistent_launch import choose_persistent

    ((cfg, launch),) = [(c, launch) for c, launch in aot.all_launches() if launch.name == name]
    assert not choose_persistent(cfg).tma_a and launch.constexprs["GATHER_A"] is True
    compiled = triton.compile(aot.ast_source(launch, cfg), target=GPUTarget("cuda", 90, 32),
                              options=aot.options_for(launch.name))  # fmt: skip
    ptx = compiled.asm["ptx"]
    code = [line.strip() for line in ptx.splitlines() if line.strip() and not line.strip().startswith((".loc", "//"))]
    copies = [line for line in code if line.startswith("cp.async.cg.shared.global")]
    assert len(copies) == 8 and all(", 0x10," in line for line in copies), copies  # a 128 x 128 B stage, 128 threads
    arrive = code.index(next(line for line in code if line.startswith("cp.async.mbarrier.arrive.shared.b64")))
    assert ".noinc" not in code[arrive]
    assert code[arrive + 1].startswith("bar.sync")
    assert "mbarrier.arrive.expect_tx" in "".join(code[arrive + 1 : arrive + 4])
    assert "setmaxnreg.dec.sync.aligned.u32 \t40" in ptx
    assert "fence.proxy.async.shared::cta" in ptx
    assert not re.search(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared::cta", ptx), "dispatch stores no row"
    assert compiled.metadata.shared <= SHARED_LIMIT
    assert not re.search(r"\(C75\d\d\)", ptxas_report(ptx, tmp_path))
    _assert_k_loops_reload_only_the_shared_memory_base(sass(compiled.asm["cubin"], tmp_path))


def test_spills_count_only_inside_the_loops_that_run_wgmma():
    """``wgmma_loop_spills`` reports the spills of an innermost wgmma loop, not those of the loop around it,
    of straight-line code or of code after the loop that an out-of-line block branches back over, also in a
    warp-specialized partition."""
    sass = """
        STL [R1], R2 ;
    .L_x_1:
        LDL R3, [R1] ;
    .L_x_2:
        HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;
        LDL.64 R4, [R1+0x8] ;
        @P0 BRA `(.L_x_2) ;
        LDL R5, [R1+0x4] ;
        @P1 BRA `(.L_x_1) ;
    """.splitlines()
    assert wgmma_loop_spills(sass) == ["LDL.64 R4, [R1+0x8] ;"]
    assert wgmma_loop_spills([line for line in sass if "LDL.64" not in line]) == []
    # ptxas puts a barrier wait's retry out of line after the kernel's exit, branching back into the loop:
    # part of the loop, and no loop of its own that would take in the spill after the loop
    retry = """
    .L_x_3:
        @!P0 BRA `(.L_x_9) ;
    .L_x_4:
        QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24 ;
        @P1 BRA `(.L_x_3) ;
        LDL R6, [R1+0xc] ;
        EXIT ;
    .L_x_9:
        SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR8], R7 ;
        @!P0 BRA `(.L_x_9) ;
        BRA `(.L_x_4) ;
    """.splitlines()
    assert wgmma_loop_spills(retry) == []
    assert wgmma_loop_spills([*retry[:3], "    STL [R1+0x10], R8 ;", *retry[3:]]) == ["STL [R1+0x10], R8 ;"]
    # a warp-specialized partition is entered through the BRX of the kernel's start, at its tile loop's head
    # (a block other blocks branch to): its K loop is a loop of that partition's
    partition = """
        BRX R2 -0x40 (*"BRANCH_TARGETS .L_x_5,.L_x_6"*);
    .L_x_5:
        EXIT ;
    .L_x_6:
        LDL R3, [R1] ;
    .L_x_7:
        QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24 ;
        STL [R1+0x4], R9 ;
        @P0 BRA `(.L_x_7) ;
        @P1 BRA `(.L_x_6) ;
        EXIT ;
    """.splitlines()
    assert wgmma_loop_spills(partition) == ["STL [R1+0x4], R9 ;"]
