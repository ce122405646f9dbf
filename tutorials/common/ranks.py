"""A value from every rank of a torch.distributed group, on every rank."""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def every_rank(value: T, group: Any = None) -> list[T]:
    """``value`` of every rank of ``group`` (default: every rank), in rank order, on every rank.

    Collective: every rank of the group calls it. Without an initialised torch.distributed (one
    process) it is ``[value]``. ``value`` must be picklable (``torch.distributed.all_gather_object``).
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return [value]
    values: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(values, value, group=group)
    return values
