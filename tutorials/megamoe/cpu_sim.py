"""Run the layer's real Triton kernels on CPU, for W ranks in one process (Triton's interpreter).

Contract: :func:`simulate_kernels` executes every launch of :func:`launch.launches` with
``TRITON_INTERPRET=1`` semantics, each rank with its own buffers, phase by phase (all ranks run
the launches up to a barrier, then the next phase), and returns each rank's output and buffers.
The raw CUDA functions are replaced by Python equivalents: ``nvshmem_ptr`` maps an address inside
a rank's symmetric buffer to the same offset in rank ``pe``'s copy. This checks the kernels' index
arithmetic, routing, bookkeeping and reductions without a GPU; it cannot show races, timing or
the raw CUDA code itself (the GPU suite does).

The interpreter must be chosen before the kernels are defined: run this module in a fresh process
(``python -m tutorials.megamoe.cpu_sim`` from the repository root, or :func:`main` from a
subprocess) — importing it sets the variable, and the package's ``__init__`` imports no kernel.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402
from triton.runtime.interpreter import TensorHandle  # noqa: E402

from . import kernels, launch  # noqa: E402

# Small route and combine chunks, so that the small H simulated here still splits rows over programs.
launch.ROUTE_CHUNK = launch.COMBINE_CHUNK = 64
from . import kernels_fp8  # noqa: E402
from .config import STATE_BUFFERS, MoEConfig, Tiles  # noqa: E402
from .launch import install_descriptor_scratch, launches  # noqa: E402
from .megamoe import TORCH_DTYPES  # noqa: E402
from .quant import expert_weights  # noqa: E402


def _value(x) -> int:
    """A Python int from an interpreter scalar tensor, a constexpr or an int."""
    if hasattr(x, "handle"):
        return int(np.asarray(x.handle.data).reshape(-1)[0])
    return int(getattr(x, "value", x))


def _scalar(value: int, dtype) -> tl.core.tensor:
    np_dtype = {tl.int64: np.int64, tl.int32: np.int32}[dtype]
    return tl.core.tensor(TensorHandle(np.array([value], dtype=np_dtype), dtype), dtype)


class SymmetricHeap:
    """Per-rank copies of each symmetric buffer; translates addresses between ranks like nvshmem_ptr."""

    def __init__(self, per_rank: list[dict[str, torch.Tensor]]) -> None:
        self.per_rank = per_rank

    def translate(self, addr: int, pe: int) -> int:
        for bufs in self.per_rank:
            for name, t in bufs.items():
                base = t.data_ptr()
                if base <= addr < base + t.numel() * t.element_size():
                    return self.per_rank[pe][name].data_ptr() + (addr - base)
        raise AssertionError(f"address {addr:#x} is not in any symmetric buffer")

    def install(self) -> None:
        """Replace the raw CUDA functions the kernels call with Python versions over this heap."""

        def peer_ptr(sym, pe):
            return _scalar(self.translate(_value(sym), _value(pe)), tl.int64)

        def peer_load_i32(sym, pe):
            return _scalar(
                ctypes.c_int32.from_address(self.translate(_value(sym), _value(pe))).value, tl.int32
            )

        def pull(dst, src_sym, nbytes, pe):
            ctypes.memmove(_value(dst), self.translate(_value(src_sym), _value(pe)), _value(nbytes))

        def push(dst_sym, src, nbytes, pe):
            ctypes.memmove(self.translate(_value(dst_sym), _value(pe)), _value(src), _value(nbytes))

        kernels.moe_peer_ptr = peer_ptr
        kernels.moe_peer_load_i32 = peer_load_i32
        kernels.moe_pull = pull
        kernels.moe_push = push
        kernels_fp8.moe_peer_load_i32 = peer_load_i32  # the fp8 kernels' imported names
        kernels_fp8.moe_pull = pull


def _bf16_as_f32(handle: TensorHandle) -> np.ndarray:
    return (handle.data.astype(np.uint32) << 16).view(np.float32)


def fix_interpreter_bf16_dot() -> None:
    """Triton 3.6's interpreter keeps bf16 as raw uint16 and multiplies those integers in tl.dot;
    widen bf16 operands to float32 first (the product of two bf16 values is exact in float32)."""
    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_dot, "_bf16_fixed", False):
        return
    original = builder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype == tl.bfloat16:
            a = TensorHandle(_bf16_as_f32(a), tl.float32)
        if b.dtype == tl.bfloat16:
            b = TensorHandle(_bf16_as_f32(b), tl.float32)
        return original(self, a, b, d, input_precision, max_num_imprecise_acc)

    create_dot._bf16_fixed = True
    builder.create_dot = create_dot


def fix_interpreter_fp8_cast() -> None:
    """Triton 3.6's interpreter rounds float32 -> e4m3 half away from zero, drops the carry when the
    mantissa rounds up to the next power of two (15.5 -> 8) and truncates subnormals; cast with torch
    instead (round to nearest even, as the GPU's cvt.rn.satfinite and ``quant`` do)."""
    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_fp_to_fp, "_fp8_fixed", False):
        return
    original = builder.create_fp_to_fp

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if dst_type.scalar == tl.float8e4nv and src.dtype.scalar == tl.float32:
            data = torch.from_numpy(np.ascontiguousarray(src.data)).to(torch.float8_e4m3fn)
            return TensorHandle(data.view(torch.uint8).numpy(), tl.float8e4nv)
        return original(self, src, dst_type, rounding_mode)

    create_fp_to_fp._fp8_fixed = True
    builder.create_fp_to_fp = create_fp_to_fp


