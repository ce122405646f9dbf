"""Every Triton kernel of Tutorial 3 as the layer launches it, for ahead-of-time compilation.

``kernels()`` is the project's AOT contract: the main job compiles each entry for sm_90 on
machines without a GPU. The representative layer is the production load at world 2 (so the
multi-rank code paths are the ones compiled): H=4096, I=1536, E=32 (16 local), top-k 8, 512
tokens per rank, with the tiles the layer picks for it, in bf16 (with L1 and L2 also as one
persistent launch, ``moe_gemms``) and then fp8 (the kernels both precisions share are listed once),
then the barrier between the phases of a call (``moe_barrier``, world > 1), then each precision's one
launch of ``impl="persistent"`` (``moe_persistent``, ``moe_persistent_fp8``) with its default knobs, and the
same load at world 1 in fp8 and in bf16, whose persistent launch is the Gluon kernel (``moe_persistent_gluon``,
``moe_persistent_gluon_bf16``; every other kernel of those two is listed already). ``python -m
tutorials.megamoe.aot`` compiles them all for sm_90 and prints a table. Each source is the
launch with the layer's bindings on meta tensors (``megamoe.meta_bindings``), made an ``ASTSource``
by :func:`tutorials.common.aot.launch_source`.
"""

from __future__ import annotations

import dataclasses
import sys

from triton.compiler import ASTSource

from ..common.aot import compile_and_print, launch_source
from .config import MoEConfig, choose_tiles, choose_tiles_fp8
from .launch import KernelLaunch, barrier_launch, launches
from .megamoe import meta_bindings
from .persistent_launch import PersistentConfig, choose_persistent, persistent_launch

REPRESENTATIVE = MoEConfig(hidden=4096, intermediate=1536, num_experts=32, top_k=8, max_tokens=512, world=2)
REPRESENTATIVES = (REPRESENTATIVE, dataclasses.replace(REPRESENTATIVE, precision="fp8"),
                   dataclasses.replace(REPRESENTATIVE, precision="fp8", world=1),
                   dataclasses.replace(REPRESENTATIVE, world=1))  # fmt: skip
PERSISTENT_PROGRAMS = 132  # the H200's SMs; the persistent kernels' code does not depend on their program count
GLUON_LAUNCHES = ("moe_persistent_gluon", "moe_persistent_gluon_bf16")  # persistent_launch's names, fp8 and bf16


def all_launches(configs: tuple[MoEConfig, ...] = REPRESENTATIVES) -> list[tuple[MoEConfig, KernelLaunch]]:
    """The launches of one call of each config with the tiles the layer picks, each kernel name once (with
    the config it was first met in), the barrier the layer runs between them at world > 1, and each
    config's one persistent launch (default knobs)."""
    by_name: dict[str, tuple[MoEConfig, KernelLaunch]] = {}
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
                by_name.setdefault(launch.name, (cfg, launch))
    barriers = [(cfg, barrier_launch(cfg)) for cfg in configs if cfg.world > 1]
    persistent: dict[str, tuple[MoEConfig, KernelLaunch]] = {}
    for cfg in configs:
        for gluon in (False, True):  # the Gluon kernel where it runs (world 1)
            launch = persistent_launch(cfg, choose_persistent(cfg, gluon=gluon), PERSISTENT_PROGRAMS)
            persistent.setdefault(launch.name, (cfg, launch))
    return list(by_name.values()) + barriers[:1] + list(persistent.values())


def kernels(configs: tuple[MoEConfig, ...] = REPRESENTATIVES) -> list[tuple[str, ASTSource]]:
    """(name, ASTSource) for every kernel of one layer call of each config."""
    return [(launch.name, ast_source(launch, cfg)) for cfg, launch in all_launches(configs)]


def launch_bindings(launch: KernelLaunch, cfg: MoEConfig, persistent: PersistentConfig | None = None) -> dict:
    """:func:`megamoe.meta_bindings` of ``launch`` in a layer of ``cfg``: with the knobs ``persistent``, default
    the layer's defaults for the kernel ``launch`` runs (Gluon or Triton)."""
    if persistent is None:
        persistent = choose_persistent(cfg, gluon=launch.name in GLUON_LAUNCHES)
    return meta_bindings(cfg, persistent)


def ast_source(launch: KernelLaunch, cfg: MoEConfig, persistent: PersistentConfig | None = None) -> ASTSource:
    """The launch as the layer makes it in a layer of ``cfg``, with its bindings (:func:`megamoe.meta_bindings`;
    a persistent launch's knobs are ``persistent``, default the layer's), as Triton's JIT specialises it
    (every pointer 16-byte aligned, as torch's and NVSHMEM's allocations are): without the alignment
    Triton could not use 16-byte and asynchronous copies, the GEMMs would not be software-pipelined, and
    the compiled code would not be the code that runs."""
    bindings = launch_bindings(launch, cfg, persistent)
    source, _ = launch_source(launch.fn, *launch.arguments(bindings), **launch.constexprs, num_warps=launch.num_warps,
                              num_stages=launch.num_stages)  # fmt: skip
    return source


def options_for(name: str, configs: tuple[MoEConfig, ...] = REPRESENTATIVES) -> dict[str, int]:
    """Compile options (warps, stages) of kernel ``name`` of :func:`kernels`: the main job's AOT contract."""
    for _, launch in all_launches(configs):
        if launch.name == name:
            return {"num_warps": launch.num_warps, "num_stages": launch.num_stages}
    raise KeyError(f"{name!r} is not a Tutorial 3 kernel; kernels() lists them")


if __name__ == "__main__":
    sys.exit(compile_and_print("megamoe"))
