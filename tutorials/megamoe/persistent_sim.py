"""Run the persistent kernel (``persistent.moe_persistent``) in Triton's interpreter on CPU, for W ranks.

Contract: :func:`simulate_persistent` runs calls back to back on one workspace per rank (the state
buffers carry over, the others are poisoned before each call, as the layer's tests do) and returns
every call's outputs and the buffers after the last call. Triton's interpreter runs the programs of
a launch one after another, so a program that waits for work no earlier item produced would wait
for ever: the waits here (Python versions of moe-device.cu's) raise :class:`WouldWaitForever`
instead. A grid of one program or several finishing is the progress argument of ``persistent``
being checked. At world > 1 each rank runs the items up to a wait on the other ranks, then the
next rank (``Schedule.slices``), since the interpreter runs one launch at a time; ``nvshmem_ptr``,
the pulls, pushes and signals act on per-rank buffers (``cpu_sim.SymmetricHeap``). Races, timing
and the raw CUDA itself need the GPU.

The interpreter must be chosen before Triton is imported (this module imports ``cpu_sim`` first, which
chooses it): run it in a fresh process, ``python -m tutorials.megamoe.persistent_sim`` from the
repository root.
"""

from __future__ import annotations

import ctypes
import dataclasses
import sys

# isort: off
from . import cpu_sim as sim  # before Triton is imported: it selects Triton's interpreter
# isort: on

import numpy as np
import torch
import triton.language as tl
from triton.runtime.errors import InterpreterError
from triton.runtime.interpreter import TensorHandle

from . import kernels, persistent
from .config import STATE_BUFFERS, MoEConfig
from .megamoe import TORCH_DTYPES, block_gains, persistent_state_errors, plan_errors
from .persistent_launch import (
    PersistentConfig,
    descriptors,
    persistent_buffers,
    persistent_launch,
    persistent_weights,
    schedule,
)
from .quant import expert_weights, quantize_rows
from .reference import reference, reference_fp8
from .routing import route


class WouldWaitForever(RuntimeError):
    """A wait found its value missing where nothing can still produce it (the interpreter runs one
    program, and one rank, at a time): on the GPU it would wait until its bound."""


def _flat(x) -> np.ndarray:
    """The values of an interpreter tensor, a constexpr or a number, as a flat numpy array."""
    if hasattr(x, "handle"):
        return np.asarray(x.handle.data).reshape(-1)
    return np.asarray([int(getattr(x, "value", x))])


def _zeros_like(x) -> tl.core.tensor:
    """An int32 zero of the shape of interpreter value ``x`` (what the raw waits return)."""
    if hasattr(x, "type") and x.type.is_block():
        shape = list(np.asarray(x.handle.data).shape)
        return tl.core.tensor(TensorHandle(np.zeros(shape, np.int32), tl.int32), tl.block_type(tl.int32, shape))
    return sim._scalar(0, tl.int32)


def install(heap: sim.SymmetricHeap) -> None:
    """Replace every raw function the persistent kernel calls with a Python version over ``heap``."""
    heap.install()

    def check(words, wanted, what, me, peer, kind) -> None:
        for address, want in zip(_flat(words).tolist(), np.broadcast_to(_flat(wanted), _flat(words).shape).tolist(),
                                 strict=True):  # fmt: skip
            seen = kind.from_address(int(address)).value
            if seen < want:
                raise WouldWaitForever(
                    f"PE {sim._value(me)} waits for PE {sim._value(peer)}: {persistent.WAIT_NAMES[sim._value(what)]} "
                    f"at {int(address):#x} is {seen}, expected >= {want}, and nothing runs that could raise it"
                )

    def wait_count(counter, expected, what, me, timeout_ms):
        check(counter, expected, what, me, me, ctypes.c_int32)
        return _zeros_like(counter)

    def wait_flag(flag, epoch, what, me, peer, timeout_ms):
        check(flag, epoch, what, me, peer, ctypes.c_int64)
        return _zeros_like(flag)

    def signal(flag_sym, value, pe):
        ctypes.c_int64.from_address(heap.translate(sim._value(flag_sym), sim._value(pe))).value = sim._value(value)

    persistent.moe_wait_count = persistent.moe_wait_each = wait_count
    persistent.moe_wait_flag = wait_flag
    persistent.moe_signal = signal
    for name in ("moe_peer_ptr", "moe_pull", "moe_push"):  # the names persistent imported from kernels
        setattr(persistent, name, getattr(kernels, name))


def _alloc(specs, poison: bool) -> dict[str, torch.Tensor]:
    out = {}
    for name, shape, dtype in specs:
        out[name] = torch.zeros(shape, dtype=TORCH_DTYPES[dtype])
    _poison(out, poison)
    return out


def _poison(buffers: dict[str, torch.Tensor], poison: bool) -> None:
    """NaN / -7 in every buffer but the state ones (``MegaMoE.poison``), or zeros."""
    for name, t in buffers.items():
        if name not in STATE_BUFFERS:
            t.fill_((float("nan") if t.is_floating_point() else -7) if poison else 0)