def simulate_kernels(
    cfg: MoEConfig,
    tiles: Tiles,
    xs: list[torch.Tensor],
    logits: list[torch.Tensor],
    w1: torch.Tensor,
    w2: torch.Tensor,
    poison: bool = True,
) -> tuple[list[torch.Tensor], list[dict[str, torch.Tensor]]]:
    """(outputs, per-rank buffers) of one layer call on every rank; ``w1``/``w2`` hold all experts (bf16,
    quantized here when ``cfg.precision`` is fp8, as the layer does)."""
    world, e_loc = cfg.world, cfg.local_experts
    fill = float("nan") if poison else 0.0

    def alloc(specs):
        out = {}
        for name, shape, dtype in specs:
            t = torch.empty(shape, dtype=TORCH_DTYPES[dtype])
            t.fill_(0 if name in STATE_BUFFERS else fill if t.is_floating_point() else -7)
            out[name] = t
        return out

    sym = [alloc(cfg.symmetric_buffers()) for _ in range(world)]
    local = [alloc(cfg.local_buffers()) for _ in range(world)]
    SymmetricHeap(sym).install()
    fix_interpreter_bf16_dot()
    fix_interpreter_fp8_cast()
    ys = [torch.full_like(x, float("nan")) for x in xs]
    plans = [launches(cfg, tiles, x.shape[0]) for x in xs]
    if tiles.tma:
        install_descriptor_scratch("cpu")
    bindings = []
    for r in range(world):
        b = {**sym[r], **local[r]}
        b.update(
            logits=logits[r].contiguous(),
            x=xs[r].contiguous(),
            y=ys[r],
            T=xs[r].shape[0],
            W=world,
            me=r,
            **expert_weights(w1[r * e_loc : (r + 1) * e_loc], w2[r * e_loc : (r + 1) * e_loc], cfg.precision),
        )
        bindings.append(b)
    phases: list[list[int]] = [[]]
    for i, first in enumerate(plans[0]):
        if first.barrier_before:
            phases.append([])
        phases[-1].append(i)
    for phase in phases:
        for r in range(world):
            for i in phase:
                kernel = plans[r][i]
                kernel.fn[kernel.grid](*kernel.arguments(bindings[r]), **kernel.constexprs)
    return ys, [{**sym[r], **local[r]} for r in range(world)]


# bf16: also loads through device-side TMA descriptors (h rows past the buffer read as zeros)
SWIZZLE_TILES = Tiles(
    block_m=64, block_n1=64, block_n2=32, block_k=64, num_warps=4, num_stages=1, group_m=3, tma_l1=True,
    tma_l2=True,
)
# fp8: an L2 N tile of 256 spans two scale blocks of w2
SWIZZLE_TILES_FP8 = Tiles(block_m=64, block_n1=128, block_n2=256, block_k=128, num_warps=4, num_stages=1, group_m=3)
SIM_TOL_NORM = 3e-2  # the interpreter's float32 -> bf16 casts truncate instead of rounding
SIM_TOL_ROW = 0.1  # a lost or doubled token row has error 1.0
SIM_TOL_NORM_FP8_VS_FP32 = 0.1  # e4m3 quantization of x, w and h: ~6e-2 against float32


