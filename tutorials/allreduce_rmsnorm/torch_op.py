"""AllReduceRMSNorm as the torch custom op ``triton_raw_ext::allreduce_rmsnorm``, and the nn.Module that calls it.

``torch.ops.triton_raw_ext.allreduce_rmsnorm(x, residual, weight, eps, handle)`` runs the operator
registered under ``handle`` (``AllReduceRMSNorm(...).handle``): it returns ``norm_out`` and writes
``residual_out`` into ``residual`` in place (a transformer block's residual stream; the kernel reads
each residual element before the same program stores its sum there, so the two may alias). Its fake
implementation gives ``norm_out``'s shape and dtype without a GPU, so ``torch.compile(fullgraph=True)``
traces a module that calls it into one graph that runs the same kernel as eager.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..common import op_registry
from ..common.custom_ops import define_cuda_op

if TYPE_CHECKING:
    from .allreduce_rmsnorm import AllReduceRMSNorm


def _allreduce_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, handle: int
) -> torch.Tensor:
    """RMSNorm(AllReduce(x) + residual) * weight; ``residual`` becomes AllReduce(x) + residual."""
    norm_out = torch.empty_like(x)
    op_registry.lookup(handle)(x, residual, weight, eps, out=(norm_out, residual))
    return norm_out


def _allreduce_rmsnorm_fake(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, handle: int
) -> torch.Tensor:
    return torch.empty_like(x)


allreduce_rmsnorm = define_cuda_op(
    "allreduce_rmsnorm(Tensor x, Tensor(a!) residual, Tensor weight, float eps, int handle) -> Tensor",
    _allreduce_rmsnorm, _allreduce_rmsnorm_fake,
)  # fmt: skip


class AllReduceRMSNormModule(torch.nn.Module):
    """``forward(x, residual) -> norm_out``, with ``residual`` updated in place, through the custom op.

    ``op``: an ``AllReduceRMSNorm`` that stays open while the module
    is used; ``weight`` [hidden]: the RMSNorm weight, kept as a buffer (inference: no gradient).
    """

    def __init__(self, op: AllReduceRMSNorm, weight: torch.Tensor, eps: float = 1e-6) -> None:
        super().__init__()
        self.handle: int = op.handle
        self.eps = eps
        self.register_buffer("weight", weight)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return torch.ops.triton_raw_ext.allreduce_rmsnorm(x, residual, self.weight, self.eps, self.handle)
