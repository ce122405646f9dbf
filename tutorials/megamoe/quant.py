"""FP8 e4m3 block quantization in torch (DeepSeek-V3 / DeepGEMM style): one float32 scale per block.

Contract: a block of values v gets the scale ``s = max(amax(|v|), AMAX_FLOOR) / FP8_MAX`` and is stored
as ``float8_e4m3fn(clamp(v / s, -FP8_MAX, FP8_MAX))`` (IEEE float32 division, round to nearest even),
so ``v ~= q * s``. Values in e4m3's normal range come back within 2**-4 relative; an all-zero block
comes back as zeros (the floor keeps its scale finite). The Triton kernels of ``kernels_fp8``
apply the same formula with IEEE division (``tl.math.div_rn``), so a kernel and these functions turn
the same float32 values into the same bits.

* :func:`quantize_rows` (activations): per row, per ``FP8_BLOCK`` consecutive columns.
* :func:`quantize_blocks` (weights): per ``FP8_BLOCK`` x ``FP8_BLOCK`` block of the last two dims.
* :func:`dequantize_rows`, :func:`dequantize_blocks`: back to float32.
* :func:`expert_weights`: the weight tensors a layer binds for a precision (fp8: K-major, quantized).
"""

from __future__ import annotations

import torch

from .config import FP8_BLOCK, PRECISIONS

FP8_MAX = 448.0  # largest finite float8_e4m3fn
AMAX_FLOOR = 1e-12  # scale floor: an all-zero block gets a finite scale (and stays zero)
FP8 = torch.float8_e4m3fn


def _check_multiple(n: int, what: str) -> None:
    if n % FP8_BLOCK:
        raise ValueError(f"{what}={n} must be a multiple of {FP8_BLOCK} (one fp8 scale per {FP8_BLOCK} values)")


def _quantize(v: torch.Tensor, dims: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale) with one scale per slice over ``dims`` of float32 ``v`` (scale keeps those dims as 1)."""
    amax = v.abs().amax(dim=dims, keepdim=True).clamp_min(AMAX_FLOOR)
    # a tensor divisor: torch's CUDA division by a Python scalar multiplies by its reciprocal, which is
    # off by one ulp for about half the scales (seen on the H200), and would then differ from the kernels
    scale = amax / torch.full_like(amax, FP8_MAX)
    return (v / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q [..., N] float8_e4m3fn, scales [..., N / FP8_BLOCK] float32) of ``x`` [..., N], N % FP8_BLOCK == 0."""
    n = x.shape[-1]
    _check_multiple(n, "row length")
    q, scale = _quantize(x.float().unflatten(-1, (n // FP8_BLOCK, FP8_BLOCK)), (-1,))
    return q.flatten(-2), scale.squeeze(-1)


def dequantize_rows(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """float32 [..., N] from :func:`quantize_rows`' output."""
    return (q.float().unflatten(-1, (-1, FP8_BLOCK)) * scale[..., None]).flatten(-2)


def _blocks(w: torch.Tensor) -> torch.Tensor:
    """[..., R, C] as [..., R/B, B, C/B, B] (B = FP8_BLOCK)."""
    r, c = w.shape[-2:]
    return w.unflatten(-1, (c // FP8_BLOCK, FP8_BLOCK)).unflatten(-3, (r // FP8_BLOCK, FP8_BLOCK))


def quantize_blocks(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q [..., R, C] float8_e4m3fn, scales [..., R / FP8_BLOCK, C / FP8_BLOCK] float32) of ``w`` [..., R, C]."""
    r, c = w.shape[-2:]
    _check_multiple(r, "rows")
    _check_multiple(c, "columns")
    q, scale = _quantize(_blocks(w.float().contiguous()), (-3, -1))
    return q.reshape(w.shape), scale.squeeze(-1).squeeze(-2)


def dequantize_blocks(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """float32 [..., R, C] from :func:`quantize_blocks`' output."""
    return (_blocks(q.float()) * scale[..., :, None, :, None]).reshape(q.shape)


def quantize_k_major(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-expert weights ``w`` [E, K, N] -> (q [E, N, K] float8_e4m3fn, scales [E, N/128, K/128] float32).

    K-major (each output column's K values contiguous), the layout fp8 wgmma reads B in. One expert
    at a time, so the float32 temporaries stay one expert's size.
    """
    e, k, n = w.shape
    q = torch.empty(e, n, k, dtype=FP8, device=w.device)
    scale = torch.empty(e, n // FP8_BLOCK, k // FP8_BLOCK, dtype=torch.float32, device=w.device)
    for j in range(e):
        q[j], scale[j] = quantize_blocks(w[j].t())  # [N, K] blocks = [K, N] blocks
    return q, scale


def expert_weights(w1: torch.Tensor, w2: torch.Tensor, precision: str) -> dict[str, torch.Tensor]:
    """The weight bindings of a layer: bf16 ``w1`` [E, H, 2I], ``w2`` [E, I, H] as given (contiguous)
    for "bf16"; for "fp8" ``w1q`` [E, 2I, H] + ``w1s`` [E, 2I/128, H/128] and ``w2q`` [E, H, I] +
    ``w2s`` [E, H/128, I/128] (K-major e4m3 with one scale per 128 x 128 block)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: use one of {PRECISIONS}")
    if precision == "bf16":
        return {"w1": w1.contiguous(), "w2": w2.contiguous()}
    w1q, w1s = quantize_k_major(w1)
    w2q, w2s = quantize_k_major(w2)
    return {"w1q": w1q, "w1s": w1s, "w2q": w2q, "w2s": w2s}
