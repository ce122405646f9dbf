"""AllGather-GEMM with the all-gather hidden behind a persistent Triton GEMM.

``op = AllGatherGEMM(m_per_rank, n_per_rank, k, dtype)`` then ``c = op(a, b)`` on every rank:
``a`` [m_per_rank, k] is this rank's shard of A, ``b`` [k, n_per_rank] its B, and
``c = AllGather(a) @ b`` [world * m_per_rank, n_per_rank]. Collective: every rank calls it the
same number of times, in the same order, and a rank's calls must not run at once (issue them on one
stream, or order their streams with events, as for NCCL collectives): two persistent GEMMs running
together can each hold the SMs the other needs to finish.

One call, on rank ``me`` with epoch ``e`` (a per-operator counter, identical on every rank), on the
current stream S, filling workspace buffer ``e % 2`` (two symmetric gathered-A buffers):

1. Side stream P (after S, so after ``a`` is written): for each destination in
   :func:`schedule.push_order`, the copy engine pushes ``a`` into slot ``me`` of the
   destination's buffer ``e % 2`` through a peer view, then a stream memory write raises the
   destination's ``ready[me]`` to ``e`` (fenced after the copy).
2. S: the persistent GEMM. Its tiles of the local shard read ``a`` itself (no copy, no wait); its
   tiles of rank ``src`` wait for ``ready[src] >= e`` (raw CUDA ``ag_wait_ready``), then read buffer
   ``e % 2``, ranks in rotated order. S then joins P, and P waits for S.

No barrier is needed between calls. A rank pushes call ``e`` into a peer's buffer ``e % 2`` only
after its own GEMM of call ``e - 1`` ended (P follows S, and at the end of each call P also waits
for S, whatever stream the next call comes on), and that GEMM waited for the peer's push of call
``e - 1``, which the peer started only after *its* GEMM of call ``e - 2`` ended: the last reader of
buffer ``e % 2`` there. So a rank may run one call ahead of a peer, never two.
Epochs only grow, so flags are never reset. The producer uses no SM (copy engine + stream writes),
so it progresses while the GEMM fills the GPU. At world 1 there is no workspace and no runtime, and
no flag is written or checked. That is the ``push="copy_engine"`` path (eager only); ``push="sm"``
pushes from the GEMM's programs with the epoch in device memory, so a call can be captured in a CUDA
graph, and ``"auto"`` (the default) chooses (``push.py``).

Run the correctness check from the repository root: ``python -m tutorials.allgather_gemm.allgather_gemm``
(world 1), ``torchrun --nproc_per_node=N -m tutorials.allgather_gemm.allgather_gemm`` (one GPU per
rank), or the same with ``TRITON_RAW_SHARED_GPU=1`` (N ranks on GPU 0; start MPS first so the ranks'
kernels run concurrently).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from triton_raw_ext.knobs import wait_timeout_ms

from ..common import op_registry
from ..common.bound_launch import BoundLaunch
from ..common.ranks import every_rank
from ..common.timing import SLEEP_CYCLES_PER_US
from . import reference
from .kernels import ag_gemm_kernel, ag_gemm_sm_push_kernel, ag_wait_all_kernel
from .push import PUSH_CHOICES, STATE_EPOCH, Push, choose_push, state_words
from .schedule import DEFAULT_CONFIG, ELEMENT_BYTES, WORKSPACE_BUFFERS, GemmConfig, check_shapes, push_order
from .stream_ops import write_flag

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
# Shared-GPU mode (several PEs on one GPU): each PE's persistent GEMM takes SMs // PEs minus this
# many programs. A GEMM holding every SM while it spins on a peer's flag can starve the work that
# raises the flag (a same-device copy run on SMs): seen as the 20 s wait trap at world 2 and 4 on the
# H200 for shapes whose tiles fill the GPU.
SPARE_SMS_PER_SHARING_PE = 2
TUTORIAL_SHAPES = ((1024, 1024, 1024), (4096, 1024, 8192), (4096, 8192, 8192), (8192, 8192, 8192),
                (4096, 8192, 28672))  # (m_per_rank, n_per_rank, k)


def _distributed_world(group: Any) -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1


# The parameters of each kernel that change from call to call; the rest are the operator's own.
GEMM_PER_CALL = ("local_desc", "gathered_desc", "b_desc", "c_desc", "epoch")
# At world 1 the peers' loop has no tile and nothing waits: gathered_desc and the epoch are never read.
GEMM_PER_CALL_ONE_RANK = ("local_desc", "b_desc", "c_desc")
SM_PUSH_PER_CALL = ("local_desc", "b_desc", "c_desc", "a_ptr")


def gemm_launch(
    config: GemmConfig, local_desc: TensorDescriptor, gathered_desc: TensorDescriptor, b: torch.Tensor,
    out: torch.Tensor, ready: torch.Tensor, *, epoch: int, rank: int, world: int, wait_ms: int, num_sms: int,
    wait: bool,
) -> tuple[tuple[int], tuple[Any, ...], dict[str, Any]]:
    """The grid, arguments and keyword arguments (constexprs, warps, stages) of ``ag_gemm_kernel`` for one
    GEMM of the operator: this rank's shard of A through ``local_desc``, the peers' rows through
    ``gathered_desc`` (both [m_per_rank or world * m_per_rank, k] in blocks [block_m, block_k]), times
    ``b`` [k, n], into ``out`` [world * m_per_rank, n]; with ``wait`` a peer's tiles first wait for
    ``ready[src] >= epoch`` (bounded by ``wait_ms``). Needs no GPU (``aot`` builds it on meta tensors)."""
    m_per_rank, (k, n) = local_desc.shape[0], b.shape
    b_desc = TensorDescriptor.from_tensor(b, [config.block_k, config.block_n])
    c_block_n = config.block_n // 2 if config.epilogue_subtile else config.block_n
    c_desc = TensorDescriptor.from_tensor(out, [config.block_m, c_block_n])
    tiles = (m_per_rank // config.block_m) * world * triton.cdiv(n, config.block_n)
    # The grid never exceeds NUM_SMS: the kernel's second loop relies on program_id < NUM_SMS.
    grid = (min(num_sms, tiles),)
    args = (local_desc, gathered_desc, b_desc, c_desc, ready, epoch, rank, world, m_per_rank, n, k, wait_ms)
    kwargs = dict(
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
        NUM_SMS=num_sms, WAIT=wait, FLATTEN=config.flatten, EPILOGUE_SUBTILE=config.epilogue_subtile,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    return grid, args, kwargs


def sm_push_launch(
    config: GemmConfig, local_desc: TensorDescriptor, buffers_desc: TensorDescriptor, b: torch.Tensor,
    out: torch.Tensor, a: torch.Tensor, workspace: torch.Tensor, ready: torch.Tensor, state: torch.Tensor, *,
    rank: int, world: int, wait_ms: int, num_sms: int,
) -> tuple[tuple[int], tuple[Any, ...], dict[str, Any]]:
    """The grid, arguments and keyword arguments of ``ag_gemm_sm_push_kernel``: :func:`gemm_launch`'s GEMM
    with waits, reading the peers' rows from ``buffers_desc`` (both workspace buffers as one
    [2 * world * m_per_rank, k] matrix), whose programs first push ``a`` into the symmetric ``workspace``
    and raise the symmetric ``ready`` flags, with the epoch in ``state`` (push.py's state words)."""
    grid, args, kwargs = gemm_launch(config, local_desc, buffers_desc, b, out, ready, epoch=0, rank=rank, world=world,
                                     wait_ms=wait_ms, num_sms=num_sms, wait=True)  # fmt: skip
    local, buffers, b_desc, c_desc, _, _, _, _, m_per_rank, n, k, _ = args
    del kwargs["WAIT"]
    shard_bytes = m_per_rank * k * ELEMENT_BYTES
    return grid, (local, buffers, b_desc, c_desc, a, workspace, ready, state, rank, world, m_per_rank, n, k, wait_ms,
                  shard_bytes), kwargs  # fmt: skip


def _meta(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def _meta_desc(t: torch.Tensor, config: GemmConfig) -> TensorDescriptor:
    return TensorDescriptor.from_tensor(t, [config.block_m, config.block_k])


def meta_gemm_launch(
    config: GemmConfig, dtype: torch.dtype, m_per_rank: int, n: int, k: int, *, epoch: int, rank: int, world: int,
    wait_ms: int, num_sms: int, wait: bool,
) -> tuple[tuple[int], tuple[Any, ...], dict[str, Any]]:
    """:func:`gemm_launch` on meta tensors of an operator's shapes (no GPU, nothing allocated): the launch
    its calls bind, with the same specialisations (a meta tensor counts as 16-byte aligned, as the
    operator's tensors must be)."""
    a, gathered = _meta(m_per_rank, k, dtype=dtype), _meta(world * m_per_rank, k, dtype=dtype)
    return gemm_launch(config, _meta_desc(a, config), _meta_desc(gathered, config), _meta(k, n, dtype=dtype),
                       _meta(world * m_per_rank, n, dtype=dtype), _meta(world, dtype=torch.int32), epoch=epoch,
                       rank=rank, world=world, wait_ms=wait_ms, num_sms=num_sms, wait=wait)  # fmt: skip


def meta_sm_push_launch(
    config: GemmConfig, dtype: torch.dtype, m_per_rank: int, n: int, k: int, *, rank: int, world: int, wait_ms: int,
    num_sms: int,
) -> tuple[tuple[int], tuple[Any, ...], dict[str, Any]]:
    """:func:`sm_push_launch` on meta tensors of an operator's shapes, as :func:`meta_gemm_launch`."""
    a, workspace = _meta(m_per_rank, k, dtype=dtype), _meta(WORKSPACE_BUFFERS, world * m_per_rank, k, dtype=dtype)
    return sm_push_launch(config, _meta_desc(a, config), _meta_desc(workspace.view(-1, k), config),
                          _meta(k, n, dtype=dtype), _meta(world * m_per_rank, n, dtype=dtype), a, workspace,
                          _meta(world, dtype=torch.int32), _meta(state_words(world), dtype=torch.int32), rank=rank,
                          world=world, wait_ms=wait_ms, num_sms=num_sms)  # fmt: skip


def refuse_graph_capture(what: str) -> None:
    """Raise RuntimeError when the current stream is capturing a CUDA graph.

    At world > 1 a call bakes its epoch (a host counter) into the flag writes and the kernel's
    waits; a replayed graph would reuse it, find the flags already up and read buffers that peers
    are still writing: wrong results without an error. So the operator runs eagerly only.
    """
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError(f"{what} cannot be captured in a CUDA graph at world > 1: each call's epoch is a "
                           "host value that a replay would repeat, so its ready checks would pass on stale flags. "
                           "Call the operator outside graph capture (at world 1 it may be captured).")


class AllGatherGEMM:
    """Reusable AllGather(A) @ B operator with its symmetric workspace (see the module docstring).

    ``group``: the torch.distributed group of the ranks (default group; none at all for one
    process). With more than one rank, NVSHMEM is initialised over ``group`` if it is not yet
    (``triton_raw_ext.runtime.init``). ``config``: the GEMM's tiles; ``m_per_rank`` must be a
    multiple of ``config.block_m``. ``push``: how the shard reaches the peers at world > 1,
    ``"copy_engine"`` (eager only), ``"sm"`` (CUDA-graph capturable) or ``"auto"`` (push.py).
    ``handle`` reaches it from the custom op ``triton_raw_ext::allgather_gemm`` (torch_op) until
    :meth:`close`. A call's ``a``, ``b`` and ``out`` must be contiguous tensors of the operator's
    shapes and dtype on its device, at 16-byte aligned addresses (what TMA reads and writes), or it
    raises ValueError naming the tensor.
    """

    def __init__(self, m_per_rank: int, n_per_rank: int, k: int, dtype: torch.dtype = torch.bfloat16,
                 group: Any = None, config: GemmConfig = DEFAULT_CONFIG, push: Push = "auto") -> None:
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype must be torch.bfloat16 or torch.float16, got {dtype}")
        if push not in PUSH_CHOICES:
            raise ValueError(f"push must be one of {', '.join(PUSH_CHOICES)}, got {push!r}")
        self.push = push
        self._host_epoch_known = True  # until a capture: replays advance the device epoch only
        check_shapes(m_per_rank, n_per_rank, k, config)
        self.m_per_rank, self.n, self.k, self.dtype, self.config = m_per_rank, n_per_rank, k, dtype, config
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.rank, self.world = _distributed_world(group)
        self.num_sms = torch.cuda.get_device_properties(self.device).multi_processor_count
        self.epoch = 0
        self._gemms: dict[bool, BoundLaunch] = {}  # _launch's GEMM, by whether it waits
        self._sm_push: BoundLaunch | None = None  # the SM-push GEMM, bound at its first call
        self.wait_ms = wait_timeout_ms()  # the bound of the kernels' waits on peers' flags
        self._own_rows = slice(self.rank * m_per_rank, (self.rank + 1) * m_per_rank)  # of the gathered A
        self._output_like = torch.empty((1, 1), dtype=dtype, device=self.device).expand(self.world * m_per_rank,
                                                                                        n_per_rank)
        if self.world == 1:  # no remote tile: the kernel's flag pointer and peers' rows are never read
            self.ready = torch.zeros(1, dtype=torch.int32, device=self.device)
            self._no_peer_rows = torch.empty((config.block_m, config.block_k), dtype=dtype, device=self.device)
            self._preload()
            self.handle = op_registry.register(self)
            return
        from triton_raw_ext import runtime

        runtime.init(group)
        if (runtime.my_pe(), runtime.n_pes()) != (self.rank, self.world):
            raise RuntimeError(f"NVSHMEM PE {runtime.my_pe()}/{runtime.n_pes()} differs from group rank "
                               f"{self.rank}/{self.world}: initialise NVSHMEM over the same group")
        sharing = runtime.pes_per_gpu()
        if sharing > 1:  # shared-GPU mode: every PE's persistent GEMM must fit at once, with SMs to spare
            self.num_sms = max(1, self.num_sms // sharing - SPARE_SMS_PER_SHARING_PE)
        self._preload()  # before the collective allocations, whose barriers then order it before any call
        self._side = torch.cuda.Stream(self.device)
        self.workspace = runtime.empty((WORKSPACE_BUFFERS, self.world * m_per_rank, k), dtype)
        self.ready = runtime.zeros((self.world,), torch.int32)  # collective; ends with a barrier
        order = push_order(self.rank, self.world)
        # Per buffer, the destinations' views of this rank's slot, and the destinations' flag addresses.
        peers = [runtime.peer(self.workspace, dst) for dst in order]
        self._push_slots: list[list[torch.Tensor]] = [[peer[buf, self._own_rows] for peer in peers]
                                                      for buf in range(WORKSPACE_BUFFERS)]
        self._push_flags: list[int] = [runtime.peer(self.ready, dst)[self.rank].data_ptr() for dst in order]
        self._gathered = list(self.workspace)  # per buffer: every rank's rows
        self._buffers_desc = TensorDescriptor.from_tensor(self.workspace.view(-1, k), [config.block_m, config.block_k])
        self._state = torch.zeros(state_words(self.world), dtype=torch.int32, device=self.device)  # push.py STATE_*
        torch.cuda.synchronize(self.device)  # zeroed flags and the barrier precede work on any stream
        self.handle = op_registry.register(self)

    def close(self) -> None:
        """Unregister the handle (idempotent); the workspace is freed with the last reference."""
        op_registry.unregister(self.handle)

    def _preload(self) -> None:
        """Compile and load the kernels a call launches: at world 1 the GEMM without waits; at world > 1 the
        copy-engine path's GEMM and, unless ``push="copy_engine"``, the SM-push GEMM. A module first loaded
        while a CUDA graph is captured fails the capture (its set-up copies cannot be captured), and one
        loaded while a peer's kernel waits for this rank can hang the job. Built on meta tensors with the
        operator's shapes and integers, which specialise as its real buffers do."""
        from triton_raw_ext import preload

        shapes = (self.config, self.dtype, self.m_per_rank, self.n, self.k)
        common = dict(rank=self.rank, world=self.world, wait_ms=self.wait_ms, num_sms=self.num_sms)
        launches = [(ag_gemm_kernel, meta_gemm_launch(*shapes, epoch=1, wait=self.world > 1, **common))]
        if self.world > 1 and self.push != "copy_engine":
            launches.append((ag_gemm_sm_push_kernel, meta_sm_push_launch(*shapes, **common)))
        for fn, (grid, args, kwargs) in launches:
            preload(fn, *args, grid=grid, **kwargs)

    def _require_host_epoch(self, what: str) -> None:
        """Raise RuntimeError naming ``what`` once the operator was captured in a CUDA graph: its replays
        advance the epoch on the device only, and ``what`` needs it on the host."""
        if not self._host_epoch_known:
            raise RuntimeError(f"AllGatherGEMM.{what} needs the host to know the call epoch, which it does not once "
                               "the operator was captured in a CUDA graph (replays advance it on the device): use "
                               "a separate AllGatherGEMM for eager calls")

    def _check(self, *inputs: tuple[str, torch.Tensor, tuple[int, int]]) -> None:
        """Raise ValueError naming the first of ``(name, tensor, shape)`` that is not a contiguous tensor of
        that shape, of the operator's dtype, on its device, at a 16-byte aligned address (what the GEMM's
        descriptors need: its launches then check nothing again)."""
        for name, t, shape in inputs:
            if (t.shape != shape or t.dtype != self.dtype or t.device != self.device or not t.is_contiguous()
                    or t.data_ptr() % 16):  # fmt: skip
                raise ValueError(f"{name} must be a contiguous {shape} {self.dtype} tensor on {self.device} at a "
                                 f"16-byte aligned address, got {tuple(t.shape)} {t.dtype} on {t.device} "
                                 f"(contiguous={t.is_contiguous()}) at {t.data_ptr():#x}")

    def _a_desc(self, a: torch.Tensor) -> TensorDescriptor:
        return TensorDescriptor.from_tensor(a, [self.config.block_m, self.config.block_k])

    def _produce(self, a: torch.Tensor) -> int:
        """Step 1 of the module docstring for a new epoch; returns the workspace buffer it fills."""
        self.epoch += 1
        buf = self.epoch % WORKSPACE_BUFFERS
        self._side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._side):
            for remote_slot, remote_flag in zip(self._push_slots[buf], self._push_flags, strict=True):
                remote_slot.copy_(a)
                write_flag(self._side, remote_flag, self.epoch)
            # The device epoch follows, so that a later SM-push call (auto, captured) continues the sequence.
            write_flag(self._side, self._state.data_ptr() + 4 * STATE_EPOCH, self.epoch)
        return buf

    def _finish_epoch(self) -> None:
        """Order the side stream after this call's readers and the current stream after its pushes.

        The first makes the next call's pushes follow this call's GEMM even if the caller switches
        streams between calls (the no-barrier argument of the module docstring needs it); the second
        orders later work on the current stream (reusing ``a``, freeing it) after the pushes read it.
        """
        main = torch.cuda.current_stream(self.device)
        self._side.wait_stream(main)
        main.wait_stream(self._side)

    def _launch(self, a: torch.Tensor, gathered: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                wait: bool) -> None:  # fmt: skip
        """The GEMM of this rank's rows ``a`` and every rank's rows ``gathered`` times ``b`` into ``out``, with
        ready checks if ``wait``. Bound at its first call (``BoundLaunch``: Triton's per-launch binding costs
        more host time than the launch); later calls pass only the tensors, checked by :meth:`_check`, in place
        of their descriptors, and the epoch."""
        bound = self._gemms.get(wait)
        if bound is None:
            peer_rows = self._a_desc(gathered if self.world > 1 else self._no_peer_rows)
            grid, args, kwargs = gemm_launch(self.config, self._a_desc(a), peer_rows, b, out, self.ready,
                                             epoch=self.epoch, rank=self.rank, world=self.world, wait_ms=self.wait_ms,
                                             num_sms=self.num_sms, wait=wait)  # fmt: skip
            varying = GEMM_PER_CALL if self.world > 1 else GEMM_PER_CALL_ONE_RANK
            bound = self._gemms[wait] = BoundLaunch(ag_gemm_kernel, grid, args, kwargs, varying)
        if self.world > 1:
            bound.launch_checked(a, gathered, b, out, self.epoch)
        else:
            bound.launch_checked(a, b, out)

    def _launch_sm_push(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        """The SM-push GEMM of one call, bound at its first call like :meth:`_launch`."""
        if self._sm_push is None:
            grid, args, kwargs = sm_push_launch(
                self.config, self._a_desc(a), self._buffers_desc, b, out, a, self.workspace, self.ready, self._state,
                rank=self.rank, world=self.world, wait_ms=self.wait_ms, num_sms=self.num_sms,
            )  # fmt: skip
            self._sm_push = BoundLaunch(ag_gemm_sm_push_kernel, grid, args, kwargs, SM_PUSH_PER_CALL)
        self._sm_push.launch_checked(a, b, out, a)

    def _output(self, out: torch.Tensor | None) -> torch.Tensor:
        if out is None:
            # empty_like of one element expanded to the output's shape gives a contiguous output, with less
            # argument parsing than torch.empty(shape, dtype=, device=)
            return torch.empty_like(self._output_like)
        self._check(("out", out, tuple(self._output_like.shape)))
        return out

    def __call__(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``AllGather(a) @ b`` (collective); ordered on the current stream like a torch op."""
        self._check(("a", a, (self.m_per_rank, self.k)), ("b", b, (self.k, self.n)))
        out = self._output(out)
        if self.world == 1:  # no peer tiles: the kernel without checks
            self._launch(a, a, b, out, wait=False)
            return out
        capturing = torch.cuda.is_current_stream_capturing()
        shard_bytes = self.m_per_rank * self.k * ELEMENT_BYTES
        if choose_push(self.push, self.world, capturing, shard_bytes, self._host_epoch_known) == "sm":
            self._host_epoch_known &= not capturing
            self.epoch += 1  # the host's copy of the device epoch, exact while no graph replays
            self._launch_sm_push(a, b, out)
            return out
        buf = self._produce(a)
        self._launch(a, self._gathered[buf], b, out, wait=True)
        self._finish_epoch()
        return out

    def all_gather(self, a: torch.Tensor) -> torch.Tensor:
        """Only the all-gather (collective): returns AllGather(a), ``a`` itself at world 1.

        At world > 1 the result is a workspace buffer, valid until the next call of this operator:
        the current stream waits until every peer's shard has landed in it (a one-program kernel).
        """
        self._check(("a", a, (self.m_per_rank, self.k)))
        if self.world == 1:
            return a
        refuse_graph_capture("AllGatherGEMM.all_gather")
        self._require_host_epoch("all_gather()")
        buf = self._produce(a)
        gathered = self.workspace[buf]
        gathered[self._own_rows].copy_(a)
        ag_wait_all_kernel[(1,)](self.ready, self.epoch, self.rank, self.world, self.wait_ms)
        self._finish_epoch()
        return gathered

    def gemm(self, gathered: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None,
             checks: bool = False) -> torch.Tensor:
        """Only the consumer GEMM on an already gathered A (a baseline of the benchmark).

        Without ``checks`` it is the GEMM without ready checks. With ``checks`` (world > 1, after at
        least one call) it runs them too, against the last call's epoch: once every rank's last call
        has finished, its flags are all up and this is the cost of the checks alone, without any wait
        or transfer (the benchmark synchronises the ranks before each timed repeat).
        """
        self._check(("gathered", gathered, (self.world * self.m_per_rank, self.k)), ("b", b, (self.k, self.n)))
        if checks and (self.world == 1 or self.epoch == 0):
            raise ValueError("gemm(checks=True) needs world > 1 and a completed call whose flags it re-checks")
        if checks:
            self._require_host_epoch("gemm(checks=True)")
        local = gathered[self._own_rows]
        out = self._output(out)
        self._launch(local, gathered, b, out, wait=checks)
        return out


def _reference_gathered(a: torch.Tensor, shape: tuple[int, int, int], dtype: torch.dtype, seed: int, call: int,
                        world: int) -> torch.Tensor:
    import torch.distributed as dist

    if world > 1 and "nccl" in str(dist.get_backend()):
        gathered = torch.empty(world * a.shape[0], a.shape[1], dtype=a.dtype, device=a.device)
        dist.all_gather_into_tensor(gathered, a)
        return gathered
    m, n, k = shape
    return reference.rebuild_gathered(m, n, k, dtype, seed, call, world, a.device)


# Inputs of the check's calls (X, Y, Z, X, Y, Z): calls 4-6 must reproduce calls 1-3 bit for bit. The
# period 3 is coprime with the two workspace buffers, so a rank that overwrote a peer's buffer one call
# too early (two calls ahead) would write different data into it, which shows.
CHECK_CALL_INPUTS = (0, 1, 2, 0, 1, 2)
CHECK_PERIOD = 3
# Before every other call each rank's stream sleeps this long, odd ranks on the other calls than even
# ones, so that ranks drift up to a call apart (what the double-buffered workspace must allow).
SKEW_US = 300


def check_shape(shape: tuple[int, int, int], dtype: torch.dtype, seed: int, config: GemmConfig,
                push: Push = "auto", in_graph: bool = False) -> dict:
    """Run one operator on inputs X, Y, Z, X, Y, Z back to back, ranks skewed, and compare with the
    reference.

    Outputs are poisoned with NaN before the calls; nothing synchronises between the calls, so a
    rank that runs ahead and overwrites a peer's buffer still in use shows as an error, and calls
    4-6 must equal calls 1-3 bit for bit (a difference between identical runs points at a race).
    ``all_gather()`` is checked after the last call: it must return the gathered A exactly.
    ``in_graph``: the six calls and their skew are captured as one CUDA graph (after one eager call that
    loads the kernels), replayed twice, and the second replay is checked; ``all_gather()`` (eager only,
    and it needs the host epoch) is not.
    """
    m, n, k = shape
    op = AllGatherGEMM(m, n, k, dtype, config=config, push=push)
    rank, world = op.rank, op.world
    tol = reference.TOLERANCE[dtype]
    inputs = {call: reference.make_inputs(m, n, k, dtype, seed, call, rank, op.device)
              for call in sorted(set(CHECK_CALL_INPUTS))}
    outputs = [torch.full((world * m, n), float("nan"), dtype=dtype, device=op.device) for _ in CHECK_CALL_INPUTS]
    torch.cuda.synchronize()

    def six_calls() -> None:
        for i, (call, out) in enumerate(zip(CHECK_CALL_INPUTS, outputs, strict=True)):
            if world > 1 and (i + rank) % 2:
                torch.cuda._sleep(SKEW_US * SLEEP_CYCLES_PER_US)
            op(*inputs[call], out=out)

    if in_graph:
        op(*inputs[0], out=outputs[0])  # loads the kernels outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            six_calls()
        graph.replay()
        for out in outputs:
            out.fill_(float("nan"))
        graph.replay()
    else:
        six_calls()
    references = {call: _reference_gathered(inputs[call][0], shape, dtype, seed, call, world)
                  for call in sorted(set(CHECK_CALL_INPUTS))}
    errors = [reference.relative_error(out, reference.reference(references[call], inputs[call][1]))
              for call, out in zip(CHECK_CALL_INPUTS, outputs, strict=True)]
    gathered_equal = None if in_graph else bool(torch.equal(op.all_gather(inputs[0][0]), references[0]))
    torch.cuda.synchronize()
    repeat_equal = all(bool(torch.equal(outputs[i], outputs[i + CHECK_PERIOD]))
                       for i in range(len(outputs) - CHECK_PERIOD))
    ok = all(e <= tol for e in errors) and repeat_equal and gathered_equal is not False  # NaN compares False
    return {"shape": list(shape), "dtype": str(dtype).removeprefix("torch."), "world": world, "rank": rank,
            "rel_errors": errors, "tolerance": tol, "repeat_bitwise_equal": repeat_equal,
            "all_gather_exact": gathered_equal, "push": push, "ok": ok, "config": config.describe()}


GRAPH_REPLAYS = 20


def check_graph(shape: tuple[int, int, int], dtype: torch.dtype, seed: int, config: GemmConfig, push: Push) -> dict:
    """Capture one call of an operator in a CUDA graph and replay it :data:`GRAPH_REPLAYS` times.

    Before each replay the static inputs take call ``i % 3``'s (X, Y, Z, ...) and the stream sleeps a
    random 0-2x :data:`SKEW_US` drawn per rank and replay, so ranks drift apart; nothing synchronises
    between replays. Every replay's output must match its reference, and replays ``i`` and ``i + 3``
    must agree bit for bit: N replays must behave as N eager calls (the device epoch advances).
    """
    import random

    m, n, k = shape
    op = AllGatherGEMM(m, n, k, dtype, config=config, push=push)
    rank, world = op.rank, op.world
    inputs = {call: reference.make_inputs(m, n, k, dtype, seed, call, rank, op.device) for call in range(CHECK_PERIOD)}
    a, b = (t.clone() for t in inputs[0])
    out = torch.empty((world * m, n), dtype=dtype, device=op.device)
    op(a, b, out=out)  # compiles and loads the kernels outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op(a, b, out=out)
    rng = random.Random(seed * 1000 + rank)
    outputs = []
    torch.cuda.synchronize()
    for i in range(GRAPH_REPLAYS):
        a.copy_(inputs[i % CHECK_PERIOD][0])
        b.copy_(inputs[i % CHECK_PERIOD][1])
        if world > 1:
            torch.cuda._sleep(int(rng.uniform(0, 2 * SKEW_US) * SLEEP_CYCLES_PER_US))
        out.fill_(float("nan"))
        graph.replay()
        outputs.append(out.clone())
    references = {call: reference.reference(_reference_gathered(inputs[call][0], shape, dtype, seed, call, world),
                                            inputs[call][1]) for call in range(CHECK_PERIOD)}  # fmt: skip
    errors = [reference.relative_error(o, references[i % CHECK_PERIOD]) for i, o in enumerate(outputs)]
    torch.cuda.synchronize()
    repeat_equal = all(bool(torch.equal(outputs[i], outputs[i + CHECK_PERIOD]))
                       for i in range(len(outputs) - CHECK_PERIOD))
    tol = reference.TOLERANCE[dtype]
    ok = all(e <= tol for e in errors) and repeat_equal
    return {"shape": list(shape), "dtype": str(dtype).removeprefix("torch."), "world": world, "rank": rank,
            "graph_replays": GRAPH_REPLAYS, "push": push, "rel_errors": errors, "tolerance": tol,
            "repeat_bitwise_equal": repeat_equal, "ok": ok, "config": config.describe()}


def print_table(rows: list[dict]) -> None:
    """One line per (shape, dtype, rank): worst relative error of the calls and the verdict."""
    print(f"{'shape':>18} {'dtype':>9} {'world':>5} {'rank':>4} {'max rel err':>11} {'tol':>7} {'repeat':>6} "
          f"{'gather':>6}  result")
    for r in rows:
        errs = r.get("rel_errors") or [float("nan")]
        err = float("nan") if any(e != e for e in errs) else max(errs)
        verdict = "PASS" if r["ok"] else "FAIL " + r.get("error", "")
        print(f"{'x'.join(map(str, r['shape'])):>18} {r['dtype']:>9} {r.get('world', '?'):>5} {r.get('rank', '?'):>4} "
              f"{err:>11.3e} {r.get('tolerance', 0):>7.0e} {str(r.get('repeat_bitwise_equal', '-')):>6} "
              f"{str(r.get('all_gather_exact', '-')):>6}  {verdict}")


def _parse_shape(text: str) -> tuple[int, int, int]:
    parts = tuple(int(x) for x in text.lower().split("x"))
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"shape {text!r} must be MxNxK (m_per_rank x n_per_rank x k)")
    return parts  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=_parse_shape, nargs="+", default=list(TUTORIAL_SHAPES),
                        help="m_per_rank x n_per_rank x k, e.g. 4096x8192x8192")
    parser.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=sorted(DTYPES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the rows of every rank here (rank 0 writes)")
    parser.add_argument("--push", choices=PUSH_CHOICES, default="auto", help="the operator's push path (push.py)")
    graph = parser.add_mutually_exclusive_group()
    graph.add_argument("--graph", action="store_true",
                       help=f"capture one call in a CUDA graph and check {GRAPH_REPLAYS} skewed replays")
    graph.add_argument("--graph-sequence", action="store_true",
                       help="capture the six skewed calls of the check in one CUDA graph and check a replay")
    args = parser.parse_args(argv)
    import torch.distributed as dist

    rows = []
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from triton_raw_ext import runtime

        runtime.init()
    else:
        torch.cuda.set_device(0)
    for dtype_name in args.dtypes:
        for shape in args.shapes:
            t0 = time.perf_counter()
            label = f"rank {os.environ.get('RANK', '0')}: {'x'.join(map(str, shape))} {dtype_name}"
            print(f"{label}: started", file=sys.stderr, flush=True)  # a timeout or trap shows which shape
            try:
                if args.graph:
                    row = check_graph(shape, DTYPES[dtype_name], args.seed, DEFAULT_CONFIG, args.push)
                else:
                    row = check_shape(shape, DTYPES[dtype_name], args.seed, DEFAULT_CONFIG, args.push,
                                      in_graph=args.graph_sequence)
            except (ValueError, RuntimeError) as e:
                row = {"shape": list(shape), "dtype": dtype_name, "ok": False, "error": str(e)[:400]}
            row["seconds"] = round(time.perf_counter() - t0, 2)
            print(f"{label}: {'ok' if row['ok'] else 'FAIL'} ({row['seconds']} s)", file=sys.stderr, flush=True)
            rows.append(row)
    world = dist.get_world_size() if dist.is_initialized() else 1
    all_rows = every_rank(rows) if world > 1 else [rows]
    rank = dist.get_rank() if dist.is_initialized() else 0
    if rank == 0:
        flat = [r for per_rank in all_rows for r in per_rank]
        print_table(flat)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(flat, indent=1))
    ok = all(r["ok"] for per_rank in all_rows for r in per_rank)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
