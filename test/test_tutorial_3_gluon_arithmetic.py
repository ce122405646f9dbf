"""Tutorial 3's Gluon kernel computes its elementwise math in fewer instructions than the Triton kernel's
formulas and must give their bits (on the GPU):

* it divides by a row's fp8 scale with one reciprocal per row and an FMA correction per value
  (``gluon_persistent._div_rn_by``): the quotients are ``gl.div_rn``'s, so x and h quantize to the bits the
  reference and the Triton kernel give;
* it converts to e4m3 without clamping first (``_e4m3``): the conversion saturates, as the clamps did;
* its SwiGLU is the raw ``moe_swiglu`` (ftz ex2 and rcp): Triton's ``g * (1 / (1 + exp(-g))) * u`` wherever
  that stays in the normal range."""

from __future__ import annotations

import pytest
import torch
from conftest import requires_gpu
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tutorials.megamoe.gluon_persistent import _div_rn_by, _e4m3, moe_swiglu

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


@gluon.jit
def _swiglu(g_ptr, u_ptr, raw_ptr, triton_ptr, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [4], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    g, u = gl.load(g_ptr + offs), gl.load(u_ptr + offs)
    gl.store(raw_ptr + offs, moe_swiglu(g, u))
    gl.store(triton_ptr + offs, g * (1 / (1 + gl.exp(-g))) * u)


@requires_gpu
def test_swiglu_is_tritons_formula_bit_for_bit_in_the_normal_range():
    """Gates over -100 .. 100 (and 0, subnormal): the raw SwiGLU equals Triton's formula bit for bit wherever
    exp(-g) stays below 2**126 (g > -87), and silu(g) * u within 2e-5 everywhere (the rounding of g * log2(e)
    before ex2 makes most of that at large |g|, in both); no NaN from the ftz shortcuts (a gate of -100
    gives a signed 0)."""
    gen = torch.Generator().manual_seed(0)
    n = 1 << 16
    g = torch.empty(n).uniform_(-100.0, 100.0, generator=gen)
    g[:64] = torch.tensor([0.0, -0.0, 1e-40, -1e-40, -86.9, -87.5, -88.7, -89.0, 88.0, 100.0] * 6 + [0.0] * 4)
    u = torch.randn(n, generator=gen)
    raw, triton_formula = torch.empty(n, device="cuda"), torch.empty(n, device="cuda")
    _swiglu[(n // 512,)](g.cuda(), u.cuda(), raw, triton_formula, 512, num_warps=4)
    raw, triton_formula = raw.cpu(), triton_formula.cpu()
    assert not raw.isnan().any()
    normal = g > -87.0
    assert torch.equal(raw[normal].view(torch.int32), triton_formula[normal].view(torch.int32))
    exact = (g.double() * torch.sigmoid(g.double()) * u.double()).float()
    assert torch.allclose(raw, exact, rtol=2e-5, atol=1e-30)


@gluon.jit
def _to_e4m3(q_ptr, out_ptr, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [4], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    gl.store(out_ptr + offs, _e4m3(gl.load(q_ptr + offs)))


@requires_gpu
def test_e4m3_conversion_saturates_as_the_clamps_did():
    """Quotients past e4m3's range (up to +-inf) convert to +-448 without clamps, and every other value to
    the clamped conversion's bits."""
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1 << 14, generator=gen) * torch.exp2(torch.randint(-12, 14, (1 << 14,), generator=gen).float())
    q[:8] = torch.tensor([448.0, -448.0, 463.9, 464.0, -470.0, 1e30, float("inf"), float("-inf")])
    out = torch.empty(q.shape, dtype=torch.float8_e4m3fn, device="cuda")
    _to_e4m3[(q.numel() // 512,)](q.cuda(), out, 512, num_warps=4)
    assert (q.abs() > 448).sum() > 100
    assert torch.equal(out.cpu().view(torch.uint8), _e4m3_bits(q))
