"""AllGatherGEMM as the torch custom op ``triton_raw_ext::allgather_gemm``, and the nn.Module that calls it.

``torch.ops.triton_raw_ext.allgather_gemm(a, b, world, handle)`` returns ``AllGather(a) @ b``
[world * a.shape[0], b.shape[1]] from the operator registered under ``handle``
(``AllGatherGEMM(...).handle``). ``world`` is the operator's and is an argument so that the fake
implementation knows the output's rows from the arguments alone. Nothing is written in place (the
workspace is the operator's own). It captures into a CUDA graph at every world size with
``push="auto"`` or ``"sm"`` (a captured call takes the SM-driven push, whose epoch is on the device);
``push="copy_engine"`` refuses capture at world > 1 with a RuntimeError.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..common import op_registry
from ..common.custom_ops import define_cuda_op

if TYPE_CHECKING:
    from .allgather_gemm import AllGatherGEMM


def _allgather_gemm(a: torch.Tensor, b: torch.Tensor, world: int, handle: int) -> torch.Tensor:
    """AllGather(a) @ b over the operator's ranks."""
    op = op_registry.lookup(handle)
    if op.world != world:
        raise ValueError(f"allgather_gemm: world={world} but the operator under handle {handle} has {op.world} ranks")
    return op(a, b)


def _allgather_gemm_fake(a: torch.Tensor, b: torch.Tensor, world: int, handle: int) -> torch.Tensor:
    return a.new_empty((world * a.shape[0], b.shape[1]))


allgather_gemm = define_cuda_op(
    "allgather_gemm(Tensor a, Tensor b, int world, int handle) -> Tensor", _allgather_gemm, _allgather_gemm_fake
)


class AllGatherGEMMModule(torch.nn.Module):
    """``forward(a) -> AllGather(a) @ weight`` through the custom op.

    ``op``: an ``AllGatherGEMM`` that stays open while
    the module is used; ``weight`` [k, n_per_rank]: this rank's B, kept as a buffer (inference).
    """

    def __init__(self, op: AllGatherGEMM, weight: torch.Tensor) -> None:
        super().__init__()
        self.handle: int = op.handle
        self.world: int = op.world
        self.register_buffer("weight", weight)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return torch.ops.triton_raw_ext.allgather_gemm(a, self.weight, self.world, self.handle)
