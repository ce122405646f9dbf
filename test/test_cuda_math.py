"""CUDA math in raw functions: libdevice calls (``min``, ``expf``, ``__popc`` ...) resolve.

clang lowers CUDA's math functions and integer intrinsics to libdevice calls (``__nv_expf``,
``__nv_umin`` ...). The raw library is linked before the libdevice Triton links for the kernel, so
exactly the functions still referenced are pulled in, under Triton's own ftz setting.
"""

from __future__ import annotations

import re

import pytest
from conftest import aot, requires_gpu
from kernels import math_kernels as mk


@pytest.mark.parametrize("kernel, signature", [(mk.float_math_kernel, mk.FLOAT_SIGNATURE),
                                               (mk.int_math_kernel, mk.INT_SIGNATURE)])
def test_libdevice_calls_resolve_in_aot(kernel, signature):
    c = aot(kernel, signature, {"BLOCK": 256})
    assert c.asm["cubin"][:4] == b"\x7fELF"
    assert not re.search(r"\.extern \.func[^\n]*__nv_", c.asm["ptx"]), "a libdevice call stayed unresolved"
    assert not re.search(r"call[^@\n]*@rawext_", c.asm["llir"]), "raw call left in llir"
    assert not re.search(r"^declare[^\n]*@__nv_", c.asm["llir"], re.MULTILINE), "libdevice not linked"


def test_fast_math_follows_triton_ftz():
    """Triton links libdevice with nvvm-reflect-ftz = 1 (its default): __expf becomes ex2.approx.ftz."""
    c = aot(mk.float_math_kernel, mk.FLOAT_SIGNATURE, {"BLOCK": 256})
    assert "ex2.approx.ftz.f32" in c.asm["ptx"]


@requires_gpu
def test_libdevice_results_match_triton_math():
    """Bit for bit: each raw function against the same operation in Triton (its libdevice where
    Triton has one: CUDA's ``sqrtf`` is libdevice's ``__nv_sqrtf``, ``__fsqrt_rn`` is ``tl.sqrt_rn``)."""
    import torch

    n, block = 100_003, 256
    grid = (triton_cdiv(n, block),)
    x = torch.randn(n, device="cuda") * 4
    y = torch.randn(n, device="cuda").abs() + 0.25
    raw = torch.full((len(mk.FLOAT_NAMES), n), float("nan"), device="cuda")
    ref = torch.full_like(raw, float("nan"))
    mk.float_math_kernel[grid](x, y, raw, ref, n, BLOCK=block)
    i = torch.randint(-(2**31), 2**31 - 1, (n,), device="cuda", dtype=torch.int32)
    i[:4] = torch.tensor([0, -1, 2**31 - 1, -(2**31)], dtype=torch.int32)
    raw_i = torch.full((len(mk.INT_NAMES), n), -7, device="cuda", dtype=torch.int32)
    ref_i = torch.full_like(raw_i, -9)
    mk.int_math_kernel[grid](i, raw_i, ref_i, n, BLOCK=block)
    differ = [f"{name}: {int((a != b).sum())} of {n} differ, e.g. {a[a != b][:3].tolist()} vs {b[a != b][:3].tolist()}"
              for names, raws, refs in ((mk.FLOAT_NAMES, raw, ref), (mk.INT_NAMES, raw_i, ref_i))
              for name, a, b in zip(names, raws, refs, strict=True) if not torch.equal(a, b)]
    assert not differ, "raw CUDA math differs from Triton's:\n" + "\n".join(differ)


def triton_cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b
