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

if TYPE_CHECKING:
    from .megamoe import MegaMoE


@torch.library.custom_op("triton_raw_ext::megamoe", mutates_args=(), device_types="cuda")
def megamoe(x: torch.Tensor, logits: torch.Tensor, handle: int) -> torch.Tensor:
    """y [T, H] bf16 for this rank's tokens x [T, H] and router logits [T, E]."""
    return op_registry.lookup(handle)(x, logits)


@megamoe.register_fake
def _megamoe_fake(x: torch.Tensor, logits: torch.Tensor, handle: int) -> torch.Tensor:
    return torch.empty_like(x)


class MegaMoEModule(torch.nn.Module):
    """``forward(x, logits) -> y`` through the custom op; ``layer``: an open ``MegaMoE`` (it holds the expert
    weights)."""

    def __init__(self, layer: MegaMoE) -> None:
        super().__init__()
        self.handle: int = layer.handle

    def forward(self, x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        return torch.ops.triton_raw_ext.megamoe(x, logits, self.handle)
