"""Every Triton kernel of Tutorial 3 with a representative signature, for ahead-of-time compilation.

``kernels()`` is the project's AOT contract: the main job compiles each entry for sm_90 on
machines without a GPU. The representative layer is the production load at world 2 (so the
multi-rank code paths are the ones compiled): H=4096, I=1536, E=32 (16 local), top-k 8, 512
tokens per rank, with the tiles the layer picks for it, in bf16 (with L1 and L2 also as one
persistent launch, ``moe_gemms``) and then fp8 (the kernels both precisions share are listed once),
then the barrier between the phases of a call (``moe_barrier``, world > 1).
"""

from __future__ import annotations

import dataclasses

from triton.compiler import ASTSource

from .config import MoEConfig, choose_tiles, choose_tiles_fp8
from .launch import KernelLaunch, barrier_launch, launches

REPRESENTATIVE = MoEConfig(hidden=4096, intermediate=1536, num_experts=32, top_k=8, max_tokens=512, world=2)
REPRESENTATIVES = (REPRESENTATIVE, dataclasses.replace(REPRESENTATIVE, precision="fp8"))
PERSISTENT_PROGRAMS = 132  # the H200's SMs; moe_gemms' code does not depend on its program count


def all_launches(configs: tuple[MoEConfig, ...] = REPRESENTATIVES) -> list[KernelLaunch]:
    """The launches of one call of each config with the tiles the layer picks, each kernel name once, and the
    barrier the layer runs between them at world > 1."""
    by_name: dict[str, KernelLaunch] = {}
    for cfg in configs:
        rows = cfg.max_tokens * cfg.world * cfg.top_k / cfg.num_experts
        pick = choose_tiles_fp8 if cfg.precision == "fp8" else choose_tiles
        tiles = pick(rows, cfg.hidden, cfg.intermediate)
        variants = (
            [tiles]
            if cfg.precision == "fp8"
            else [tiles, dataclasses.replace(tiles, gemm_programs=PERSISTENT_PROGRAMS)]
        )
        for variant in variants:
            for launch in launches(cfg, variant, cfg.max_tokens):
                by_name.setdefault(launch.name, launch)
    barriers = [barrier_launch(cfg) for cfg in configs if cfg.world > 1]
    return list(by_name.values()) + barriers[:1]


def kernels(configs: tuple[MoEConfig, ...] = REPRESENTATIVES) -> list[tuple[str, ASTSource]]:
    """(name, ASTSource) for every kernel of one layer call of each config."""
    return [(launch.name, ast_source(launch)) for launch in all_launches(configs)]


def ast_source(launch: KernelLaunch) -> ASTSource:
    """The launch as Triton's JIT would specialise it: every pointer 16-byte aligned (torch allocations are).

    Without the alignment hint Triton cannot use 16-byte and asynchronous copies, and the GEMMs
    would not be software-pipelined, so the compiled code would not be the code that runs.
    """
    attrs = {(i,): [["tt.divisibility", 16]] for i, (_, _, sig) in enumerate(launch.params) if sig.startswith("*")}
    return ASTSource(launch.fn, signature=launch.signature(), constexprs=dict(launch.constexprs), attrs=attrs)


def options_for(name: str, configs: tuple[MoEConfig, ...] = REPRESENTATIVES) -> dict[str, int]:
    """Compile options (warps, stages) of kernel ``name`` of :func:`kernels`: the main job's AOT contract."""
    for launch in all_launches(configs):
        if launch.name == name:
            return {"num_warps": launch.num_warps, "num_stages": launch.num_stages}
    raise KeyError(f"{name!r} is not a Tutorial 3 kernel; kernels() lists them")


if __name__ == "__main__":
    import time

    import triton
    from triton.backends.compiler import GPUTarget

    for name, src in kernels():
        start = time.time()
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options_for(name))
        print(
            f"{name}: {time.time() - start:.1f} s, {compiled.metadata.shared} B shared, "
            f"{len(compiled.asm['cubin'])} B cubin"
        )