def simulate_persistent(
    cfg: MoEConfig,
    pc: PersistentConfig,
    calls: list[tuple[list[torch.Tensor], list[torch.Tensor]]],
    w1: torch.Tensor,
    w2: torch.Tensor,
    programs: int = 1,
) -> tuple[list[list[torch.Tensor]], list[dict[str, torch.Tensor]]]:
    """(each call's outputs per rank, each rank's buffers after the last call) of ``calls`` (each one
    (x per rank, logits per rank), any token counts up to ``cfg.max_tokens``, 0 included) run back to
    back with ``programs`` programs per launch; ``w1``/``w2`` hold all experts (bf16)."""
    world, e_loc = cfg.world, cfg.local_experts
    sym_extra, local_extra = persistent_buffers(cfg, pc)
    sym = [_alloc([*cfg.symmetric_buffers(), *sym_extra], True) for _ in range(world)]
    local = [_alloc([*cfg.local_buffers(), *local_extra], True) for _ in range(world)]
    install(sim.SymmetricHeap(sym))
    sim.fix_interpreter_bf16_dot()
    sim.fix_interpreter_fp8_cast()
    launch = persistent_launch(cfg, pc, programs)
    slices = schedule(cfg, pc).slices()
    fixed = []
    for r in range(world):
        weights = persistent_weights(
            cfg, expert_weights(w1[r * e_loc : (r + 1) * e_loc], w2[r * e_loc : (r + 1) * e_loc], cfg.precision), pc
        )
        fixed.append({**sym[r], **local[r], **weights, **descriptors(cfg, pc, weights, local[r])})
    outputs = []
    for xs, logits in calls:
        for r in range(world):
            _poison({**sym[r], **local[r]}, True)
        ys = [torch.full_like(x, float("nan")) for x in xs]
        bindings = [
            {**fixed[r], "logits": logits[r].float().contiguous(), "x": xs[r].contiguous(), "y": ys[r],
             "T": xs[r].shape[0], "me": r, "wait_ms": 1000}
            for r in range(world)
        ]  # fmt: skip
        for begin, end in slices:
            for r in range(world):
                b = {**bindings[r], "item_begin": begin, "item_end": end}
                launch.fn[launch.grid](*launch.arguments(b), **launch.constexprs)
        outputs.append(ys)
    return outputs, [{**sym[r], **local[r]} for r in range(world)]


# (H, I, experts per rank, top-k, max tokens) of the simulated layers
SIM_SHAPES = {"bf16": (128, 64, 4, 3, 24), "fp8": (256, 256, 4, 3, 24)}
# Tiles small enough that the simulated layers have several M and N tiles per expert and items of every
# region, groups of M tiles that do not divide their count, and every operand through TMA or pointers
# (L1's A rows too: pair-ordered through TMA, or gathered).
SIM_CONFIGS = {
    "bf16": [
        PersistentConfig(block_m=16, block_n1=32, block_n2=64, block_k=32, num_warps=4, num_stages=1, group_m=3,
                         tma_w1=True, tma_w2=False, tma_h=True, tma_a=True, route_tokens=8, route_cols=64,
                         dispatch_rows=4, combine_rows=2, reduce_rows=4),
        PersistentConfig(block_m=32, block_n1=64, block_n2=128, block_k=64, num_warps=4, num_stages=1, group_m=2,
                         tma_w1=False, tma_w2=True, tma_h=False, route_tokens=16, route_cols=128, dispatch_rows=8,
                         combine_rows=4, reduce_rows=2, half_tail=True),
    ],
    "fp8": [
        PersistentConfig(block_m=16, block_n2=256, num_warps=4, num_stages=1, group_m=3, tma_w1=True, tma_w2=True,
                         tma_h=True, tma_a=True, route_tokens=8, route_cols=128, dispatch_rows=4, combine_rows=2,
                         reduce_rows=4),
        PersistentConfig(block_m=32, block_n2=128, num_warps=4, num_stages=1, group_m=2, tma_w1=False, tma_w2=False,
                         tma_h=False, route_tokens=16, route_cols=256, dispatch_rows=8, combine_rows=4,
                         reduce_rows=2),
    ],
}  # fmt: skip
ROUTINGS = ("random", "skewed", "one_expert")
SIM_TOL_NORM, SIM_TOL_ROW = sim.SIM_TOL_NORM, sim.SIM_TOL_ROW


