"""Tutorial 3's Gluon kernel divides by a row's fp8 scale with one reciprocal per row and an FMA
correction per value (``gluon_persistent._div_rn_by``): the quotients must be ``gl.div_rn``'s bit for bit,
so that the kernel quantizes x and h to the bits the reference and the Triton kernel do (on the GPU)."""

from __future__ import annotations

import pytest
import torch
from conftest import requires_gpu
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tutorials.megamoe.gluon_persistent import _div_rn_by

ROWS, COLS = 32, 128


@gluon.jit
def _divide(v_ptr, s_ptr, fast_ptr, exact_ptr, ROWS: gl.constexpr, COLS: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    r = gl.program_id(0) * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
    c = gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
    offs = gl.expand_dims(r, 1) * COLS + gl.expand_dims(c, 0)
    v = gl.load(v_ptr + offs)
    s = gl.expand_dims(gl.load(s_ptr + r), 1)
    gl.store(fast_ptr + offs, _div_rn_by(v, s))
    gl.store(exact_ptr + offs, gl.div_rn(v, s))


def _quotients(v: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    fast, exact = torch.empty_like(v), torch.empty_like(v)
    _divide[(v.shape[0] // ROWS,)](v, s, fast, exact, ROWS, COLS, num_warps=4)
    return fast, exact


def _e4m3_bits(q: torch.Tensor) -> torch.Tensor:
    """The bytes the kernels store for quotients ``q``: clamped to e4m3's range, converted."""
    return q.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)


def _rows(rows: int, gen: torch.Generator) -> torch.Tensor:
    """Rows of normal values at magnitudes 2**-100 .. 2**100, with zeros of both signs and subnormals."""
    magnitude = torch.exp2(torch.randint(-100, 101, (rows, 1), generator=gen).float())
    v = torch.randn(rows, COLS, generator=gen) * magnitude
    special = torch.rand(rows, COLS, generator=gen)
    v = torch.where(special < 0.01, torch.zeros_like(v), v)
    v = torch.where((special >= 0.01) & (special < 0.02), -torch.zeros_like(v), v)
    return torch.where((special >= 0.02) & (special < 0.03), torch.randn_like(v) * 2.0**-140, v)


def _bits_differ(fast: torch.Tensor, exact: torch.Tensor, v: torch.Tensor, s: torch.Tensor) -> str:
    """The first few values whose quotients differ in their bits, for the failure message."""
    where = (fast.view(torch.int32) != exact.view(torch.int32)).nonzero()[:4].tolist()
    return "; ".join(f"{float(v[r, c])!r} / {float(s[r])!r}: {float(fast[r, c])!r} vs {float(exact[r, c])!r}"
                     for r, c in where)  # fmt: skip


@requires_gpu
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_division_by_a_rows_fp8_scale_is_div_rn_bit_for_bit(seed):
    """Rows scaled as the kernels scale them: every quotient of a value from 2**-100 up is div_rn's, and
    every value quantizes to div_rn's e4m3 bits."""
    gen = torch.Generator().manual_seed(seed)
    v = _rows(1 << 15, gen)
    amax = v.abs().amax(dim=1).clamp_min(1e-12)
    scale = amax / torch.full_like(amax, 448.0)  # the kernels' (and quant.py's) scale of a row
    fast, exact = (q.cpu() for q in _quotients(v.cuda(), scale.cuda()))
    inside = v.abs() >= 2.0**-100
    assert inside.float().mean() > 0.9
    fast_in, exact_in = torch.where(inside, fast, 0.0), torch.where(inside, exact, 0.0)
    assert torch.equal(fast_in.view(torch.int32), exact_in.view(torch.int32)), _bits_differ(fast_in, exact_in, v, scale)
    assert torch.equal(_e4m3_bits(fast), _e4m3_bits(exact))


@requires_gpu
@pytest.mark.parametrize("seed", [0, 1])
def test_division_by_any_normal_scale_is_div_rn_bit_for_bit_where_the_residual_is_normal(seed):
    """Scales unrelated to the rows (2**-120 .. 2**120): every normal quotient of a value from 2**-100 up is
    div_rn's; everywhere, its sign and its e4m3 bits are."""
    gen = torch.Generator().manual_seed(seed)
    v = _rows(1 << 15, gen)
    exponent = torch.empty(v.shape[0]).uniform_(-120, 120, generator=gen).floor()
    scale = torch.exp2(exponent) * (1 + torch.rand(v.shape[0], generator=gen))
    v = torch.where(v.abs() / scale[:, None] < 2.0**120, v, torch.zeros_like(v))  # no overflow
    fast, exact = (q.cpu() for q in _quotients(v.cuda(), scale.cuda()))
    inside = (v.abs() >= 2.0**-100) & (exact.abs() >= 2.0**-126)
    assert inside.float().mean() > 0.5
    fast_in, exact_in = torch.where(inside, fast, 0.0), torch.where(inside, exact, 0.0)
    assert torch.equal(fast_in.view(torch.int32), exact_in.view(torch.int32)), _bits_differ(fast_in, exact_in, v, scale)
    assert torch.equal(torch.signbit(fast), torch.signbit(exact))
    assert torch.equal(_e4m3_bits(fast), _e4m3_bits(exact))
