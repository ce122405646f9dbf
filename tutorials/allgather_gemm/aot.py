"""Every Triton kernel of tutorial 2 as the operator launches it, for ahead-of-time compiles.

``kernels()`` is the contract the project's main job uses: it compiles each source for sm_90 on
machines without a GPU. The list covers both dtypes, the GEMM with and without its ready-flag
waits, every candidate config the benchmark may pick, the SM-push GEMM (both dtypes), and
``all_gather()``'s wait kernel.
``options_for(name)`` gives the ``triton.compile`` options the operator launches that kernel with
(its warps and stages); every kernel also compiles with Triton's default options. ``python -m
tutorials.allgather_gemm.aot`` compiles them all for sm_90 and prints a table.

Each source is the operator's own launch (``allgather_gemm.gemm_launch``, and ``all_gather()``'s
arguments) on meta tensors of the tutorial's goal shape at world 2, rank 0, turned into an
``ASTSource`` by :func:`tutorials.common.aot.launch_source`: types, constexprs and specialisations
are those of a launch on the GPU.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import torch
from triton.compiler import ASTSource

from triton_raw_ext.knobs import wait_timeout_ms

from ..common.aot import compile_and_print, launch_source
from .allgather_gemm import DTYPES, meta_gemm_launch, meta_sm_push_launch
from .kernels import ag_gemm_kernel, ag_gemm_sm_push_kernel, ag_wait_all_kernel
from .schedule import CANDIDATE_CONFIGS, DEFAULT_CONFIG, GemmConfig

H200_SMS = 132
SHAPE = (4096, 8192, 8192)  # (m_per_rank, n_per_rank, k): the goal shape
WORLD, RANK, EPOCH = 2, 0, 1  # a peer's tiles exist, so the ready checks are compiled in


def gemm_source(dtype: str = "bfloat16", config: GemmConfig = DEFAULT_CONFIG, wait: bool = True,
                num_sms: int = H200_SMS) -> tuple[ASTSource, dict[str, Any]]:
    """(source, launch options) of the consumer GEMM as ``AllGatherGEMM.__call__`` launches it."""
    _, args, kwargs = meta_gemm_launch(config, DTYPES[dtype], *SHAPE, epoch=EPOCH, rank=RANK, world=WORLD,
                                       wait_ms=wait_timeout_ms(), num_sms=num_sms, wait=wait)  # fmt: skip
    return launch_source(ag_gemm_kernel, *args, **kwargs)


def sm_push_source(dtype: str = "bfloat16", num_sms: int = H200_SMS) -> tuple[ASTSource, dict[str, Any]]:
    """(source, launch options) of the SM-push GEMM as ``AllGatherGEMM.__call__`` launches it."""
    _, args, kwargs = meta_sm_push_launch(DEFAULT_CONFIG, DTYPES[dtype], *SHAPE, rank=RANK, world=WORLD,
                                          wait_ms=wait_timeout_ms(), num_sms=num_sms)  # fmt: skip
    return launch_source(ag_gemm_sm_push_kernel, *args, **kwargs)


def wait_all_source() -> ASTSource:
    """``all_gather()``'s wait kernel, launched with Triton's default options."""
    ready = torch.empty(WORLD, dtype=torch.int32, device="meta")
    source, _ = launch_source(ag_wait_all_kernel, ready, EPOCH, RANK, WORLD, wait_timeout_ms())
    return source


def _gemms() -> dict[str, tuple[ASTSource, dict[str, Any]]]:
    gemms = {f"ag_gemm_{dtype}_{'wait' if wait else 'nowait'}": gemm_source(dtype, wait=wait)
             for dtype in DTYPES for wait in (True, False)}  # fmt: skip
    for i, config in enumerate(CANDIDATE_CONFIGS[1:], start=1):
        gemms[f"ag_gemm_bfloat16_wait_cfg{i}"] = gemm_source("bfloat16", config)
    for dtype in DTYPES:
        gemms[f"ag_gemm_{dtype}_smpush"] = sm_push_source(dtype)
    return gemms


def kernels() -> list[tuple[str, ASTSource]]:
    """(name, source) of every kernel variant the tutorial launches."""
    return [*((name, source) for name, (source, _) in _gemms().items()), ("ag_wait_all", wait_all_source())]


def options_for(name: str) -> dict[str, Any]:
    """The launch options of kernel ``name`` from :func:`kernels` (``..._cfg<i>``: candidate i)."""
    if name == "ag_wait_all":
        return {"num_warps": 4}  # Triton's default, which all_gather() launches it with
    if name.endswith("_smpush"):
        return sm_push_source(name.removeprefix("ag_gemm_").removesuffix("_smpush"))[1]
    match = re.fullmatch(r"ag_gemm_(\w+?)_(wait|nowait)(?:_cfg(\d+))?", name)
    if match is None:
        raise KeyError(f"{name!r} is not a Tutorial 2 kernel; kernels() lists them")
    dtype, wait, config = match.groups()
    return gemm_source(dtype, CANDIDATE_CONFIGS[int(config or 0)], wait == "wait")[1]


if __name__ == "__main__":
    sys.exit(compile_and_print("allgather_gemm"))
