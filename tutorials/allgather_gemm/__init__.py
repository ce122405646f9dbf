"""Tutorial 2: AllGather-GEMM, the all-gather hidden behind a persistent GEMM (README.md).

``from tutorials.allgather_gemm import AllGatherGEMM``. The op is imported when the name is first
used, not with the package, so that importing one module of the tutorial (``schedule``, pure Python)
defines no kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .allgather_gemm import AllGatherGEMM

__all__ = ["AllGatherGEMM"]


def __getattr__(name: str) -> Any:
    if name == "AllGatherGEMM":
        from .allgather_gemm import AllGatherGEMM

        return AllGatherGEMM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