def token_counts(world: int, t_max: int, calls: int) -> list[list[int]]:
    """Tokens per rank per call: they differ between calls and ranks, the first call is full on rank 0,
    and at world > 1 one rank has no tokens in the second call (at world 1: the last call is empty)."""
    counts = [[t_max - (3 * c + 5 * r) % (t_max // 2) for r in range(world)] for c in range(calls)]
    counts[0][0] = t_max
    if world > 1 and calls > 1:
        counts[1][world - 1] = 0
    elif calls > 2:
        counts[-1][0] = 0
    return counts


def check(world: int, precision: str, routing: str, pc: PersistentConfig, programs: int, calls: int = 0,
          seed: int = 0) -> list[str]:  # fmt: skip
    """Run ``calls`` calls (0: 3 at world 1, the last one empty; 2 above, one rank empty in the second) of a
    small layer (``SIM_SHAPES``; ``one_expert``: top-1, every token to expert 1)
    and compare each with the torch references (as ``cpu_sim.check``), then the bookkeeping: rows
    received, pairs per expert, pair positions a permutation pointing back at their rows, the counters
    back at zero, the epoch and every flag at the number of calls."""
    h, i, e_per_rank, k, t_max = SIM_SHAPES[precision]
    if routing == "one_expert":
        k = 1
    fp8 = precision == "fp8"
    calls = calls or (3 if world == 1 else 2)
    e = e_per_rank * world
    cfg = MoEConfig(h, i, e, k, t_max, world, precision)
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(e, h, 2 * i, generator=g) / h**0.5
    w2 = torch.randn(e, i, h, generator=g) / i**0.5
    if fp8:
        cpu = torch.device("cpu")
        w1, w2 = w1 * block_gains(w1.shape, seed + 1, cpu), w2 * block_gains(w2.shape, seed + 2, cpu)
    w1, w2 = w1.bfloat16(), w2.bfloat16()
    inputs = []
    for tokens in token_counts(world, t_max, calls):
        xs = [torch.randn(t, h, generator=g) for t in tokens]
        if fp8:
            xs = [x * block_gains((1, h), seed + 3, torch.device("cpu")) for x in xs]
        logits = [torch.randn(t, e, generator=g) for t in tokens]
        if routing != "random":
            for lg in logits:
                lg[:, 1] += 20.0
        inputs.append(([x.bfloat16() for x in xs], logits))
    outputs, bufs = simulate_persistent(cfg, pc, inputs, w1, w2, programs)
    errors = []
    for c, ((xs, logits), ys) in enumerate(zip(inputs, outputs, strict=True)):
        for r in range(world):
            t = xs[r].shape[0]
            if t == 0:
                continue
            ids, wts = route(logits[r], k)
            ref32 = reference(xs[r], ids, wts, w1, w2)
            ref = reference_fp8(xs[r], ids, wts, w1, w2) if fp8 else ref32
            diff = ys[r].float() - ref
            norm = float(diff.norm() / ref.norm())
            worst = float((diff.norm(dim=1) / ref.norm(dim=1).clamp_min(1e-6)).max())
            if not (norm <= SIM_TOL_NORM and worst <= SIM_TOL_ROW):
                errors.append(f"call {c} rank {r} (T={t}): output error {norm:.3g} (worst row {worst:.3g})")
    last_xs, last_logits = inputs[-1]
    ids_all = [torch.full((t_max, k), -1, dtype=torch.int32) for _ in range(world)]
    for r in range(world):
        t = last_xs[r].shape[0]
        ids_all[r][:t] = route(last_logits[r], k)[0]
        b = bufs[r]
        if t and not torch.equal(b["topk_ids"][:t], ids_all[r][:t]):
            errors.append(f"rank {r}: top-k ids differ from torch")
        if fp8 and t:
            q, scale = quantize_rows(last_xs[r])
            if not (torch.equal(b["x_sym"][:t].view(torch.uint8), q.view(torch.uint8))
                    and torch.equal(b["x_scale"][:t], scale)):  # fmt: skip
                errors.append(f"rank {r}: the kernel's e4m3 tokens or scales differ from quant.quantize_rows")
    tokens = [x.shape[0] for x in last_xs]
    for r in range(world):
        errors += [f"rank {r}: {m}" for m in plan_errors(cfg, r, bufs[r], ids_all, tokens, "persistent")]
        errors += [f"rank {r}: {m}" for m in persistent_state_errors(cfg, r, bufs[r], calls)]
    return errors


def cases(worlds: list[int], routings: list[str], precision: str) -> list[tuple[int, str, int, int]]:
    """(world, routing, config index, programs) of a run: at every world each routing, with the configs
    of ``SIM_CONFIGS`` and grids of 1 and 3 programs taking turns (each world runs both configs and both
    grid sizes)."""
    out = []
    for iw, world in enumerate(worlds):
        for ir, routing in enumerate(routings):
            out.append((world, routing, (iw + ir) % len(SIM_CONFIGS[precision]), 3 if (iw + ir) % 3 == 1 else 1))
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="run the persistent MegaMoE kernel in Triton's interpreter on CPU")
    parser.add_argument("--world", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--precision", default="bf16", choices=sorted(SIM_CONFIGS))
    parser.add_argument("--routing", nargs="+", default=list(ROUTINGS), choices=ROUTINGS)
    args = parser.parse_args(argv)
    failed = False
    for world, routing, n, programs in cases(args.world, args.routing, args.precision):
        pc = dataclasses.replace(SIM_CONFIGS[args.precision][n], programs=programs)
        try:
            errors = check(world, args.precision, routing, pc, programs, seed=world + n)
        except (WouldWaitForever, InterpreterError) as exc:  # the interpreter wraps what a wait raises
            errors = [f"would wait for ever: {exc}"]
        failed |= bool(errors)
        verdict = "PASS" if not errors else errors[:3]
        print(f"{args.precision} world={world} {routing} config={n} programs={programs}: {verdict}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
