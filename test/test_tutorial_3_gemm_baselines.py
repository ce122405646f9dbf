"""Tutorial 3's block-scaled dense ceiling (``gemm_baselines.block_scaled_mm``) computes the layer's fp8
arithmetic: e4m3 operands with the layer's scales (per row and 128 columns of A, per 128 x 128 block of the
weights), each K block's product scaled and summed in float32 (on the GPU: cuBLAS's block-scaled GEMM)."""

from __future__ import annotations

import pytest
import torch
from conftest import requires_gpu

from tutorials.megamoe.gemm_baselines import block_scaled_mm, dense_block_scaled_gemms
from tutorials.megamoe.quant import dequantize_blocks, dequantize_rows, quantize_blocks, quantize_rows


def _has_block_scaled_cublas() -> bool:
    """cuBLAS's block-scaled fp8 GEMM: CUDA 12.9 or later, sm_90 only."""
    cuda = tuple(int(v) for v in (torch.version.cuda or "0.0").split(".")[:2])
    return torch.cuda.is_available() and cuda >= (12, 9) and torch.cuda.get_device_capability() == (9, 0)


requires_block_scaled_cublas = pytest.mark.skipif(not _has_block_scaled_cublas(),
                                                  reason="needs cuBLAS block scaling (CUDA >= 12.9, sm_90)")


def _operands(m: int, n: int, k: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Quantized A [m, k] and W [n, k] whose 128-blocks span scales 2**-6 .. 2**6 apart, so that a scale
    applied to the wrong block, or not per K block, is far off."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, generator=g, device="cuda") * 2.0 ** torch.randint(-6, 7, (m, k // 128), generator=g,
                                                                             device="cuda").repeat_interleave(128, 1)
    w = torch.randn(n, k, generator=g, device="cuda") * 2.0 ** torch.randint(
        -6, 7, (n // 128, k // 128), generator=g, device="cuda").repeat_interleave(128, 0).repeat_interleave(128, 1)
    return (*quantize_rows(a), *quantize_blocks(w))  # fmt: skip


@requires_gpu
@requires_block_scaled_cublas
@pytest.mark.parametrize(("m", "n", "k"), [(256, 384, 512), (4096, 3072, 4096)])
def test_block_scaled_mm_is_the_dequantized_product(m, n, k):
    a, a_scale, w, w_scale = _operands(m, n, k, seed=m)
    out = block_scaled_mm(a, a_scale, w, w_scale)
    ref = dequantize_rows(a, a_scale) @ dequantize_blocks(w, w_scale).t()
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    err = float((out.float() - ref).norm() / ref.norm())
    assert err < 8e-3, f"block-scaled GEMM off the float32 product of its operands by {err:.2e}"


@requires_gpu
@requires_block_scaled_cublas
def test_dense_block_scaled_gemms_have_the_layers_shapes():
    y1, y2 = dense_block_scaled_gemms(256, 1024, 384, torch.device("cuda"))()
    assert y1.shape == (256, 768) and y2.shape == (256, 1024)
    assert y1.dtype == y2.dtype == torch.bfloat16 and bool(y1.float().abs().sum() > 0)
