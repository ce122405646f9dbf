"""MegaMoE: an expert-parallel MoE layer (raw NVSHMEM dispatch/combine around Triton grouped GEMMs).

Usage (one PE per GPU, or several on one GPU with ``TRITON_RAW_SHARED_GPU=1``)::

    from triton_raw_ext import runtime
    runtime.init()
    layer = MegaMoE(hidden, intermediate, num_experts, top_k, max_tokens, w1_local, w2_local)
    y = layer(x, logits)          # collective: every rank calls it, each with its own tokens
    layer.close()                 # collective; then runtime.finalize()

Contract per rank: x [T, H] bf16 and router logits [T, E] (float32, bf16 or fp16), T <= max_tokens;
rank r owns experts [r * E/W, (r + 1) * E/W) with weights w1 [E/W, H, 2I] (gate columns, then up)
and w2 [E/W, I, H] bf16. y[t] = sum_k w[t, k] * L2_e(SwiGLU(L1_e(x[t]))) over the top-k experts e
of token t, weights softmax-normalised over the selected logits (ties go to the lower expert id).
``precision="fp8"`` runs the expert GEMMs on float8 e4m3 operands with block scales: the weights are
quantized once at construction (one scale per 128 x 128 block), x per token and 128 channels before
dispatch, h the same way after SwiGLU (``quant``; H and I multiples of 128); y stays bf16.
Consecutive calls are safe back to back: every symmetric buffer a peer touches is rewritten only
after a barrier that the peer passes after its last access (see the README). ``impl="persistent"`` runs
each call as one launch instead (``persistent``), ordered between ranks by flags, not barriers.

Run as a module from the repository root for the correctness check (PASS/FAIL table, JSON with
--json)::

    torchrun --nproc_per_node=1 -m tutorials.megamoe.megamoe --cases small
    TRITON_RAW_SHARED_GPU=1 torchrun --nproc_per_node=2 -m tutorials.megamoe.megamoe --cases small
    python -m tutorials.megamoe.megamoe --precision fp8 --cases small equiv
    python -m tutorials.megamoe.megamoe --impl persistent --cases small equiv
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections import ChainMap
from collections.abc import Mapping
from pathlib import Path

import torch

from triton_raw_ext.knobs import wait_timeout_ms

from ..common import op_registry
from ..common.bound_launch import BoundLaunch
from ..common.ranks import every_rank
from .config import (
    FP8_BLOCK,
    PRECISIONS,
    STATE_BUFFERS,
    MoEConfig,
    Tiles,
    choose_tiles,
    choose_tiles_fp8,
)
from .launch import KernelLaunch, barrier_launch, install_descriptor_scratch, launches
from .persistent_launch import (
    PersistentConfig,
    call_extras,
    choose_persistent,
    knob_overrides,
    persistent_buffers,
    persistent_config,
    persistent_launch,
    persistent_weights,
)
from .quant import expert_weights, quantize_rows

IMPLS = ("launches", "persistent")  # one call as 7-8 launches (and barriers), or as one persistent launch
# The binding keys that change from call to call (call_bindings); every other binding is the layer's own
PER_CALL_KEYS = ("logits", "x", "y", "T")  # the keys of call_values

TORCH_DTYPES = {  # the buffer dtype names of config.MoEConfig
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "int32": torch.int32,
    "int64": torch.int64,
    "float8_e4m3fn": torch.float8_e4m3fn,
}
_LOGIT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def call_bindings(
    buffers: dict[str, torch.Tensor], x: torch.Tensor, logits: torch.Tensor, y: torch.Tensor, world: int, rank: int,
    wait_ms: int,
) -> dict[str, object]:
    """What a call binds to its kernels' parameters (the keys of ``launch.KernelLaunch.params``): the layer's
    workspace and weights ``buffers``, the call's ``x``, float32 ``logits`` and ``y``, and the integers T
    (x's rows), W, me and wait_ms."""
    return {**buffers, **call_values(x, logits, y), "W": world, "me": rank, "wait_ms": wait_ms}


def call_values(x: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> dict[str, object]:
    """The bindings that change from call to call (``PER_CALL_KEYS``)."""
    return {"logits": logits, "x": x, "y": y, "T": x.shape[0]}


def meta_bindings(cfg: MoEConfig, persistent: PersistentConfig | None = None) -> dict[str, object]:
    """The bindings of a call of ``cfg.max_tokens`` tokens on rank 0 with every tensor on the meta device
    (dtype and shape only: nothing is allocated, no GPU is needed), the workspace and weights as a layer
    of ``cfg`` makes them, for either impl (the persistent kernel's with the knobs ``persistent``, default
    :func:`choose_persistent`'s): what ``MegaMoE`` preloads and ``aot`` compiles each kernel for. The
    kernels do not specialise on T, W, me, wait_ms or the items a persistent launch runs, so these
    compile the kernels of every call."""

    def empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device="meta")

    pc = persistent or choose_persistent(cfg)
    extra = [spec for part in persistent_buffers(cfg, pc) for spec in part]
    workspace = {n: empty(s, TORCH_DTYPES[d]) for n, s, d in (*cfg.symmetric_buffers(), *cfg.local_buffers(), *extra)}
    w1 = empty((cfg.local_experts, cfg.hidden, 2 * cfg.intermediate), torch.bfloat16)
    w2 = empty((cfg.local_experts, cfg.intermediate, cfg.hidden), torch.bfloat16)
    x = empty((cfg.max_tokens, cfg.hidden), torch.bfloat16)
    logits = empty((cfg.max_tokens, cfg.num_experts), torch.float32)
    # the persistent kernel's w1 may be interleaved and K-major (persistent_weights): as the layer binds it
    buffers = {**workspace, **persistent_weights(cfg, expert_weights(w1, w2, cfg.precision), pc)}
    bindings = call_bindings(buffers, x, logits, torch.empty_like(x), cfg.world, 0, wait_timeout_ms())
    return {**bindings, **call_extras(cfg, pc, buffers)}


class MegaMoE:
    """One MoE layer, expert-parallel over the NVSHMEM PEs; owns its symmetric workspace.

    Construction and :meth:`close` are collective (same arguments on every rank). NVSHMEM must be
    initialised (``triton_raw_ext.runtime.init()``) first. Every peer must be reachable with loads
    and stores (one node: NVLink, PCIe P2P or the same GPU); otherwise construction raises.
    ``precision`` is "bf16" (default) or "fp8" (e4m3 with block scales; the bf16 weights given are
    quantized here and not kept); ``tiles`` default to :func:`choose_tiles` / :func:`choose_tiles_fp8`.
    ``gemm_programs`` > 0 (bf16) runs L1 and L2 as one persistent launch of that many programs
    (``Tiles.gemm_programs``; the GPU's SM count is the natural choice); it was no faster on the H200.
    ``handle`` reaches the layer from the custom op ``triton_raw_ext::megamoe`` (torch_op) until :meth:`close`.

    ``impl="persistent"`` runs each call as one launch of ``persistent.moe_persistent`` (routing to
    write-back, no barrier kernel, no host value; calls may have 0 tokens), with the knobs of
    ``persistent`` (a :class:`PersistentConfig`, default :func:`choose_persistent`; ``tiles`` and
    ``gemm_programs`` are the launches' and are ignored); where that is the Gluon kernel in bf16, the layer
    keeps a K-major copy of the weights (``persistent_weights``). ``impl="launches"`` (default) is the call
    as separate launches.
    """

    def __init__(
        self,
        hidden: int,
        intermediate: int,
        num_experts: int,
        top_k: int,
        max_tokens: int,
        w1: torch.Tensor,
        w2: torch.Tensor,
        tiles: Tiles | None = None,
        *,
        precision: str = "bf16",
        gemm_programs: int = 0,
        impl: str = "launches",
        persistent: PersistentConfig | None = None,
    ) -> None:
        from triton_raw_ext import runtime as rt

        if precision not in PRECISIONS:
            raise ValueError(f"MegaMoE: precision={precision!r}; use one of {PRECISIONS}")
        if impl not in IMPLS:
            raise ValueError(f"MegaMoE: impl={impl!r}; use one of {IMPLS}")
        if not rt.is_initialized():
            raise RuntimeError("MegaMoE needs NVSHMEM: call triton_raw_ext.runtime.init() first")
        self.rank, world = rt.my_pe(), rt.n_pes()
        self.cfg = MoEConfig(hidden, intermediate, num_experts, top_k, max_tokens, world, precision)
        e_loc, h, i = self.cfg.local_experts, hidden, intermediate
        for name, t, shape in (("w1", w1, (e_loc, h, 2 * i)), ("w2", w2, (e_loc, i, h))):
            if tuple(t.shape) != shape or t.dtype != torch.bfloat16 or not t.is_cuda:
                raise ValueError(
                    f"MegaMoE: {name} must be a CUDA bf16 tensor of shape {shape} (this rank's "
                    f"experts), got {tuple(t.shape)} {t.dtype} on {t.device}"
                )
        self.impl = impl
        sym_specs, local_specs = self.cfg.symmetric_buffers(), self.cfg.local_buffers()
        self._launches: dict[int, list[KernelLaunch]] = {}
        # by id of the launch (kept alive here): its BoundLaunch and the binding keys of its varying parameters
        self._bound: dict[int, tuple[KernelLaunch, BoundLaunch, list[str]]] = {}
        self.weights = expert_weights(w1, w2, precision)
        if impl == "persistent":
            self.tiles = None
            self.persistent = persistent or choose_persistent(self.cfg)
            sms = torch.cuda.get_device_properties(w1.device).multi_processor_count
            # PEs sharing a GPU leave each other SMs: each one's kernel waits for the others' (persistent.py)
            programs = self.persistent.programs or max(1, sms // rt.pes_per_gpu())
            self._call = persistent_launch(self.cfg, self.persistent, programs)  # raises on unfit knobs
            extra_sym, extra_local = persistent_buffers(self.cfg, self.persistent)
            sym_specs, local_specs = [*sym_specs, *extra_sym], [*local_specs, *extra_local]
            self.weights = persistent_weights(self.cfg, self.weights, self.persistent)
            if self.persistent.gluon and precision != "fp8":  # the call's descriptor of x, made by the kernel
                install_descriptor_scratch(w1.device)
        else:
            self.persistent = None
            rows = max_tokens * world * top_k / num_experts  # expected pairs per local expert, uniform routing
            pick = choose_tiles_fp8 if precision == "fp8" else choose_tiles
            self.tiles = tiles or pick(rows, hidden, intermediate)
            if gemm_programs:
                self.tiles = dataclasses.replace(self.tiles, gemm_programs=gemm_programs)
            # built now so that tiles unfit for the precision raise here, before any collective allocation
            self._launches[max_tokens] = launches(self.cfg, self.tiles, max_tokens)
            if self.tiles.tma:
                install_descriptor_scratch(w1.device)
        self._barrier = barrier_launch(self.cfg)
        self.wait_ms = wait_timeout_ms()  # the bound of the kernels' waits for peers
        self._rt = rt
        self._preload()
        self.sym = {n: rt.zeros(s, TORCH_DTYPES[d]) for n, s, d in sym_specs}
        for pe in range(world):
            rt.peer(self.sym["comb"], pe)  # raises naming the PE when it is not load/store reachable
        dev = w1.device
        self.local = {n: torch.zeros(s, dtype=TORCH_DTYPES[d], device=dev) for n, s, d in local_specs}
        # persistent: the descriptors over the weights and h, the whole call's items (Gluon: the buffers' table)
        buffers = {**self.weights, **self.sym, **self.local}
        self._extras = {} if self.persistent is None else call_extras(self.cfg, self.persistent, buffers)
        self._layer_bindings: dict[str, object] | None = None  # _bindings'
        self.closed = False
        self.handle = op_registry.register(self)  # what torch_op's custom op takes to reach this layer

    def _preload(self) -> None:
        """Compile and load every kernel of a call before any rank allocates or communicates, then wait
        on the host for all ranks (a module loaded while a peer's kernel waits for this rank can hang
        the job: :mod:`triton_raw_ext.kernel_loading`). The kernels do not specialise on the token count or
        the rank, so these are the kernels of every later call."""
        from triton_raw_ext import preload

        bindings = meta_bindings(self.cfg, self.persistent)
        calls = [self._call] if self.impl == "persistent" else self._launches[self.cfg.max_tokens]
        for launch in [*calls, *([self._barrier] if self.cfg.world > 1 else [])]:
            preload(
                launch.fn, *launch.arguments(bindings), grid=launch.grid, **launch.constexprs,
                num_warps=launch.num_warps, num_stages=launch.num_stages,
            )
        self._rt.host_barrier()

    def _bindings(self, x: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> ChainMap[str, object]:
        if self._layer_bindings is None:  # the buffers, weights and integers of every call, merged once
            buffers = {**self.sym, **self.local, **self.weights}
            every = call_bindings(buffers, x, logits, y, self.cfg.world, self.rank, self.wait_ms)
            self._layer_bindings = {k: v for k, v in {**every, **self._extras}.items() if k not in PER_CALL_KEYS}
        # the call's few values over the layer's many, not merged: a bound launch reads only the call's
        return ChainMap(call_values(x, logits, y), self._layer_bindings)

    def _launch(self, launch: KernelLaunch, bindings: Mapping[str, object]) -> None:
        """Launch ``launch`` with ``bindings``: bound at its first launch (``BoundLaunch``: Triton's
        per-launch binding costs more host time than the launch), then only the per-call bindings change."""
        entry = self._bound.get(id(launch))
        if entry is None:
            kwargs = {**launch.constexprs, "num_warps": launch.num_warps, "num_stages": launch.num_stages}
            varying = [(name, key) for name, key in launch.params if key in PER_CALL_KEYS]
            bound = BoundLaunch(launch.fn, launch.grid, launch.arguments(bindings), kwargs, [n for n, _ in varying])
            entry = self._bound[id(launch)] = (launch, bound, [key for _, key in varying])
        _, bound, keys = entry
        bound.launch(*(bindings[key] for key in keys))

    def __call__(
        self, x: torch.Tensor, logits: torch.Tensor, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """y [T, H] bf16 for this rank's tokens (collective across ranks)."""
        if self.closed:
            raise RuntimeError("MegaMoE: the layer was closed")
        cfg = self.cfg
        t = x.shape[0] if x.dim() == 2 else -1
        least = 0 if self.impl == "persistent" else 1  # the launches' grids need a token
        if (
            x.dim() != 2
            or x.shape[1] != cfg.hidden
            or x.dtype != torch.bfloat16
            or not least <= t <= cfg.max_tokens
        ):
            raise ValueError(
                f"MegaMoE: x must be [T, {cfg.hidden}] bf16 with {least} <= T <= {cfg.max_tokens}, got "
                f"{tuple(x.shape)} {x.dtype}"
            )
        if tuple(logits.shape) != (t, cfg.num_experts) or logits.dtype not in _LOGIT_DTYPES:
            raise ValueError(
                f"MegaMoE: logits must be [{t}, {cfg.num_experts}] float32/bf16/fp16, got "
                f"{tuple(logits.shape)} {logits.dtype}"
            )
        y = torch.empty_like(x) if out is None else out
        if y.shape != x.shape or y.dtype != torch.bfloat16 or not y.is_contiguous() or y.data_ptr() % 16:
            raise ValueError(
                f"MegaMoE: out must be a contiguous bf16 tensor of shape {tuple(x.shape)} at a 16-byte "
                "aligned address"
            )
        # the preloaded kernels take 16-byte aligned x and float32 logits: anything else is copied
        x = x.contiguous() if x.data_ptr() % 16 == 0 else x.clone()
        logits = logits.float().contiguous()
        if logits.data_ptr() % 16:
            logits = logits.clone()
        self.run(self._bindings(x, logits, y), t)
        return y

    def run(self, bindings: Mapping[str, object], tokens: int, only: tuple[str, ...] = ()) -> None:
        """Enqueue the launches of one call (all, or just those ``only`` names, by kernel name or by step:
        the bf16 kernel names also select the fp8 kernels of the same steps). ``impl="persistent"``: the
        one launch of the call (``only`` must be empty)."""
        if self.impl == "persistent":
            if only:
                raise ValueError(f"run(only={only}): impl='persistent' runs a call as one launch, not by steps")
            self._launch(self._call, bindings)
            return
        plan = self._launches.get(tokens)
        if plan is None:
            plan = self._launches[tokens] = launches(self.cfg, self.tiles, tokens)
        if only and not any(launch.name in only or launch.step in only for launch in plan):
            names = [lc.name for lc in plan]
            raise ValueError(f"run(only={only}): no launch of this layer has that name or step; it has {names}")
        for launch in plan:
            if only and launch.name not in only and launch.step not in only:
                continue
            if launch.barrier_before and self.cfg.world > 1 and not only:
                self._launch(self._barrier, bindings)
            self._launch(launch, bindings)

    def routing(self, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, weights) of the last call's first ``tokens`` tokens (views, valid until the next call)."""
        return self.sym["topk_ids"][:tokens], self.sym["topk_w"][:tokens]

    def poison(self) -> None:
        """Fill every workspace with garbage (tests: unwritten reads then show up as NaN or bad indices),
        except ``config.STATE_BUFFERS``.

        Safe between calls: peers write into this rank's symmetric memory only after the next call's
        first barrier.
        """
        for name, t in (*self.sym.items(), *self.local.items()):
            if name not in STATE_BUFFERS:
                t.fill_(float("nan") if t.is_floating_point() else -7)

    def close(self) -> None:
        """Free the symmetric workspace (collective; idempotent). Waits for this rank's queued work first."""
        if self.closed:
            return
        self.closed = True
        op_registry.unregister(self.handle)
        torch.cuda.current_stream().synchronize()
        if self.cfg.world > 1:  # no peer still reads or writes our buffers
            self._launch(self._barrier, {**self.sym, **self.local, "me": self.rank, "W": self.cfg.world,
                                         "wait_ms": self.wait_ms})  # fmt: skip
            torch.cuda.current_stream().synchronize()
        self.sym.clear()  # last references: NVSHMEM frees them now, in the same order on every rank
        self.local.clear()
        self._launches.clear()
        self._bound.clear()

    def __enter__(self) -> MegaMoE:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ----------------------------------------------------------------------------- correctness check

CASES = {
    # name: (H, I, E, top_k, tokens per rank)
    "small": [(128, 128, 2, 1, 64), (256, 128, 8, 2, 96), (128, 256, 16, 8, 128), (256, 192, 4, 4, 33)],
    "equiv": [(4096, 1536, 16, 8, 512)],  # the production per-rank load at world 1 (E/8 local experts)
    "prod": [(4096, 1536, 128, 8, 512)],
    "wide": [(7168, 2048, 16, 8, 512)],  # H and I of DeepSeek-V3, 16 local experts: fp8 K blocks of 56 and 16
}
TOL_NORM = 1e-2  # relative L2 error of the whole output vs float32 (bf16 operands, see README)
TOL_ROW = 4e-2  # worst single token row: a lost (1.0) or doubled (1.0) row fails by far
# fp8 is checked against reference_fp8, which quantizes exactly as the layer does (the layer's e4m3
# tokens must equal quant's bit for bit). What remains is the bf16 rounding of y_pair, the pushed
# partial and y (~2e-3) plus h codes one e4m3 step away from the reference's where the tensor cores'
# fp8 accumulation differs from float32: with each K block's product promoted into float32 sums
# (impl="launches", both persistent kernels) 3e-3 to 8e-3, worst rows up to 4e-2 on 128-wide rows. The bounds
# are 2x that and well below fp8's own error vs float32 (~6.4e-2); a scale applied to the wrong block (the
# tests scale blocks ~50 % apart) or a lost row fails by far. Sums kept in the tensor cores for the whole
# K (the persistent kernels' fast_accum) come to 1.35e-2 at the production load and 1.55e-2 at H 7168.
TOL_NORM_FP8 = 1.5e-2
TOL_ROW_FP8 = 0.1
TOL_NORM_FP8_VS_FP32 = 0.1  # sanity bound on the quantization error itself (e4m3 x, w and h: ~6.4e-2)


def make_weights(
    h: int, i: int, e: int, seed: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """All experts' weights (same on every rank for a seed), scaled so outputs stay O(1)."""
    g = torch.Generator(device=device).manual_seed(seed)
    w1 = (torch.randn(e, h, 2 * i, generator=g, device=device) / math.sqrt(h)).to(torch.bfloat16)
    w2 = (torch.randn(e, i, h, generator=g, device=device) / math.sqrt(i)).to(torch.bfloat16)
    return w1, w2


def block_gains(shape: tuple[int, ...], seed: int, device: torch.device) -> torch.Tensor:
    """Factors exp(N(0, 1/4)), one per 128 x 128 block of the last two dims of ``shape`` (fewer than 128
    rows: one block row). fp8 checks multiply weights and tokens by them so that neighbouring blocks get
    scales ~50 % apart, and a scale applied to the wrong block shows in the output."""
    *lead, r, c = shape
    g = torch.Generator(device=device).manual_seed(seed)
    coarse = torch.exp(0.5 * torch.randn(*lead, -(-r // 128), -(-c // 128), generator=g, device=device))
    return coarse.repeat_interleave(128, -2)[..., :r, :].repeat_interleave(128, -1)[..., :c]


ROUTINGS = ("random", "skewed", "balanced", "crowded")  # how make_inputs' logits route the tokens
TIMED_ROUTINGS = ROUTINGS[:3]  # what the timing tools offer; crowded is the check's edge case


def make_inputs(t: int, h: int, e: int, routing: str, seed: int, device: torch.device, top_k: int = 0):
    """Fresh tokens [t, h] and float32 logits [t, e] for ``routing`` (:data:`ROUTINGS`; "balanced" and
    "crowded" need ``top_k``). Logits are normal noise, and a routing lifts some of them by 20, above any
    noise: "random" none; "skewed" expert (seed % e), every token's first choice; "balanced" token i's
    experts (i * top_k + j) % e for j < top_k, so that each expert gets t * top_k / e pairs (within one);
    "crowded" experts 0 .. top_k - 1 for every token (the others get no pair)."""
    if routing not in ROUTINGS:
        raise ValueError(f"make_inputs: routing {routing!r} is not one of {ROUTINGS}")
    if routing in ("balanced", "crowded") and not 1 <= top_k <= e:
        raise ValueError(f"make_inputs: {routing} routing needs 1 <= top_k <= e ({e}), got top_k={top_k}")
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(t, h, generator=g, device=device).to(torch.bfloat16)
    logits = torch.randn(t, e, generator=g, device=device)
    if routing == "skewed":
        logits[:, seed % e] += 20.0
    elif routing == "balanced":
        chosen = (torch.arange(t, device=device)[:, None] * top_k + torch.arange(top_k, device=device)) % e
        logits.scatter_add_(1, chosen, torch.full_like(chosen, 20.0, dtype=logits.dtype))
    elif routing == "crowded":
        logits[:, :top_k] += 20.0
    return x, logits


def _all_gather_cpu(t: torch.Tensor, world: int) -> list[torch.Tensor]:
    if world == 1:
        return [t.cpu()]
    import torch.distributed as dist

    parts = [torch.empty_like(t.cpu()) for _ in range(world)]
    dist.all_gather(parts, t.cpu().contiguous())
    return parts


def bookkeeping_errors(layer: MegaMoE, ids_all: list[torch.Tensor], tokens_all: list[int]) -> list[str]:
    """Compare the layer's counters with the torch plan (all ranks' routing); [] when consistent."""
    return plan_errors(layer.cfg, layer.rank, {**layer.sym, **layer.local}, ids_all, tokens_all, layer.impl)


def persistent_state_errors(cfg: MoEConfig, me: int, buffers: dict[str, torch.Tensor], calls: int) -> list[str]:
    """Rank ``me``'s persistent-kernel state in ``buffers`` after its ``calls`` calls: counters at zero, the
    epoch and every flag at ``calls`` (the combine flags at world > 1 only), except that a peer's plan
    flag may be at ``calls + 1``: a peer starts its next call once its reduce has every combine of this
    one, so it may already have planned that call for this rank (it cannot get further: its next
    combine for this rank waits for this rank's next plan). [] when so."""
    errors = []
    if buffers["sched"].any():
        errors.append(f"work counters left at {buffers['sched'].tolist()}")
    if int(buffers["call_epoch"]) != calls:
        errors.append(f"epoch {int(buffers['call_epoch'])} after {calls} calls")
    plan = buffers["plan_flag"].tolist()
    if any(v != calls and not (src != me and v == calls + 1) for src, v in enumerate(plan)):
        errors.append(f"plan_flag {plan} after {calls} calls (peers' may be one call ahead)")
    if cfg.world > 1 and buffers["comb_flag"].tolist() != [calls] * cfg.world:
        errors.append(f"comb_flag {buffers['comb_flag'].tolist()} after {calls} calls")
    return errors


def plan_errors(
    cfg: MoEConfig, me: int, buffers: dict[str, torch.Tensor], ids_all: list[torch.Tensor], tokens_all: list[int],
    impl: str,
) -> list[str]:  # fmt: skip
    """Rank ``me``'s bookkeeping in ``buffers`` (its workspace after a call of ``impl``) against the torch
    plan of every rank's routing (``ids_all[r][: tokens_all[r]]``): send counts, rows received per source,
    pairs per local expert (counted twice by the launches; the persistent kernel's layout), pair positions
    a permutation, each pair pointing back at its row. [] when consistent."""
    from .routing import receive_counts, send_plan

    e_loc = cfg.local_experts
    errors = []
    plan = send_plan(ids_all[me][: tokens_all[me]], e_loc, cfg.world)
    if not torch.equal(buffers["send_count"].cpu(), plan.send_count):
        errors.append(f"send_count {buffers['send_count'].tolist()} != {plan.send_count.tolist()}")
    rows, pairs = receive_counts([ids_all[r][: tokens_all[r]] for r in range(cfg.world)], e_loc)
    recv_n = buffers["recv_n"].cpu().long()
    if not torch.equal(recv_n, rows[me]):
        errors.append(f"rows received per source {recv_n.tolist()} != {rows[me].tolist()}")
    if impl == "persistent":
        per_expert = buffers["layout"][1 : 1 + e_loc].cpu().long()  # persistent._layout_item's pairs per expert
        if not torch.equal(per_expert, pairs[me]):
            errors.append(f"pairs per local expert {per_expert.tolist()} != {pairs[me].tolist()}")
    else:
        counters = buffers["counters"].cpu().long()
        if not torch.equal(counters[:e_loc], pairs[me]) or not torch.equal(counters[e_loc:], pairs[me]):
            errors.append(f"pairs per local expert {counters.tolist()} != {pairs[me].tolist()} (twice)")
    k = cfg.top_k
    inv = buffers["inv_pos"].cpu().view(cfg.world, cfg.max_tokens, k)
    used = torch.cat([inv[s, : int(rows[me, s])].flatten() for s in range(cfg.world)])
    used = used[used >= 0].sort().values
    if not torch.equal(used, torch.arange(int(pairs[me].sum()), dtype=used.dtype)):
        errors.append("pair positions are not a permutation: a pair was lost or placed twice")
    else:
        sorted_row = buffers["sorted_row"].cpu()
        for s in range(cfg.world):
            for slot in range(int(rows[me, s])):
                for p in inv[s, slot].tolist():
                    if p >= 0 and int(sorted_row[p]) != s * cfg.max_tokens + slot:
                        errors.append(
                            f"pair {p} points at row {int(sorted_row[p])}, not {s * cfg.max_tokens + slot}"
                        )
                        return errors
    return errors



def check_case(
    case: tuple[int, int, int, int, int],
    routing: str,
    iters: int,
    seed: int,
    precision: str = "bf16",
    gemm_programs: int = 0,
    impl: str = "launches",
    knobs: dict | None = None,
) -> dict:
    """Build a layer for ``case``, run ``iters`` calls with fresh inputs, check each; the result row.

    ``routing``: one of :data:`ROUTINGS` (:func:`make_inputs`): "random"; "skewed", one expert every
    token's first choice; "balanced", the same pairs for every expert; "crowded", every token's top-k the
    same k experts (the others get no pair).
    ``gemm_programs``: as MegaMoE's; the work counters of the persistent launch must be back at zero
    after every call. ``impl``: as MegaMoE's; "persistent" also gives the last rank no tokens in the
    second call (at world 1 the call has none) and checks after every call that the kernel's counters are
    back at zero and its epoch and every flag count the calls; ``knobs`` override
    :func:`choose_persistent`'s fields.

    bf16: against the float32 reference (TOL_NORM, TOL_ROW). fp8: weights and tokens scaled by
    :func:`block_gains`; the quantized tokens must equal ``quant.quantize_rows`` bit for bit and
    the output the quantization-aware reference (TOL_NORM_FP8, TOL_ROW_FP8); the error against
    float32 is reported and bounded by TOL_NORM_FP8_VS_FP32.
    """
    from triton_raw_ext import runtime as rt

    from .reference import reference, reference_fp8
    from .routing import route

    h, i, e, k, t_max = case
    world, me = rt.n_pes(), rt.my_pe()
    dev = torch.device("cuda", torch.cuda.current_device())
    fp8 = precision == "fp8"
    w1, w2 = make_weights(h, i, e, seed, dev)
    if fp8:
        w1 = (w1.float() * block_gains(w1.shape, seed + 1, dev)).to(torch.bfloat16)
        w2 = (w2.float() * block_gains(w2.shape, seed + 2, dev)).to(torch.bfloat16)
    tol_norm, tol_row = (TOL_NORM_FP8, TOL_ROW_FP8) if fp8 else (TOL_NORM, TOL_ROW)
    e_loc = e // world
    row = {
        "H": h, "I": i, "E": e, "top_k": k, "tokens": t_max, "world": world, "routing": routing, "rank": me,
        "precision": precision, "impl": impl, "knobs": knobs or {},
    }  # fmt: skip
    errors: list[str] = []
    worst_norm = worst_row = worst_fp32 = 0.0
    w1_loc, w2_loc = w1[me * e_loc : (me + 1) * e_loc], w2[me * e_loc : (me + 1) * e_loc]
    persistent = None
    if impl == "persistent" and knobs:
        persistent = persistent_config(MoEConfig(h, i, e, k, t_max, world, precision), knobs)
    with MegaMoE(
        h, i, e, k, t_max, w1_loc, w2_loc, precision=precision, gemm_programs=gemm_programs, impl=impl,
        persistent=persistent,
    ) as layer:  # fmt: skip
        for it in range(iters):
            t = t_max - (it * 7 + me) % max(1, t_max // 4)  # ranks and calls differ in token count
            if impl == "persistent" and it == 1 and me == world - 1:
                t = 0  # a rank without tokens still serves its experts (at world 1: a call without any)
            x, logits = make_inputs(t, h, e, routing, seed * 1000 + it * 10 + me, dev, top_k=k)
            if fp8:
                x = (x.float() * block_gains((1, h), seed + 3, dev)).to(torch.bfloat16)
            layer.poison()
            out = torch.full_like(x, float("nan"))
            layer(x, logits, out=out)
            torch.cuda.synchronize()
            ids, wts = (v.clone() for v in layer.routing(t))
            ref_ids, ref_w = route(logits, k)
            if not torch.equal(ids, ref_ids):
                errors.append(
                    f"call {it}: top-k ids differ from torch on {int((ids != ref_ids).any(1).sum())} tokens"
                )
            if not torch.allclose(wts, ref_w, rtol=1e-5, atol=1e-6):
                errors.append(
                    f"call {it}: routing weights differ from torch by {float((wts - ref_w).abs().max()):.2e}"
                )
            padded = torch.full((t_max, k), -1, dtype=torch.int32, device=dev)
            padded[:t] = ids
            ids_all = _all_gather_cpu(padded, world)
            tokens_all = [int(v) for v in _all_gather_cpu(torch.tensor([t]), world)]
            errors += [f"call {it}: {m}" for m in bookkeeping_errors(layer, ids_all, tokens_all)]
            if layer.local["gemm_sched"].any():
                errors.append(f"call {it}: moe_gemms left its work counters at {layer.local['gemm_sched'].tolist()}")
            if impl == "persistent":
                state = persistent_state_errors(layer.cfg, layer.rank, {**layer.sym, **layer.local}, it + 1)
                errors += [f"call {it}: {m}" for m in state]
            if t == 0:
                continue
            if fp8:
                xq, xs = quantize_rows(x)
                if not (
                    torch.equal(layer.sym["x_sym"][:t].view(torch.uint8), xq.view(torch.uint8))
                    and torch.equal(layer.sym["x_scale"][:t], xs)
                ):
                    errors.append(f"call {it}: the layer's e4m3 tokens or scales differ from quant.quantize_rows")
            ref32 = reference(x, ids, wts, w1, w2)
            ref = reference_fp8(x, ids, wts, w1, w2) if fp8 else ref32
            diff = out.float() - ref
            norm = float(diff.norm() / ref.norm())
            rows = float((diff.norm(dim=1) / ref.norm(dim=1).clamp_min(1e-6)).max())
            fp32 = float((out.float() - ref32).norm() / ref32.norm())
            worst_norm, worst_row, worst_fp32 = max(worst_norm, norm), max(worst_row, rows), max(worst_fp32, fp32)
            if not torch.isfinite(out).all() or not norm <= tol_norm or not rows <= tol_row:
                errors.append(f"call {it}: output error norm {norm:.2e}, worst row {rows:.2e} (or NaN)")
            if fp8 and not fp32 <= TOL_NORM_FP8_VS_FP32:
                errors.append(f"call {it}: error vs float32 {fp32:.2e} > {TOL_NORM_FP8_VS_FP32} (quantization)")
    row.update(
        rel_err=worst_norm, worst_row_err=worst_row, rel_err_vs_fp32=worst_fp32, ok=not errors, errors=errors[:5]
    )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=["small"], choices=sorted(CASES))
    parser.add_argument("--routing", nargs="+", default=["random", "skewed"], choices=ROUTINGS)
    parser.add_argument("--iters", type=int, default=2, help="calls per layer (reuse across calls)")
    parser.add_argument(
        "--precision", default="bf16", choices=PRECISIONS, help="fp8: e4m3 GEMMs, cases with H, I %% 128 == 0"
    )
    parser.add_argument(
        "--persistent-gemms", action="store_true", help="bf16: L1 and L2 as one persistent launch (one program per SM)"
    )
    parser.add_argument("--impl", default="launches", choices=IMPLS, help="persistent: one launch per call")
    parser.add_argument(
        "--knob", action="append", default=[], metavar="NAME=VALUE",
        help="impl persistent: a PersistentConfig field over choose_persistent's (e.g. gluon=0: the Triton kernel)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, help="write the result rows here (rank 0)")
    args = parser.parse_args(argv)
    try:
        knobs = knob_overrides(args.knob)
    except ValueError as e:
        raise SystemExit(f"--knob {e}") from None

    from triton_raw_ext import runtime as rt

    rt.init()
    world, me = rt.n_pes(), rt.my_pe()
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    gemm_programs = sms if args.persistent_gemms else 0
    rows = []
    start = time.time()
    for name in args.cases:
        for n_case, case in enumerate(CASES[name]):
            if case[2] % world or (args.precision == "fp8" and (case[0] % FP8_BLOCK or case[1] % FP8_BLOCK)):
                continue
            for routing in args.routing:
                print(f"rank {me}: case {name} {case} {routing}: started", file=sys.stderr, flush=True)
                rows.append(
                    check_case(case, routing, args.iters, 17 + n_case, args.precision, gemm_programs,
                               args.impl, knobs)
                )
                rows[-1]["case"] = name
                verdict = "ok" if rows[-1]["ok"] else "FAIL"
                print(f"rank {me}: case {name} {case} {routing}: {verdict}", file=sys.stderr, flush=True)
    if world > 1:
        rows = [r for part in every_rank(rows) for r in part]
    ok = all(r["ok"] for r in rows)
    if me == 0:
        print(
            f"{'case':6} {'H':>5} {'I':>5} {'E':>4} {'k':>2} {'T':>4} {'W':>2} {'rank':>4} {'routing':8} "
            f"{'rel err':>9} {'worst row':>9} {'vs fp32':>9}  result"
        )
        for r in rows:
            print(
                f"{r['case']:6} {r['H']:5} {r['I']:5} {r['E']:4} {r['top_k']:2} {r['tokens']:4} "
                f"{r['world']:2} {r['rank']:4} {r['routing']:8} {r['rel_err']:9.2e} "
                f"{r['worst_row_err']:9.2e} {r['rel_err_vs_fp32']:9.2e}  "
                f"{'PASS' if r['ok'] else 'FAIL ' + '; '.join(r['errors'])}"
            )
        print(
            f"megamoe correctness world={world} precision={args.precision} impl={args.impl}"
            f"{''.join(f' {a}' for a in args.knob)}: "
            f"{'PASS' if ok else 'FAIL'} "
            f"({time.time() - start:.0f} s; rel err is vs {'reference_fp8' if args.precision == 'fp8' else 'float32'})"
        )
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            summary = {"world": world, "precision": args.precision, "impl": args.impl, "ok": ok, "rows": rows}
            args.json.write_text(json.dumps({**summary, "argv": sys.argv}, indent=1))
    rt.finalize()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