def check(world: int, skewed: bool, seed: int = 0, tiles: Tiles | None = None, precision: str = "bf16") -> list[str]:
    """Run a small layer through :func:`simulate_kernels` and compare with the torch reference.

    fp8: weights and tokens scaled by ``megamoe.block_gains``, compared with ``reference_fp8``
    (the bounds above) and with float32 (SIM_TOL_NORM_FP8_VS_FP32); the quantized tokens the
    kernel wrote must equal ``quant.quantize_rows`` bit for bit.
    """
    from .config import choose_tiles, choose_tiles_fp8
    from .megamoe import block_gains
    from .quant import quantize_rows
    from .reference import reference, reference_fp8
    from .routing import receive_counts, route

    fp8 = precision == "fp8"
    h, i, e, k, t_max = (256, 256, 4 * world, 3, 24) if fp8 else (128, 64, 4 * world, 3, 24)
    cfg = MoEConfig(h, i, e, k, t_max, world, precision)
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(e, h, 2 * i, generator=g) / h**0.5
    w2 = torch.randn(e, i, h, generator=g) / i**0.5
    xs = [torch.randn(t_max - 3 * r, h, generator=g) for r in range(world)]
    if fp8:
        cpu = torch.device("cpu")
        w1, w2 = w1 * block_gains(w1.shape, seed + 1, cpu), w2 * block_gains(w2.shape, seed + 2, cpu)
        xs = [x * block_gains((1, h), seed + 3, cpu) for x in xs]
    w1, w2, xs = w1.bfloat16(), w2.bfloat16(), [x.bfloat16() for x in xs]
    logits = [torch.randn(x.shape[0], e, generator=g) for x in xs]
    if skewed:
        for lg in logits:
            lg[:, 1] += 20.0
    ys, bufs = simulate_kernels(
        cfg, tiles or (choose_tiles_fp8 if fp8 else choose_tiles)(4.0, h, i), xs, logits, w1, w2
    )
    errors = []
    routed = [route(lg, k) for lg in logits]
    rows, pairs = receive_counts([ids for ids, _ in routed], cfg.local_experts)
    for r in range(world):
        ids, wts = routed[r]
        t = xs[r].shape[0]
        if not torch.equal(bufs[r]["topk_ids"][:t], ids):
            errors.append(f"rank {r}: top-k ids differ from torch")
        if not torch.equal(bufs[r]["recv_n"].long(), rows[r]):
            errors.append(f"rank {r}: rows received {bufs[r]['recv_n'].tolist()} != {rows[r].tolist()}")
        if bufs[r]["gemm_sched"].any():
            errors.append(f"rank {r}: moe_gemms left its work counters at {bufs[r]['gemm_sched'].tolist()}")
        if not torch.equal(bufs[r]["counters"].long(), pairs[r].repeat(2)):
            errors.append(
                f"rank {r}: expert counters {bufs[r]['counters'].tolist()} != {pairs[r].tolist()} x2"
            )
        ref32 = reference(xs[r], ids, wts, w1, w2)
        ref = reference_fp8(xs[r], ids, wts, w1, w2) if fp8 else ref32
        diff = ys[r].float() - ref
        norm = float(diff.norm() / ref.norm())
        worst = float((diff.norm(dim=1) / ref.norm(dim=1)).max())
        if not (norm <= SIM_TOL_NORM and worst <= SIM_TOL_ROW):
            errors.append(f"rank {r}: output error {norm:.3g} (worst row {worst:.3g})")
        if fp8:
            q, scale = quantize_rows(xs[r])
            if not (
                torch.equal(bufs[r]["x_sym"][:t].view(torch.uint8), q.view(torch.uint8))
                and torch.equal(bufs[r]["x_scale"][:t], scale)
            ):
                errors.append(f"rank {r}: the kernel's e4m3 tokens or scales differ from quant.quantize_rows")
            fp32 = float((ys[r].float() - ref32).norm() / ref32.norm())
            if not fp32 <= SIM_TOL_NORM_FP8_VS_FP32:
                errors.append(f"rank {r}: error vs float32 {fp32:.3g}")
    return errors


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="run the MegaMoE kernels in Triton's interpreter on CPU")
    parser.add_argument("--world", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp8"])
    args = parser.parse_args(argv)
    failed = False
    odd_tiles = SWIZZLE_TILES_FP8 if args.precision == "fp8" else SWIZZLE_TILES
    # skewed routing also runs other tiles (bf16: 4 L2 N tiles, TMA; fp8: one spanning two scale blocks)
    # and M-tile groups of 3 that do not divide the grid; bf16 then runs those as one persistent launch
    cases = [("random", False, None), ("skewed", True, odd_tiles)]
    if args.precision == "bf16":
        persistent = dataclasses.replace(SWIZZLE_TILES, gemm_programs=3, tma_l2=False)
        cases.append(("skewed, persistent GEMMs", True, persistent))
    for world in args.world:
        for name, skewed, tiles in cases:
            errors = check(world, skewed, tiles=tiles, precision=args.precision)
            failed |= bool(errors)
            print(f"{args.precision} world={world} {name}: {'PASS' if not errors else errors}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
