"""Every Triton kernel of tutorial 2 with representative signatures, for ahead-of-time compiles.

``kernels()`` is the contract the project's main job uses: it compiles each source for sm_90 on
machines without a GPU. The list covers both dtypes, the GEMM with and without its ready-flag
waits, every candidate config the benchmark may pick, and ``all_gather()``'s wait kernel.
``options_for(name)`` gives the ``triton.compile`` options the operator launches that kernel with
(its warps and stages); every kernel also compiles with Triton's default options.
"""

from __future__ import annotations

import re

from triton.compiler import ASTSource

from .kernels import ag_gemm_kernel, ag_wait_all_kernel
from .schedule import CANDIDATE_CONFIGS, DEFAULT_CONFIG, GemmConfig

H200_SMS = 132
TRITON_DTYPES = {"bfloat16": "bf16", "float16": "fp16"}


def gemm_source(dtype: str = "bfloat16", config: GemmConfig = DEFAULT_CONFIG, wait: bool = True,
                num_sms: int = H200_SMS) -> ASTSource:
    """The consumer GEMM as the operator launches it (see ``AllGatherGEMM._launch``)."""
    t = TRITON_DTYPES[dtype]
    c_block_n = config.block_n // 2 if config.epilogue_subtile else config.block_n
    signature = {
        "local_desc": f"tensordesc<{t}[{config.block_m},{config.block_k}]>",
        "gathered_desc": f"tensordesc<{t}[{config.block_m},{config.block_k}]>",
        "b_desc": f"tensordesc<{t}[{config.block_k},{config.block_n}]>",
        "c_desc": f"tensordesc<{t}[{config.block_m},{c_block_n}]>",
        "ready_ptr": "*i32", "epoch": "i32", "rank": "i32", "world": "i32", "m_per_rank": "i32",
        "N": "i32", "K": "i32", "wait_ms": "i32",
    }  # fmt: skip
    constexprs = {
        "BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
        "GROUP_M": config.group_m, "NUM_SMS": num_sms, "WAIT": wait, "FLATTEN": config.flatten,
        "EPILOGUE_SUBTILE": config.epilogue_subtile,
    }  # fmt: skip
    signature.update({name: "constexpr" for name in constexprs})
    return ASTSource(ag_gemm_kernel, signature=signature, constexprs=constexprs)


def compile_options(config: GemmConfig = DEFAULT_CONFIG) -> dict[str, int]:
    """``triton.compile`` options matching the launch (warps, pipeline depth)."""
    return {"num_warps": config.num_warps, "num_stages": config.num_stages}


def kernels() -> list[tuple[str, ASTSource]]:
    """(name, source) of every kernel variant the tutorial launches."""
    out = []
    for dtype in TRITON_DTYPES:
        for wait in (True, False):
            out.append((f"ag_gemm_{dtype}_{'wait' if wait else 'nowait'}", gemm_source(dtype, wait=wait)))
    for i, config in enumerate(CANDIDATE_CONFIGS[1:], start=1):
        out.append((f"ag_gemm_bfloat16_wait_cfg{i}", gemm_source("bfloat16", config)))
    wait_all = {"ready_ptr": "*i32", "epoch": "i32", "rank": "i32", "world": "i32", "wait_ms": "i32"}
    out.append(("ag_wait_all", ASTSource(ag_wait_all_kernel, signature=wait_all)))
    return out


def options_for(name: str) -> dict[str, int]:
    """The launch options of kernel ``name`` from :func:`kernels` (``..._cfg<i>``: candidate i)."""
    if name == "ag_wait_all":
        return {"num_warps": 4}  # launched with Triton's default
    match = re.search(r"_cfg(\d+)$", name)
    return compile_options(CANDIDATE_CONFIGS[int(match.group(1))] if match else DEFAULT_CONFIG)
