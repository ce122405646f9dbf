"""MegaMoE as the torch custom op ``triton_raw_ext::megamoe``, and the nn.Module that calls it.

``torch.ops.triton_raw_ext.megamoe(x, logits, handle)`` returns the layer's output y (x's shape,
bf16) from the ``MegaMoE`` registered under ``handle`` (``MegaMoE(...).handle``); the expert weights
and workspaces are the layer's own, so no argument is written in place. Collective like the layer:
every rank calls it, in the same order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..common import op_registry
from ..common.custom_ops import define_cuda_op

if TYPE_CHECKING:
    from .megamoe import MegaMoE


def _megamoe(x: torch.Tensor, logits: torch.Tensor, handle: int) -> torch.Tensor:
    """y [T, H] bf16 for this rank's tokens x [T, H] and router logits [T, E]."""
    return op_registry.lookup(handle)(x, logits)


def _megamoe_fake(x: torch.Tensor, logits: torch.Tensor, handle: int) -> torch.Tensor:
    return torch.empty_like(x)


megamoe = define_cuda_op("megamoe(Tensor x, Tensor logits, int handle) -> Tensor", _megamoe, _megamoe_fake)


class MegaMoEModule(torch.nn.Module):
    """``forward(x, logits) -> y`` through the custom op; ``layer``: an open ``MegaMoE`` (it holds the expert
    weights)."""

    def __init__(self, layer: MegaMoE) -> None:
        super().__init__()
        self.handle: int = layer.handle

    def forward(self, x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        return torch.ops.triton_raw_ext.megamoe(x, logits, self.handle)
