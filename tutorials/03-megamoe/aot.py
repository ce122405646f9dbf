"""Every Triton kernel of Tutorial 3 with a representative signature, for ahead-of-time compilation.

``kernels()`` is the project's AOT contract: the main job compiles each entry for sm_90 on
machines without a GPU. The representative layer is the production load at world 2 (so the
multi-rank code paths are the ones compiled): H=4096, I=1536, E=32 (16 local), top-k 8, 512
tokens per rank, with the tiles the layer picks for it.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from moe_config import MoEConfig, choose_tiles  # noqa: E402
from moe_launch import KernelLaunch, launches  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

REPRESENTATIVE = MoEConfig(hidden=4096, intermediate=1536, num_experts=32, top_k=8, max_tokens=512, world=2)


def kernels(cfg: MoEConfig = REPRESENTATIVE) -> list[tuple[str, ASTSource]]:
    """(name, ASTSource) for every kernel of one layer call with shape ``cfg``."""
    rows = cfg.max_tokens * cfg.world * cfg.top_k / cfg.num_experts
    tiles = choose_tiles(rows, cfg.hidden, cfg.intermediate)
    return [(launch.name, ast_source(launch)) for launch in launches(cfg, tiles, cfg.max_tokens)]


def ast_source(launch: KernelLaunch) -> ASTSource:
    """The launch as Triton's JIT would specialise it: every pointer 16-byte aligned (torch allocations are).

    Without the alignment hint Triton cannot use 16-byte and asynchronous copies, and the GEMMs
    would not be software-pipelined, so the compiled code would not be the code that runs.
    """
    attrs = {
        (i,): [["tt.divisibility", 16]] for i, (_, _, sig) in enumerate(launch.params) if sig.startswith("*")
    }
    return ASTSource(launch.fn, signature=launch.signature(), constexprs=dict(launch.constexprs), attrs=attrs)


def options(cfg: MoEConfig = REPRESENTATIVE) -> dict[str, dict[str, int]]:
    """Compile options (warps, stages) of each kernel of :func:`kernels`, by name."""
    rows = cfg.max_tokens * cfg.world * cfg.top_k / cfg.num_experts
    tiles = choose_tiles(rows, cfg.hidden, cfg.intermediate)
    return {
        launch.name: {"num_warps": launch.num_warps, "num_stages": launch.num_stages}
        for launch in launches(cfg, tiles, cfg.max_tokens)
    }


if __name__ == "__main__":
    import time

    import triton
    from triton.backends.compiler import GPUTarget

    for name, src in kernels():
        start = time.time()
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options()[name])
        print(
            f"{name}: {time.time() - start:.1f} s, {compiled.metadata.shared} B shared, "
            f"{len(compiled.asm['cubin'])} B cubin"
        )
