"""What a dense Triton GEMM reaches on this GPU with the persistent layer's tile shapes, beside cuBLAS.

The persistent MegaMoE kernel's GEMM tiles are 128 rows by 256 columns (fp8 L1: two 128-column
halves, gate and up, each with its own weight block scale). This times the same tiles on dense
matrices of the layer's shapes, one persistent Triton launch per GEMM (a program per SM walking the
tiles), so that the grouped layer's tile time can be read against the best Triton reaches without
routing, gathers or waits, and against cuBLAS on the same FLOPs:

* ``plain``: ``acc = dot(a, b, acc)``, the fp8 or bf16 tile as it would be without block scales
  (checked against the unscaled product);
* ``scaled`` (fp8): the Triton kernel's block-scaled step with its sums in the tensor cores
  (``persistent._scaled_step``, fast_accum) on two 128-column halves with per-row A scales and scalar B
  scales;
* ``prefetch`` (fp8): ``scaled`` with each step's scales loaded during the step before;
* ``wide`` (fp8): ``prefetch`` as one 256-column dot, its accumulator rescaled column by column;
* ``fresh`` (fp8): 128 x 128 tiles, each K block's dot into a zeroed accumulator, added to the tile's with
  its scales (two accumulators: 256 columns would not fit in the registers);
* ``prefetch64x2`` (fp8): ``prefetch`` on 64-row tiles of 4 warps, two programs per SM (one's rescale
  can run beside the other's wgmma);
* ``noload`` (fp8): ``scaled`` with scales made in registers: the step's arithmetic without load latency
  (its result is not checked);
* ``halves`` (fp8): ``plain`` as two 128-column dots without scales (the scaled tile's shape alone);
* ``gluon`` (fp8): the scaled tile in Gluon, warp-specialized: a loader warp and two consumer warpgroups
  of 64 rows each, each K block's product promoted into float32 sums beside the other consumer's wgmma,
  the output stored by TMA (``gluon_scaled_tiles``); ``gluon_fast``: its sums kept in the tensor cores,
  rescaled per K block (``fast_accum``);
* ``gluon`` (bf16): the same Gluon tile without scales, with the persistent kernel's bf16 K loop (4 K blocks of
  64 an iteration, drained before the back edge);
* ``cublas``: ``torch._scaled_mm`` (fp8, row-wise scales, fast accumulation) / ``torch.matmul`` (bf16);
* ``cublas_blocks`` (fp8): cuBLAS's block-scaled GEMM on the same operands and scales as the Triton and Gluon
  tiles, each K block's product promoted into float32 (``gemm_baselines.block_scaled_mm``): the tile's own
  arithmetic in cuBLAS.

Each variant but ``noload`` is checked against a float32 matmul of the same operands. Prints a table
(µs, TFLOP/s, µs per tile per SM) and writes JSON::

    python -m tutorials.megamoe.gemm_ceiling --out $OUT/ceiling
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from ..common.run_metadata import run_metadata
from .persistent import _scaled_step
from .quant import FP8, FP8_MAX

BLOCK = 128  # the fp8 scale block, and the tiles' K step in fp8


@triton.jit
def dense_tiles(
    a_desc, b_desc, c_ptr, a_scale, b_scale, M, N, K, NUM_PROGRAMS: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, SCALED: tl.constexpr,
    HALVES: tl.constexpr, WIDE: tl.constexpr = False, FRESH: tl.constexpr = False,
):  # fmt: skip
    """C [M, N] (bf16) = A [M, K] @ B [N, K]^T, a [BLOCK_M, BLOCK_N] tile at a time, tiles handed out
    round-robin to NUM_PROGRAMS programs. SCALED (fp8, BLOCK_N = 256, BLOCK_K = 128; 0: off): A rows carry
    one scale per 128 K (a_scale [M, K / 128]), B one per 128 x 128 block (b_scale [N / 128, K / 128]),
    loaded in the step (1) or the step before (2), or made in registers (3: timing only). HALVES: the
    scaled tile's two 128-column dots without scales. WIDE (SCALED 2): one 256-column dot whose
    accumulator is rescaled column by column (the first 128 columns by the first B block's scale, the
    others by the second's) instead of two 128-column dots. FRESH (SCALED 2, BLOCK_N = 128): each K block's
    dot into a zeroed accumulator, then added to the tile's with its scales."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    KB = K // BLOCK_K
    for tile in range(tl.program_id(0), tiles_m * tiles_n, NUM_PROGRAMS):
        group = tile // (GROUP_M * tiles_n)
        first_m = group * GROUP_M
        rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
        pid_m = first_m + (tile % (GROUP_M * tiles_n)) % rows_in_group
        pid_n = (tile % (GROUP_M * tiles_n)) // rows_in_group
        m0 = pid_m * BLOCK_M
        n0 = pid_n * BLOCK_N
        offs_m = m0 + tl.arange(0, BLOCK_M)
        if FRESH:
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            a_row = a_scale + offs_m * KB
            b_row = b_scale + (n0 // BLOCK_N) * KB
            a_next = tl.load(a_row)
            b_next = tl.load(b_row)
            for kb in range(0, KB):
                a_s, b_s = a_next + 0.0, b_next + 0.0
                part = tl.dot(a_desc.load([m0, kb * BLOCK_K]), b_desc.load([n0, kb * BLOCK_K]).T)
                acc += part * (a_s[:, None] * b_s)
                following = tl.minimum(kb + 1, KB - 1)
                a_next = tl.load(a_row + following)
                b_next = tl.load(b_row + following)
            tl.store(c_ptr + offs_m[:, None] * N + n0 + tl.arange(0, BLOCK_N)[None, :], acc.to(tl.bfloat16))
        elif WIDE:
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            first = tl.arange(0, BLOCK_N) < BLOCK_N // 2  # the columns of the first B scale block
            a_s = tl.full([BLOCK_M], 1.0, tl.float32)
            b_s = tl.full([BLOCK_N], 1.0, tl.float32)
            a_row = a_scale + offs_m * KB
            b_rows = b_scale + (n0 // (BLOCK_N // 2) + (~first).to(tl.int32)) * KB  # each column's B block
            a_next = tl.load(a_row)
            b_next = tl.load(b_rows)
            for kb in range(0, KB):
                a_was, b_was = a_s, b_s
                a_s, b_s = a_next + 0.0, b_next + 0.0
                a = a_desc.load([m0, kb * BLOCK_K])
                b = b_desc.load([n0, kb * BLOCK_K]).T
                acc = tl.dot(a, b, acc * ((a_was / a_s)[:, None] * (b_was / b_s)[None, :]))
                following = tl.minimum(kb + 1, KB - 1)
                a_next = tl.load(a_row + following)
                b_next = tl.load(b_rows + following)
            acc *= a_s[:, None] * b_s[None, :]
            tl.store(c_ptr + offs_m[:, None] * N + n0 + tl.arange(0, BLOCK_N)[None, :], acc.to(tl.bfloat16))
        elif SCALED or HALVES:
            HALF: tl.constexpr = BLOCK_N // 2
            acc_lo = tl.zeros([BLOCK_M, HALF], dtype=tl.float32)
            acc_hi = tl.zeros([BLOCK_M, HALF], dtype=tl.float32)
            a_s = tl.full([BLOCK_M], 1.0, tl.float32)
            lo_s = 1.0
            hi_s = 1.0
            a_next = tl.load(a_scale + offs_m * KB)
            lo_next = tl.load(b_scale + (n0 // HALF) * KB)
            hi_next = tl.load(b_scale + (n0 // HALF + 1) * KB)
            for kb in range(0, KB):
                a = a_desc.load([m0, kb * BLOCK_K])
                a_was, lo_was, hi_was = a_s, lo_s, hi_s
                if SCALED == 1:  # this step's scales, loaded in the step
                    a_s = tl.load(a_scale + offs_m * KB + kb)
                    lo_s = tl.load(b_scale + (n0 // HALF) * KB + kb)
                    hi_s = tl.load(b_scale + (n0 // HALF + 1) * KB + kb)
                elif SCALED == 2:  # loaded one step ahead (+ 0.0: a loop-carried value must not be yielded
                    # unchanged, which Triton's pipeliner reads as a distance-2 dependence and then skips the loop)
                    a_s, lo_s, hi_s = a_next + 0.0, lo_next + 0.0, hi_next + 0.0
                elif SCALED == 3:  # no loads: scales made in registers (the step's cost without their latency)
                    a_s = (offs_m % 7 + kb % 5 + 1).to(tl.float32)
                    lo_s = (kb % 3 + 1).to(tl.float32)
                    hi_s = (kb % 2 + 1).to(tl.float32)
                b_lo = b_desc.load([n0, kb * BLOCK_K]).T
                b_hi = b_desc.load([n0 + HALF, kb * BLOCK_K]).T
                if HALVES:
                    acc_lo = tl.dot(a, b_lo, acc_lo)
                    acc_hi = tl.dot(a, b_hi, acc_hi)
                else:
                    acc_lo = _scaled_step(a, b_lo, acc_lo, a_was, a_s, lo_was, lo_s, False, False)
                    acc_hi = _scaled_step(a, b_hi, acc_hi, a_was, a_s, hi_was, hi_s, False, False)
                if SCALED == 2:
                    following = tl.minimum(kb + 1, KB - 1)
                    a_next = tl.load(a_scale + offs_m * KB + following)
                    lo_next = tl.load(b_scale + (n0 // HALF) * KB + following)
                    hi_next = tl.load(b_scale + (n0 // HALF + 1) * KB + following)
            if not HALVES:
                acc_lo *= (a_s * lo_s)[:, None]
                acc_hi *= (a_s * hi_s)[:, None]
            out = c_ptr + offs_m[:, None] * N + n0 + tl.arange(0, HALF)[None, :]
            tl.store(out, acc_lo.to(tl.bfloat16))
            tl.store(out + HALF, acc_hi.to(tl.bfloat16))
        else:
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for k in range(0, K, BLOCK_K):
                acc = tl.dot(a_desc.load([m0, k]), b_desc.load([n0, k]).T, acc)
            tl.store(c_ptr + offs_m[:, None] * N + n0 + tl.arange(0, BLOCK_N)[None, :], acc.to(tl.bfloat16))


def _descriptor(t: torch.Tensor, block: list[int]):
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor.from_tensor(t, block)


def _block_quantize(v: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 values, float32 scales [R / rows, K / 128]) with one scale per ``rows`` x 128 block."""
    r, k = v.shape
    blocks = v.float().reshape(r // rows, rows, k // BLOCK, BLOCK)
    scale = blocks.abs().amax(dim=(1, 3)).clamp_min(1e-12) / FP8_MAX
    q = (blocks / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8).reshape(r, k)
    return q, scale


def _bench(fn) -> float:
    """Mean µs per call of ``fn`` replayed back to back in a CUDA graph (``do_bench_cudagraph``: the L2
    cache is not flushed between calls, as the layer's weights stay in it between its tiles)."""
    return triton.testing.do_bench_cudagraph(fn, rep=200) * 1e3


def run(m: int, n: int, k: int, precision: str, variant: str, programs: int, stages: int) -> dict:
    """Time one (shape, precision, variant); returns its row (``error`` set where it did not compile or run)."""
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(m, k, generator=g, device=dev)
    b = torch.randn(n, k, generator=g, device=dev) / k**0.5
    c = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
    row = {"shape": [m, n, k], "precision": precision, "variant": variant, "stages": stages}
    if precision == "fp8":
        aq, a_s = _block_quantize(a, 1)
        bq, b_s = _block_quantize(b, BLOCK)
        ref = (aq.float() * a_s.repeat_interleave(BLOCK, 1)) @ (bq.float() * b_s.repeat_interleave(BLOCK, 0)
                                                                .repeat_interleave(BLOCK, 1)).T  # fmt: skip
        if variant in ("plain", "halves"):
            ref = aq.float() @ bq.float().T
        block_k, block_n = BLOCK, 256
    else:
        aq, bq, a_s, b_s = a.bfloat16(), b.bfloat16(), None, None
        ref = aq.float() @ bq.float().T
        block_k, block_n = 64, 256
    if variant == "cublas":
        if precision == "fp8":
            # cuBLAS takes row-wise scales: the same values requantized with one scale per row of A and of B
            ra = aq.float() * a_s.repeat_interleave(BLOCK, 1)
            rb = bq.float() * b_s.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
            sa, sb = (ra.abs().amax(1, keepdim=True) / FP8_MAX, rb.abs().amax(1, keepdim=True) / FP8_MAX)
            ra, rb = (ra / sa).to(FP8), (rb / sb).to(FP8)
            fn = lambda: torch._scaled_mm(ra, rb.T, scale_a=sa, scale_b=sb.T, out_dtype=torch.bfloat16,  # noqa: E731
                                          use_fast_accum=True)  # fmt: skip
        else:
            bt = bq.T
            fn = lambda: torch.matmul(aq, bt)  # noqa: E731
        got = fn()  # fp8 requantized row-wise: compared loosely (a wrong call is off by O(1))
    elif variant == "cublas_blocks":
        from .gemm_baselines import block_scaled_mm

        fn = lambda: block_scaled_mm(aq, a_s, bq, b_s)  # noqa: E731
        try:
            got = fn()
        except RuntimeError as exc:  # torch's cuBLAS without block scaling (CUDA before 12.9)
            return {**row, "error": f"RuntimeError: {str(exc).splitlines()[0][:300]}"}
    else:
        if not variant.startswith("gluon"):
            scaled = {"scaled": 1, "prefetch": 2, "prefetch64x2": 2, "noload": 3, "wide": 2, "fresh": 2}.get(variant, 0)
            halves, wide, fresh = variant == "halves", variant == "wide", variant == "fresh"
            two_per_sm = variant == "prefetch64x2"
            block_m, warps = (64, 4) if two_per_sm else (128, 8)
            if two_per_sm:  # two programs per SM (the caller gives them 2 stages: both fit in its shared memory)
                programs *= 2
            if fresh:
                block_n = 128
            a_desc = _descriptor(aq, [block_m, block_k])
            b_desc = _descriptor(bq, [128 if (scaled or halves) and not wide else block_n, block_k])
            grid = (min(programs, (m // block_m) * (n // block_n)),)

            def fn() -> None:
                dense_tiles[grid](a_desc, b_desc, c, a_s, b_s, m, n, k, NUM_PROGRAMS=grid[0], BLOCK_M=block_m,
                                  BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8, SCALED=scaled, HALVES=halves,
                                  WIDE=wide, FRESH=fresh, num_warps=warps, num_stages=stages)  # fmt: skip

        try:
            if variant.startswith("gluon"):  # a stage count or shape the tile refuses is the row's error too
                from .gluon_scaled_tiles import scaled_tiles_call

                fn = scaled_tiles_call(aq, bq, a_s, b_s, c, programs, stages, fast_accum=variant == "gluon_fast")
            fn()
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a variant this Triton cannot build is reported, not fatal
            return {**row, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
        got = c
    err = ((got.float() - ref).norm() / ref.norm()).item()
    us = _bench(fn)
    tflops = 2 * m * n * k / us / 1e6
    tiles = (m // 128) * (n // 256)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    return {**row, "us": us, "tflops": tflops, "tile_us_per_sm": us * sms / tiles, "rel_error": err,
            "ok": None if variant == "noload" else err < (5e-2 if variant == "cublas" else 2e-2)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="folder for gemm_ceiling.json")
    parser.add_argument("--stages", type=int, nargs="+", default=[3, 4])
    variants = {"fp8": ["plain", "halves", "scaled", "prefetch", "wide", "fresh", "prefetch64x2", "noload", "gluon",
                        "gluon_fast"],
                "bf16": ["plain", "gluon"]}  # fmt: skip
    parser.add_argument("--only", nargs="+", default=None, choices=sorted({*variants["fp8"], *variants["bf16"]}),
                        help="time only these variants (and cuBLAS)")  # fmt: skip
    args = parser.parse_args(argv)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    # The layer's two GEMMs over all 4096 pairs as dense matrices: L1 [pairs, H] x [H, 2I], L2 [pairs, I] x [I, H].
    shapes = [(4096, 3072, 4096), (4096, 4096, 1536)]
    rows = []
    for m, n, k in shapes:
        for precision, names in variants.items():
            stage_counts = {"prefetch64x2": [2]}
            if args.only:
                names = [v for v in names if v in args.only]
            ceilings = [("cublas", 0), ("cublas_blocks", 0)] if precision == "fp8" else [("cublas", 0)]
            runs = ceilings + [(v, s) for v in names for s in stage_counts.get(v, args.stages)]
            for variant, stages in runs:
                r = run(m, n, k, precision, variant, sms, stages)
                rows.append(r)
                head = f"{r['shape']} {precision:5} {variant:12} s{stages}:"
                if "error" in r:
                    print(head, r["error"])
                else:
                    print(f"{head} {r['us']:7.1f} us {r['tflops']:6.0f} TF/s  {r['tile_us_per_sm']:5.1f} us/tile/SM  "
                          f"err {r['rel_error']:.1e}{'  WRONG' if r['ok'] is False else ''}")  # fmt: skip
    meta = {**run_metadata(), "rows": rows}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gemm_ceiling.json").write_text(json.dumps(meta, indent=1))
    return 0 if all(r.get("ok") is not False for r in rows) and not any("error" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
