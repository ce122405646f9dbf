"""Operator instances under integer handles, so that a ``torch.library`` custom op can reach one.

Contract: :func:`register` gives a live operator object (one owning symmetric workspaces) a handle,
a positive ``int`` unique in this process and never reused; :func:`lookup` returns the object of a
handle or raises ``RuntimeError`` naming the handle; :func:`unregister` drops it (idempotent). A
custom op's schema can carry an int but not a Python object, and an int is a constant that
``torch.compile`` bakes into its graph, so the compiled graph reaches the same instance as eager.
The registry holds a strong reference: an operator lives until its ``close()`` unregisters it.
"""

from __future__ import annotations

import itertools
from typing import Any

_instances: dict[int, Any] = {}
_handles = itertools.count(1)


def register(op: Any) -> int:
    """A new handle for ``op``."""
    handle = next(_handles)
    _instances[handle] = op
    return handle


def lookup(handle: int) -> Any:
    """The operator registered under ``handle``."""
    try:
        return _instances[handle]
    except KeyError:
        raise RuntimeError(
            f"no operator is registered under handle {handle}: it was closed, or the handle comes from "
            "another process; construct the operator in this process and pass its .handle"
        ) from None


def unregister(handle: int) -> None:
    """Forget ``handle`` (nothing happens when it is not registered)."""
    _instances.pop(handle, None)
