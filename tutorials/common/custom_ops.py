"""The tutorials' ops in torch's ``triton_raw_ext`` library namespace.

:func:`define_cuda_op` defines one op from its schema, with a CUDA implementation and a fake one (shapes
and dtypes without a GPU, for ``torch.compile``), through ``torch.library.Library``, not
``@torch.library.custom_op``: custom_op runs every call through Python layers for autograd and for
checking aliases, which cost more host time per call than an op's own launch path
(``bench/op_dispatch_cost.py``). The ops are for inference and have no derivative; torch warns when
one is called with inputs that require grad. The schema's alias annotations (``Tensor(a!)``) say what
an op writes in place, so that ``torch.compile`` functionalizes it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

NAMESPACE = "triton_raw_ext"
_LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")  # registrations live as long as this object


def define_cuda_op(schema: str, cuda_impl: Callable[..., object], fake_impl: Callable[..., object]) -> object:
    """Define ``triton_raw_ext::<schema>`` with ``cuda_impl`` for CUDA tensors and ``fake_impl`` for
    fake and meta tensors; returns the op (``torch.ops.triton_raw_ext.<name>``)."""
    name = schema.split("(", 1)[0]
    _LIBRARY.define(schema)
    _LIBRARY.impl(name, cuda_impl, "CUDA")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake_impl, lib=_LIBRARY)
    return getattr(getattr(torch.ops, NAMESPACE), name)
