"""Tutorial 3: MegaMoE, an expert-parallel MoE layer (README.md).

``from tutorials.megamoe import MegaMoE``. The op is imported when the name is first used, not with
the package, so that importing one module of the tutorial (``cpu_sim``) defines no kernel before
``cpu_sim`` sets TRITON_INTERPRET.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .megamoe import MegaMoE

__all__ = ["MegaMoE"]


def __getattr__(name: str) -> Any:
    if name == "MegaMoE":
        from .megamoe import MegaMoE

        return MegaMoE
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
