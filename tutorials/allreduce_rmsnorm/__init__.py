"""Tutorial 1: AllReduce(SUM) + residual add + RMSNorm in one kernel (README.md).

``from tutorials.allreduce_rmsnorm import AllReduceRMSNorm``. The op is imported when the name is
first used, not with the package, so that importing one module of the tutorial (``plan``, pure
Python) defines no kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .allreduce_rmsnorm import AllReduceRMSNorm

__all__ = ["AllReduceRMSNorm"]


def __getattr__(name: str) -> Any:
    if name == "AllReduceRMSNorm":
        from .allreduce_rmsnorm import AllReduceRMSNorm

        return AllReduceRMSNorm
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
