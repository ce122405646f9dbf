"""Who this process is in the NVSHMEM job: launch mode, CUDA device, rank, and the unique-id exchange.

Launch modes:

* one PE per GPU (``torchrun --nproc_per_node=N``): the device is ``$LOCAL_RANK``;
* shared GPU (``TRITON_RAW_SHARED_GPU=1`` or ``init(shared_gpu=True)``): every PE uses device 0 and
  torch.distributed must be gloo (NCCL refuses two ranks on one device);
* a single process with no torch.distributed and ``WORLD_SIZE`` unset or 1: one PE, no exchange.

torch.distributed is imported only inside these functions, never at module import.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any

from triton_raw_ext.errors import RawRuntimeError

SHARED_GPU_ENV = "TRITON_RAW_SHARED_GPU"
UNIQUE_ID_BYTES = 128
_FALSE = ("", "0", "false", "no", "off")


def shared_gpu_requested(flag: bool | None) -> bool:
    """``flag`` when given, else whether ``$TRITON_RAW_SHARED_GPU`` is set to a true value."""
    if flag is not None:
        return flag
    return os.environ.get(SHARED_GPU_ENV, "").strip().lower() not in _FALSE


def select_device(shared_gpu: bool, device_count: int) -> int:
    """The CUDA device of this PE: 0 in shared-GPU mode, else ``$LOCAL_RANK`` (default 0)."""
    if device_count < 1:
        raise RawRuntimeError(
            "NVSHMEM needs a CUDA GPU but torch sees none; check the driver and CUDA_VISIBLE_DEVICES"
        )
    if shared_gpu:
        return 0
    raw = os.environ.get("LOCAL_RANK", "0")
    try:
        local_rank = int(raw)
    except ValueError:
        raise RawRuntimeError(
            f"LOCAL_RANK={raw!r} is not an integer; launch with torchrun or unset it"
        ) from None
    if not 0 <= local_rank < device_count:
        raise RawRuntimeError(
            f"LOCAL_RANK={local_rank} but only {device_count} CUDA device(s) are visible: run at most one "
            "PE per "
            f"GPU, or set {SHARED_GPU_ENV}=1 (init(shared_gpu=True)) to put several PEs on GPU 0 for testing"
        )
    return local_rank


@dataclass(frozen=True)
class World:
    """This PE's place in the job. ``group`` is None for the default process group."""

    rank: int
    size: int
    group: Any = None
    distributed: bool = False


def _env_world_size() -> int:
    raw = os.environ.get("WORLD_SIZE", "1")
    try:
        return int(raw)
    except ValueError:
        raise RawRuntimeError(
            f"WORLD_SIZE={raw!r} is not an integer; launch with torchrun or unset it"
        ) from None


def join_world(group: Any, shared_gpu: bool) -> World:
    """Find (or create from torchrun's environment) the torch.distributed group the PEs are.

    Creates the default process group only when none exists and ``WORLD_SIZE`` > 1, with backend
    ``gloo`` in shared-GPU mode and ``cpu:gloo,cuda:nccl`` otherwise. Returns a one-PE world when
    there is no torch.distributed job at all.
    """
    import torch.distributed as dist

    if group is None and not dist.is_initialized():
        if _env_world_size() <= 1:
            return World(rank=0, size=1)
        missing = [v for v in ("MASTER_ADDR", "MASTER_PORT", "RANK") if v not in os.environ]
        if missing:
            raise RawRuntimeError(
                f"WORLD_SIZE={os.environ['WORLD_SIZE']} but {', '.join(missing)} not set: launch with "
                "torchrun, "
                f"or call torch.distributed.init_process_group() before init()"
            )
        dist.init_process_group(backend="gloo" if shared_gpu else "cpu:gloo,cuda:nccl")
    backend = str(dist.get_backend(group))
    if shared_gpu and "gloo" not in backend:
        raise RawRuntimeError(
            "shared-GPU mode needs a gloo process group (NCCL refuses two ranks on one GPU), got "
            f"{backend!r}: "
            f"call init_process_group('gloo') or pass group=torch.distributed.new_group(backend='gloo')"
        )
    rank = dist.get_rank(group)
    if rank < 0:
        raise RawRuntimeError(
            "this process is not a member of the group passed to init(); pass a group it is in"
        )
    return World(rank=rank, size=dist.get_world_size(group), group=group, distributed=True)


@dataclass(frozen=True)
class BootstrapInfo:
    """What the root PE hands every PE: NVSHMEM's unique id and a token naming this init."""

    unique_id: bytes
    token: str

    @staticmethod
    def fresh(unique_id: bytes) -> BootstrapInfo:
        return BootstrapInfo(unique_id=unique_id, token=uuid.uuid4().hex)


def validate(payload: object) -> BootstrapInfo:
    """Check a received payload; raise naming what arrived instead."""
    ok = (
        isinstance(payload, tuple)
        and len(payload) == 2
        and isinstance(payload[0], bytes)
        and len(payload[0]) == UNIQUE_ID_BYTES
        and isinstance(payload[1], str)
    )
    if not ok:
        shown = repr(payload)[:80]
        raise RawRuntimeError(
            f"received a malformed NVSHMEM bootstrap payload {shown}: expected ({UNIQUE_ID_BYTES} id bytes, "
            "token); "
            f"every PE must run the same triton_raw_ext version and call init() with the same group"
        )
    return BootstrapInfo(unique_id=payload[0], token=payload[1])


def share_bootstrap(mine: BootstrapInfo | None, world: World) -> BootstrapInfo:
    """Broadcast the root's :class:`BootstrapInfo` (``mine`` on group rank 0, None elsewhere).

    Collective over ``world.group``; any backend that supports ``broadcast_object_list`` works
    (gloo is enough). Returns the root's info on every rank.
    """
    import torch.distributed as dist

    if (world.rank == 0) != (mine is not None):
        raise RawRuntimeError(
            "share_bootstrap: exactly group rank 0 provides the bootstrap info (internal error)"
        )
    if not world.distributed:
        assert mine is not None
        return mine
    src = 0 if world.group is None else dist.get_global_rank(world.group, 0)
    box: list[object] = [(mine.unique_id, mine.token) if mine is not None else None]
    dist.broadcast_object_list(box, src=src, group=world.group)
    return validate(box[0])


def default_store() -> Any:
    """torch.distributed's default key-value store, or None when unavailable."""
    import torch.distributed as dist

    try:
        return dist.distributed_c10d._get_default_store()
    except (RuntimeError, AttributeError, ValueError):
        return None
