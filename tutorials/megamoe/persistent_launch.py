"""Launch description of the persistent MegaMoE call (``persistent.moe_persistent``, or with the ``gluon``
knob ``gluon_persistent.moe_persistent_gluon``): pure Python.

Contract: :class:`PersistentConfig` holds every knob a GPU sweep varies (GEMM tiles, pipeline stages,
warps, program count, TMA per operand, the sizes of the small items, the Gluon kernel);
:func:`choose_persistent` picks the defaults for a layer (:func:`persistent_config`: with overrides).
:func:`persistent_buffers` lists the buffers the kernel needs besides ``MoEConfig``'s (symmetric, then
local; zero when allocated). :func:`persistent_launch` is the one ``launch.KernelLaunch`` of a call: its
parameters name binding keys as ``launch`` does, plus the buffers above, the weights of
:func:`persistent_weights`, and :func:`call_extras`: the tensor descriptors of the operands loaded through
TMA (``w1_desc``, ``w2_desc``, ``h_desc``, ``a_desc``), the items to run (``item_begin`` / ``item_end``: all
of them, except in the CPU simulation) and the Gluon kernel's table of buffer addresses
(``buffer_table``). Nothing specialises on the token count or the rank.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from triton_raw_ext.triton_version import serializes_wgmma_in_flight_across_loops

from .config import FP8_BLOCK, MoEConfig, next_pow2
from .launch import KernelLaunch, row_block
from .persistent import TRACE_FIELDS, Schedule, cdiv, moe_persistent


@dataclass(frozen=True)
class PersistentConfig:
    """Knobs of the persistent kernel.

    GEMMs: ``block_m`` pairs per M tile (L1 and L2 share the M tiles), ``block_n1`` columns per gate/up
    half of an L1 tile, ``block_n2`` columns of an L2 tile, ``block_k`` the K step, ``group_m`` M tiles
    walked together (M fastest inside), ``num_warps`` / ``num_stages`` for the whole kernel. fp8 fixes
    ``block_k`` and ``block_n1`` at 128, the scale block. ``tma_w1`` / ``tma_w2`` / ``tma_h``: load the
    L1 weights, the L2 weights, the L2's h rows through TMA descriptors (else pointer loads). ``tma_a``:
    dispatch also copies each pair's A row to its place in the pair layout (``a_sorted``), and L1 loads
    it through a TMA descriptor (else L1 gathers the received rows with pointer loads; in the Gluon kernel its
    loader gathers the token rows by cp.async, and dispatch copies no row). ``programs``: the
    grid (0: the GPU's SMs divided by the PEs sharing it). Small items: ``route_tokens`` x ``route_cols``
    per route item, ``dispatch_rows``, ``combine_rows`` and ``reduce_rows`` per item of those regions
    (powers of two). ``trace``: every item records when it ran
    and where into the local ``trace`` buffer (``persistent.TRACE_FIELDS``; ``trace_persistent`` reads it).
    ``half_tail`` (bf16, h not through TMA): an expert's last M tile with at most ``block_m / 2`` pairs runs
    its L1 and L2 tiles at half the rows, its A rows gathered even where ``tma_a`` (random routing leaves
    many such tiles nearly empty). ``gluon`` (world 1): the call runs as
    ``gluon_persistent.moe_persistent_gluon``, the same items warp-specialized in Gluon (128-row tiles,
    256-column L2 tiles, every GEMM operand through TMA but L1's A rows where ``tma_a`` is off, 2 to 4 stages,
    K-major weights; :func:`gluon_misfit` says where it runs, and :func:`choose_persistent` turns it on
    there). ``fast_accum`` (fp8): keep each GEMM tile's sums in the tensor cores, rescaled per K block,
    instead of promoting each K block's product into float32 sums (3x the error from the quantization-aware
    reference at the production load, and over the check's bound at H 7168; the Gluon kernel 1-2 % faster
    there). The Triton kernel's promoted sums fit its registers at 64-row tiles only
    (``persistent._scaled_step``), with its sums in the tensor cores 128 rows.
    """

    block_m: int = 64
    block_n1: int = FP8_BLOCK
    block_n2: int = 256
    block_k: int = FP8_BLOCK
    num_warps: int = 8
    num_stages: int = 4
    group_m: int = 8
    programs: int = 0
    tma_w1: bool = True
    tma_w2: bool = True
    tma_h: bool = False
    tma_a: bool = False
    route_tokens: int = 32
    route_cols: int = 1024
    dispatch_rows: int = 8
    combine_rows: int = 4
    reduce_rows: int = 4
    trace: bool = False
    half_tail: bool = False
    gluon: bool = False
    fast_accum: bool = False


def choose_persistent(cfg: MoEConfig, gluon: bool = True, fast_accum: bool = False) -> PersistentConfig:
    """Defaults for layer ``cfg``. fp8: N 128 per gate/up half in L1 and 256 in L2, 8 warps, weights through
    TMA, 16 tokens per route item; with more than 96 pairs per expert expected L1's A rows through TMA and
    4 stages, else 3 stages; 64-row tiles, whose registers leave room for promoting each K block's sums
    (:attr:`PersistentConfig.fast_accum`), and with ``fast_accum`` 128-row tiles where more than 96 pairs
    per expert are expected (the H200 ran the production load's L1 tiles 24 % faster per row than at 64
    rows). bf16 with more than 96 pairs per expert expected: 128 x 128 (x2) L1 and 128 x 256 L2 tiles,
    K 64, 8 warps, 3 stages, L1's weights through TMA (faster than pointers on the H200, where L2's were
    not), half-row tail tiles (4-5 % faster at the production load; ptxas spills a few per-item values for
    them, none in a K loop); fewer pairs: 64-row tiles and 4 warps. Where the Gluon kernel runs (more
    than 96 pairs per expert expected, world 1, :func:`gluon_misfit`), it unless ``gluon`` is False (the
    H200 ran the production load's call 4-7 % faster than in the Triton kernel in fp8, 2-5 % in bf16, whose
    K-major copy of the weights it makes), with 128-row tiles, every GEMM operand through TMA but L1's A
    rows, which its loader gathers (``tma_a`` off: dispatch copies no row; on an H100 the fp8 call took 4 %
    less time, bf16 3 %), 4 stages, 4 tokens per dispatch item and per combine item (an item takes one column
    chunk of them: at the production load the last chunk's 128 items spread over the programs)."""
    h, i = cfg.hidden, cfg.intermediate
    big = cfg.max_tokens * cfg.world * cfg.top_k / cfg.num_experts > 96
    if cfg.precision == "fp8":  # 16-token route items: 32 kept the kernel at 255 registers and spilled
        pc = PersistentConfig(block_m=128 if big and fast_accum else 64, block_n2=256 if h % 256 == 0 else FP8_BLOCK,
                              num_stages=4 if big else 3, tma_a=big, route_tokens=16,
                              fast_accum=fast_accum)  # fmt: skip
    elif big:
        pc = PersistentConfig(block_m=128, block_n1=128 if i % 128 == 0 else 64,
                              block_n2=next(n for n in (256, 128, 64) if h % n == 0), block_k=64, num_stages=3,
                              tma_w2=False, half_tail=True)  # fmt: skip
    else:
        pc = PersistentConfig(block_m=64, block_n1=64, block_n2=next(n for n in (128, 64) if h % n == 0), block_k=64,
                              num_warps=4, num_stages=3, tma_w2=False)  # fmt: skip
    if not (gluon and big):
        return pc
    gluon_pc = dataclasses.replace(pc, gluon=True, block_m=128, block_n1=FP8_BLOCK, num_stages=4, tma_a=False,
                                   tma_w1=True, tma_w2=True, half_tail=False, dispatch_rows=4,
                                   combine_rows=4)  # fmt: skip
    return pc if gluon_misfit(cfg, gluon_pc) else gluon_pc


def persistent_config(cfg: MoEConfig, knobs: dict[str, Any]) -> PersistentConfig:
    """:func:`choose_persistent`'s knobs for ``cfg`` with ``knobs`` over them: the Gluon kernel's where it runs
    them, unless ``knobs`` sets ``gluon`` (False: the Triton kernel's; True: the Gluon kernel's, which
    ``persistent_launch`` refuses where it cannot run), else the Triton kernel's (e.g. ``block_m=64``). With
    ``tma_a`` the Gluon kernel's tokens per dispatch item fit its stage (:func:`_fit_dispatch_rows`) unless
    ``knobs`` set them."""
    fast_accum = bool(knobs.get("fast_accum", False))
    base = choose_persistent(cfg, gluon=bool(knobs.get("gluon", True)), fast_accum=fast_accum)
    pc = _fit_dispatch_rows(cfg, dataclasses.replace(base, **knobs), knobs)
    if "gluon" not in knobs and pc.gluon and gluon_misfit(cfg, pc):
        return dataclasses.replace(choose_persistent(cfg, gluon=False, fast_accum=fast_accum), **knobs)
    return pc


def _fit_dispatch_rows(cfg: MoEConfig, pc: PersistentConfig, knobs: dict[str, Any]) -> PersistentConfig:
    """``pc`` with, where the Gluon kernel's dispatch items copy their token rows through a stage's 16 KB A
    buffer (``tma_a``) and ``knobs`` leave ``dispatch_rows`` unset, the most of its tokens per item (halved from
    the default) whose rows fit that buffer: bf16 rows, or fp8 rows of H 7168, take 2 where the gathering
    default takes 4."""
    if not (pc.gluon and pc.tma_a) or "dispatch_rows" in knobs:
        return pc
    rows = pc.dispatch_rows
    while rows > 1 and not _dispatch_rows_fit(cfg, rows):
        rows //= 2
    return dataclasses.replace(pc, dispatch_rows=rows)


def knob_overrides(pairs: Iterable[str]) -> dict[str, Any]:
    """``PersistentConfig`` field overrides from ``NAME=VALUE`` strings (ints; 1/true/yes or anything
    else for the booleans); ValueError naming the pair and the fields when one is not of that form."""
    fields = {f.name: f.type for f in dataclasses.fields(PersistentConfig)}
    out: dict[str, Any] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in fields or not value:
            raise ValueError(f"{pair!r}: use NAME=VALUE with NAME one of {sorted(fields)}")
        out[name] = value.lower() in ("1", "true", "yes") if fields[name] in (bool, "bool") else int(value)
    return out


def _row_boxes(cfg: MoEConfig) -> int:
    """256-column chunks in a Gluon dispatch box of one token's row: H / 256 rounded up to a power of two."""
    return next_pow2(cfg.hidden // 256)


def _dispatch_rows_fit(cfg: MoEConfig, rows: int) -> bool:
    """Whether ``rows`` token rows of a Gluon dispatch item (``tma_a``) fit a stage's 16 KB A buffer."""
    return rows * _row_bytes(cfg) <= GLUON_STAGE_A_BYTES


def _row_bytes(cfg: MoEConfig) -> int:
    """Bytes of a token's row as the Gluon dispatch box holds it: e4m3 in fp8, else bf16."""
    return _row_boxes(cfg) * 256 * (1 if cfg.precision == "fp8" else 2)


def gluon_misfit(cfg: MoEConfig, pc: PersistentConfig) -> str | None:
    """Why the Gluon kernel cannot run layer ``cfg`` with the knobs ``pc`` (its rule and what breaks it), or
    None where it can."""
    h, i = cfg.hidden, cfg.intermediate
    if cfg.world != 1 or h % 256 or i % 256:
        return (f"runs at world 1 with hidden and intermediate multiples of 256 (the Gluon kernel has no pull or "
                f"push between ranks; its consumers take two or four K blocks a step), got world {cfg.world}, "
                f"hidden {h}, intermediate {i}: set gluon=False")  # fmt: skip
    k_step = FP8_BLOCK if cfg.precision == "fp8" else GLUON_BF16_BLOCK_K
    tiles = (pc.block_m, pc.block_n1, pc.block_n2, pc.block_k, pc.tma_w1, pc.tma_w2, pc.half_tail,
             2 <= pc.num_stages <= 4)  # fmt: skip
    if tiles != (128, FP8_BLOCK, 2 * FP8_BLOCK, k_step, True, True, False, True):
        return (f"needs block_m=128, block_n1=128, block_n2=256, block_k={k_step}, tma_w1 and tma_w2, no "
                f"half_tail and 2 to 4 stages (its tiles: two 64-row consumers, 48 KB stages), got "
                f"block_m={pc.block_m}, block_n1={pc.block_n1}, block_n2={pc.block_n2}, block_k={pc.block_k}, "
                f"tma_w1={pc.tma_w1}, tma_w2={pc.tma_w2}, half_tail={pc.half_tail}, "
                f"num_stages={pc.num_stages}")  # fmt: skip
    if cfg.top_k > 32:
        return (f"holds a token's pairs' y_pair rows in one 16 KB stage buffer, at least 256 columns each: top_k "
                f"must be <= 32, got {cfg.top_k}: set gluon=False")  # fmt: skip
    if pc.route_tokens < 2:
        return (f"splits each route item's tokens between its two consumers: route_tokens must be >= 2, got "
                f"{pc.route_tokens}")  # fmt: skip
    if pc.tma_a and not _dispatch_rows_fit(cfg, pc.dispatch_rows):
        return (f"holds a dispatch item's token rows in one 16 KB stage buffer, each a TMA box of hidden / 256 "
                f"chunks rounded up to a power of two: dispatch_rows * the row's box bytes must be <= 16384, got "
                f"{pc.dispatch_rows} * {_row_bytes(cfg)}: lower dispatch_rows")  # fmt: skip
    return None


def _check(cfg: MoEConfig, pc: PersistentConfig) -> None:
    """Raise ValueError naming the knob when ``pc`` cannot run layer ``cfg``."""
    h, i = cfg.hidden, cfg.intermediate
    if cfg.precision == "fp8" and (pc.block_k, pc.block_n1) != (FP8_BLOCK, FP8_BLOCK):
        raise ValueError(
            f"PersistentConfig: fp8 needs block_k = block_n1 = {FP8_BLOCK} (one scale block per K step and per "
            f"h tile), got block_k={pc.block_k}, block_n1={pc.block_n1}"
        )
    if cfg.precision == "fp8" and pc.block_n2 not in (FP8_BLOCK, 2 * FP8_BLOCK):
        raise ValueError(f"PersistentConfig: fp8 needs block_n2 {FP8_BLOCK} or {2 * FP8_BLOCK} (one or two scale "
                         f"blocks), got {pc.block_n2}")
    for name, dim, block in (("block_n1", i, pc.block_n1), ("block_n2", h, pc.block_n2), ("block_k", h, pc.block_k),
                             ("block_k", i, pc.block_k)):  # fmt: skip
        if dim % block:
            raise ValueError(f"PersistentConfig.{name}={block} does not divide {dim} (hidden {h}, intermediate {i})")
    for name in ("block_m", "block_n1", "block_n2", "block_k", "route_tokens", "dispatch_rows", "combine_rows",
                 "reduce_rows", "num_warps"):  # fmt: skip
        value = getattr(pc, name)
        if value < 1 or value & (value - 1):
            raise ValueError(f"PersistentConfig.{name}={value} must be a power of two")
    if pc.half_tail and (cfg.precision == "fp8" or pc.tma_h or pc.block_m < 32):
        raise ValueError(
            f"PersistentConfig.half_tail needs bf16, tma_h=False (the h descriptor's box is block_m rows) and "
            f"block_m >= 32 (tl.dot needs 16 rows), got {cfg.precision}, tma_h={pc.tma_h}, block_m={pc.block_m}"
        )
    if pc.gluon and (misfit := gluon_misfit(cfg, pc)):
        raise ValueError(f"PersistentConfig.gluon {misfit}")
    if cfg.precision == "fp8" and not pc.gluon and not pc.fast_accum and pc.block_m > 64:
        raise ValueError(
            f"PersistentConfig.block_m={pc.block_m}: the Triton kernel's fp8 sums, promoted per K block, fit its "
            f"registers at block_m <= 64 (more rows spill inside the K loops); set fast_accum=1 for {pc.block_m}-row "
            f"tiles that keep their sums in the tensor cores"
        )
    if pc.block_m < 16:
        raise ValueError(f"PersistentConfig.block_m={pc.block_m}: tl.dot needs at least 16 rows")
    if pc.programs < 0 or pc.num_stages < 1 or pc.group_m < 1:
        raise ValueError(f"PersistentConfig: programs >= 0, num_stages >= 1, group_m >= 1 (got {pc})")


def _route_cols(cfg: MoEConfig, pc: PersistentConfig) -> int:
    """Columns of x per route item: the largest power of two <= route_cols dividing H (fp8: >= 128); all H
    in bf16 at world 1, whose route items neither quantize nor copy x (one item per ``route_tokens``)."""
    if cfg.precision != "fp8" and cfg.world == 1:
        return cfg.hidden
    return row_block(cfg.hidden, max(pc.route_cols, FP8_BLOCK) if cfg.precision == "fp8" else max(pc.route_cols, 64))


def schedule(cfg: MoEConfig, pc: PersistentConfig) -> Schedule:
    """The work items of one call of layer ``cfg`` with knobs ``pc`` (the Gluon kernel's combine items take
    :func:`gluon_combine_cols` columns each)."""
    chunks = cfg.hidden // _route_cols(cfg, pc)
    return Schedule.of(
        cfg, block_m=pc.block_m, n1_tiles=cfg.intermediate // pc.block_n1, n2_tiles=cfg.hidden // pc.block_n2,
        route_items=cdiv(cfg.max_tokens, pc.route_tokens) * chunks, dispatch_rows=pc.dispatch_rows,
        combine_rows=pc.combine_rows, reduce_rows=pc.reduce_rows,
        combine_chunks=cfg.hidden // gluon_combine_cols(cfg) if pc.gluon else 1,
    )  # fmt: skip


def persistent_buffers(
    cfg: MoEConfig, pc: PersistentConfig
) -> tuple[list[tuple[str, tuple[int, ...], str]], list[tuple[str, tuple[int, ...], str]]]:
    """(symmetric, local) buffers of the persistent kernel besides ``cfg``'s, as (name, shape, dtype name).
    ``sched``, ``call_epoch``, ``plan_flag`` and ``comb_flag`` carry over between calls
    (``config.STATE_BUFFERS``)."""
    sch = schedule(cfg, pc)
    w, t, k = cfg.world, cfg.max_tokens, cfg.top_k
    symmetric = [
        ("pair_rank", (t, k), "int32"),  # pair (t, k): its rank among this rank's pairs for its expert
        ("send_pairs", (w, cfg.local_experts), "int32"),  # per destination and its local expert: pairs sent
        ("plan_flag", (w,), "int64"),  # [src]: the last call whose plan src finished for this rank
        ("comb_flag", (w,), "int64"),  # [src]: the last call whose combine src pushed into this rank
    ]
    local = [
        ("layout", (sch.layout_words,), "int32"),  # this call's pair layout (persistent._layout_item)
        ("sched", (sch.sched_words,), "int32"),  # the kernel's work counters, zero between calls
        ("call_epoch", (1,), "int64"),  # calls this rank has run
    ]
    if pc.trace:
        local.append(("trace", (sch.starts()["N_ITEMS"], len(TRACE_FIELDS)), "int64"))
    if pc.tma_a:  # each pair's A row at its layout position
        local.append(("a_sorted", (cfg.pair_capacity, cfg.hidden), cfg.operand_dtype))
    return symmetric, local


def persistent_weights(cfg: MoEConfig, weights: dict[str, Any], pc: PersistentConfig) -> dict[str, Any]:
    """The weight bindings of the persistent kernel of knobs ``pc`` from ``quant.expert_weights``'s: bf16 as
    they are for the Triton kernel; fp8 with w1q's gate and up interleaved per 128 columns (each 128 gate
    columns, then the same 128 up columns: ``w1q`` [E, I/128, 2, 128, H]) and their scales likewise (``w1s``
    [E, I/128, 2, H/128]), so that an L1 tile's gate and up blocks are adjacent rows of one descriptor and
    their scales one row; bf16 for the Gluon kernel (``pc.gluon``) K-major as fp8's, interleaved the same
    way (``w1`` [E, I/128, 2, 128, H], ``w2`` [E, H, I]): a copy, made once per layer."""
    e, blocks = cfg.local_experts, cfg.intermediate // FP8_BLOCK
    if cfg.precision != "fp8":
        if not pc.gluon:
            return weights
        w1 = weights["w1"].transpose(1, 2).reshape(e, 2, blocks, FP8_BLOCK, cfg.hidden).transpose(1, 2)
        return {"w1": w1.contiguous().view(e, 2 * cfg.intermediate, cfg.hidden),
                "w2": weights["w2"].transpose(1, 2).contiguous()}  # fmt: skip
    w1q = weights["w1q"].view(e, 2, blocks, FP8_BLOCK, cfg.hidden).transpose(1, 2).contiguous()
    w1s = weights["w1s"].view(e, 2, blocks, cfg.hidden // FP8_BLOCK).transpose(1, 2).contiguous()
    return {**weights, "w1q": w1q.view(e, 2 * cfg.intermediate, cfg.hidden), "w1s": w1s}


def _desc_blocks(cfg: MoEConfig, pc: PersistentConfig) -> dict[str, tuple[int, int]]:
    """Block shape of each descriptor of the Triton kernel: bf16 weights [K, N] boxes of the row-major
    weights; fp8 [128, 128] boxes of the K-major weights, one scale block each (transposed for the dot); h
    and the sorted A rows [BLOCK_M, K step]."""
    if cfg.precision == "fp8":
        return {"w1_desc": (FP8_BLOCK, FP8_BLOCK), "w2_desc": (FP8_BLOCK, FP8_BLOCK),
                "h_desc": (pc.block_m, FP8_BLOCK), "a_desc": (pc.block_m, FP8_BLOCK)}  # fmt: skip
    return {"w1_desc": (pc.block_k, pc.block_n1), "w2_desc": (pc.block_k, pc.block_n2),
            "h_desc": (pc.block_m, pc.block_k), "a_desc": (pc.block_m, pc.block_k)}  # fmt: skip


def descriptors(cfg: MoEConfig, pc: PersistentConfig, weights: dict[str, Any],
                workspace: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """Host tensor descriptors of the operands ``pc`` loads through TMA, by binding key: the weights of
    :func:`persistent_weights` viewed as 2-D (experts stacked along K: bf16 w1 [E*H, 2I], w2 [E*I, H];
    fp8, and bf16 for the Gluon kernel, K-major: w1 [E*2I, H], w2 [E*H, I]) and the ``workspace``'s ``h``
    and ``a_sorted``. Built once: they point at fixed buffers."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    e, hid, inter = cfg.local_experts, cfg.hidden, cfg.intermediate
    w1, w2 = (weights["w1q"], weights["w2q"]) if cfg.precision == "fp8" else (weights["w1"], weights["w2"])
    if cfg.precision == "fp8" or pc.gluon:
        tensors = {"w1_desc": w1.view(e * 2 * inter, hid), "w2_desc": w2.view(e * hid, inter)}
    else:
        tensors = {"w1_desc": w1.view(e * hid, 2 * inter), "w2_desc": w2.view(e * inter, hid)}
    tensors["h_desc"] = workspace["h"]
    if pc.tma_a:
        tensors["a_desc"] = workspace["a_sorted"]
    if pc.gluon:  # every GEMM operand in [128, K step] boxes of 128-byte rows, the layout Gluon's shared memory takes
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor

        from .gluon_persistent import X_CHUNKS, Y_CHUNKS

        dtype = gl.float8e4nv if cfg.precision == "fp8" else gl.bfloat16
        box = [FP8_BLOCK, pc.block_k]
        block = gl.NVMMASharedLayout.get_default_for(box, dtype)
        out = {key: GluonDescriptor.from_tensor(t, box, block) for key, t in tensors.items()}
        # y_pair for the combine items: one pair's gluon_combine_cols columns a box, unswizzled
        y_pair = workspace["y_pair"]
        out["y_desc"] = GluonDescriptor.from_tensor(
            y_pair.view(-1, hid // 256, 256), [1, gluon_combine_cols(cfg) // 256, 256],
            Y_CHUNKS.value)  # fmt: skip
        if not pc.tma_a:  # L1 gathers the token rows itself: dispatch copies none
            return out
        # dispatch: each token row to its pairs' places in a_sorted; fp8's rows are x_sym's (bf16's are x's, which
        # change from call to call: the kernel makes their descriptor)
        unswizzled = X_CHUNKS.value if cfg.precision == "fp8" else Y_CHUNKS.value
        out["pair_desc"] = GluonDescriptor.from_tensor(
            workspace["a_sorted"].view(-1, hid // 256, 256), [1, _row_boxes(cfg), 256], unswizzled)
        if cfg.precision == "fp8":
            out["x_desc"] = GluonDescriptor.from_tensor(
                workspace["x_sym"].view(-1, hid // 256, 256), [pc.dispatch_rows, _row_boxes(cfg), 256], unswizzled)
        return out
    wanted = {"w1_desc": pc.tma_w1, "w2_desc": pc.tma_w2, "h_desc": pc.tma_h, "a_desc": pc.tma_a}
    blocks = _desc_blocks(cfg, pc)
    return {key: TensorDescriptor.from_tensor(t, list(blocks[key])) for key, t in tensors.items() if wanted[key]}


def call_extras(cfg: MoEConfig, pc: PersistentConfig, buffers: dict[str, Any]) -> dict[str, Any]:
    """What a call of the persistent kernel binds besides ``megamoe.call_bindings``: the descriptors of
    :func:`descriptors` over ``buffers``' weights (:func:`persistent_weights`) and workspace, the items of
    the whole call (``item_begin`` 0, ``item_end`` the schedule's ``N_ITEMS``) and, for ``pc.gluon``, the
    table of the buffers' addresses (``buffer_table``, int64, in ``gluon_persistent.BUFFER_TABLE``'s order;
    on the meta device when the buffers are). A layer builds them once: they point at its fixed buffers."""
    extras = {"item_begin": 0, "item_end": schedule(cfg, pc).starts()["N_ITEMS"]}
    if pc.gluon:  # the table first: its check names a misaligned buffer, TMA's descriptors only assert
        import torch

        from .gluon_persistent import BUFFER_TABLE

        device = buffers["sched"].device
        # bf16 has no scales, and without tma_a there is no a_sorted: their entries are 0, which the kernel does
        # not read
        def unread(key: str) -> bool:
            return key not in buffers and (cfg.precision != "fp8" or (key == "a_sorted" and not pc.tma_a))

        addresses = [0 if device.type == "meta" or unread(key) else buffers[key].data_ptr() for key in BUFFER_TABLE]
        for key, address in zip(BUFFER_TABLE, addresses, strict=True):
            if address % 16:  # the kernel reads and writes them 16 bytes at a time
                raise ValueError(f"persistent_launch: buffer {key!r} at {address:#x} is not 16-byte aligned, "
                                 f"as the Gluon kernel needs each of gluon_persistent.BUFFER_TABLE")  # fmt: skip
        extras["buffer_table"] = torch.tensor(addresses, dtype=torch.int64, device=device)
    return {**descriptors(cfg, pc, buffers, buffers), **extras}


def persistent_launch(cfg: MoEConfig, pc: PersistentConfig, programs: int) -> KernelLaunch:
    """The launch of one call: ``programs`` programs of ``moe_persistent`` (the layer resolves
    ``pc.programs`` = 0 to the SMs per PE), named ``moe_persistent`` (bf16) or ``moe_persistent_fp8``."""
    _check(cfg, pc)
    if programs < 1:
        raise ValueError(f"persistent_launch: programs={programs} must be >= 1")
    if pc.gluon:
        return _gluon_launch(cfg, pc, programs)
    fp8, world_one = cfg.precision == "fp8", cfg.world == 1
    sch = schedule(cfg, pc)
    weight1, weight2 = ("w1q", "w2q") if fp8 else ("w1", "w2")
    # (kernel parameter, binding key), in the kernel's order: the layer passes them by position
    params = [
        ("logits_ptr", "logits"), ("x_ptr", "x"), ("y_ptr", "y"), ("x_sym", "x_sym"), ("ids_sym", "topk_ids"),
        ("w_sym", "topk_w"), ("rank_sym", "pair_rank"), ("send_idx_sym", "send_idx"), ("send_count_sym", "send_count"),
        ("send_pairs_sym", "send_pairs"), ("comb_sym", "comb"), ("plan_flag_sym", "plan_flag"),
        ("comb_flag_sym", "comb_flag"), ("slot_ptr", "slot"), ("recv_x", "recv_x"), ("recv_ids", "recv_ids"),
        ("recv_w", "recv_w"), ("recv_n", "recv_n"), ("layout_ptr", "layout"), ("sorted_row", "sorted_row"),
        ("inv_pos", "inv_pos"), ("a_src", ("x_sym" if fp8 else "x") if world_one else "recv_x"), ("h_ptr", "h"),
        ("h_op", "h_desc" if pc.tma_h else "h"), ("y_pair", "y_pair"), ("staging", "y" if world_one else "staging"),
        ("sched_ptr", "sched"), ("epoch_ptr", "call_epoch"), ("w1_op", "w1_desc" if pc.tma_w1 else weight1),
        ("w2_op", "w2_desc" if pc.tma_w2 else weight2), ("T", "T"), ("me", "me"), ("wait_ms", "wait_ms"),
        ("item_begin", "item_begin"), ("item_end", "item_end"), ("trace_ptr", "trace" if pc.trace else None),
        ("a_sorted", "a_sorted" if pc.tma_a else None), ("a_op", "a_desc" if pc.tma_a else None),
    ]  # fmt: skip
    scales: dict[str, Any] = {}
    if fp8:
        params += [("xs_sym", "x_scale"), ("recv_xs", "recv_xs"), ("a_scale", "x_scale" if world_one else "recv_xs"),
                   ("hs_ptr", "h_scale"), ("w1s_ptr", "w1s"), ("w2s_ptr", "w2s")]  # fmt: skip
    else:  # bf16 has no scales: the kernel's scale parameters are None
        scales = dict.fromkeys(("xs_sym", "recv_xs", "a_scale", "hs_ptr", "w1s_ptr", "w2s_ptr"))
    k_p2, w_p2 = next_pow2(cfg.top_k), next_pow2(cfg.world)
    el_p2 = next_pow2(cfg.local_experts)
    constexprs = dict(
        scales,
        H=cfg.hidden, INTER=cfg.intermediate, E=cfg.num_experts, E_P2=next_pow2(cfg.num_experts), K=cfg.top_k,
        K_P2=k_p2, E_LOC=cfg.local_experts, EL_P2=el_p2, WORLD=cfg.world, W_P2=w_p2, T_MAX=cfg.max_tokens, FP8=fp8,
        COPY_X=not fp8 and not world_one, PULL=not world_one, PUSH=not world_one, BLOCK_M=pc.block_m,
        BLOCK_N1=pc.block_n1, BLOCK_N2=pc.block_n2, BLOCK_K=pc.block_k, GROUP_M=pc.group_m, M_TILES=sch.m_tiles,
        TMA_W1=pc.tma_w1, TMA_W2=pc.tma_w2, TMA_H=pc.tma_h, ROUTE_TOKENS=pc.route_tokens,
        ROUTE_COLS=_route_cols(cfg, pc),
        DISPATCH_ROWS=pc.dispatch_rows, COMBINE_ROWS=pc.combine_rows, REDUCE_ROWS=pc.reduce_rows,
        BLOCK_H=row_block(cfg.hidden, 4096 // pc.combine_rows), BLOCK_HR=row_block(cfg.hidden, 2048 // w_p2),
        **sch.starts(), SCHED_WORDS=sch.sched_words, SCHED_P2=next_pow2(sch.sched_words), TRACE=pc.trace,
        HALF_TAIL=pc.half_tail, TMA_A=pc.tma_a, BLOCK_HA=row_block(cfg.hidden, 4096 // pc.dispatch_rows),
        SETTLE_WGMMA=serializes_wgmma_in_flight_across_loops(), PROMOTE=fp8 and not pc.fast_accum,
    )  # fmt: skip
    return KernelLaunch(
        "moe_persistent_fp8" if fp8 else "moe_persistent", moe_persistent, tuple(params), constexprs,
        grid=(programs,), num_warps=pc.num_warps, num_stages=pc.num_stages,
    )  # fmt: skip


GLUON_BF16_BLOCK_K = 64  # the Gluon kernel's bf16 K step: stages of 128-byte rows, as fp8's 128
GLUON_STAGE_A_BYTES = 16384  # a stage's A buffer (128 rows of 128 bytes): dispatch and combine items use it too
GLUON_LOADER_REGS = 40  # per thread of the Gluon kernel's loader; its consumers': gluon_scaled_tiles.consumer_regs


def gluon_combine_cols(cfg: MoEConfig) -> int:
    """Columns of a token's pairs a Gluon combine stage holds: its K pair rows in one 16 KB A buffer."""
    return row_block(cfg.hidden, GLUON_STAGE_A_BYTES // (2 * next_pow2(cfg.top_k)))


def _gluon_launch(cfg: MoEConfig, pc: PersistentConfig, programs: int) -> KernelLaunch:
    """The launch of one call at world 1 as ``gluon_persistent.moe_persistent_gluon`` (``pc.gluon``), named
    ``moe_persistent_gluon`` (fp8) or ``moe_persistent_gluon_bf16``."""
    from .gluon_persistent import moe_persistent_gluon
    from .gluon_scaled_tiles import consumer_regs

    fp8 = cfg.precision == "fp8"
    sch = schedule(cfg, pc)
    params = [
        ("logits_ptr", "logits"), ("x_ptr", "x"), ("y_ptr", "y"), ("table", "buffer_table"),
        ("epoch_ptr", "call_epoch"), ("a_desc", "a_desc" if pc.tma_a else None), ("h_desc", "h_desc"),
        ("w1_desc", "w1_desc"), ("w2_desc", "w2_desc"), ("y_desc", "y_desc"),
        ("x_desc", "x_desc" if fp8 and pc.tma_a else None), ("pair_desc", "pair_desc" if pc.tma_a else None),
        ("T", "T"), ("me", "me"), ("wait_ms", "wait_ms"),
        ("item_begin", "item_begin"), ("item_end", "item_end"), ("trace_ptr", "trace" if pc.trace else None),
    ]  # fmt: skip
    starts = {k: v for k, v in sch.starts().items() if k != "REDUCE_START"}
    constexprs = dict(
        H=cfg.hidden, INTER=cfg.intermediate, E=cfg.num_experts, E_P2=next_pow2(cfg.num_experts), K=cfg.top_k,
        K_P2=next_pow2(cfg.top_k), E_LOC=cfg.local_experts, EL_P2=next_pow2(cfg.local_experts),
        GROUP_M=pc.group_m, M_TILES=sch.m_tiles, ROUTE_TOKENS=pc.route_tokens,
        ROUTE_COLS=_route_cols(cfg, pc), DISPATCH_ROWS=pc.dispatch_rows, COMBINE_ROWS=pc.combine_rows,
        COMBINE_BLOCKS=cdiv(cfg.max_tokens, pc.combine_rows), BLOCK_HC=gluon_combine_cols(cfg),
        **starts, SCHED_WORDS=sch.sched_words, SCHED_P2=next_pow2(sch.sched_words), LANDED=sch.landed_word,
        STAGES=pc.num_stages, CONSUMER_REGS=consumer_regs(fp8, pc.fast_accum), LOADER_REGS=GLUON_LOADER_REGS,
        TRACE=pc.trace, FP8=fp8, FAST_ACCUM=pc.fast_accum, GATHER_A=not pc.tma_a
    )  # fmt: skip
    return KernelLaunch("moe_persistent_gluon" if fp8 else "moe_persistent_gluon_bf16", moe_persistent_gluon,
                        tuple(params), constexprs, grid=(programs,), num_warps=4, num_stages=1)  # fmt: skip
