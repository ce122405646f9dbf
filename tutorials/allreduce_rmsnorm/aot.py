"""AOT contract of tutorial 1: ``kernels()`` lists every Triton kernel of the tutorial with
representative signatures, for sm_90 builds on machines without a GPU; ``options_for(name)`` the
warps the op launches it with. The op compiles ``kernels.kernel_source`` itself (``triton.compile``,
not a JIT launch), so these are the op's own sources.

``python -m tutorials.allreduce_rmsnorm.aot`` compiles them all for sm_90 and prints a table;
``--warm H [H ...]`` compiles, into Triton's cache, every variant the op launches for those hidden
sizes (both dtypes, world 1, 2 and 4), in parallel: the GPU suite runs it first so that the ranks it
starts find their kernels compiled.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import triton
from triton.compiler import ASTSource

from ..common.aot import compile_and_print
from .kernels import kernel_source
from .plan import Algorithm, Push, launch_config

GOAL_HIDDEN = 8192


def variant(
    algo: Algorithm, world: int, hidden: int, dtype: str, push: Push = Push.STORES
) -> tuple[ASTSource, int]:
    """(source, num_warps) exactly as AllReduceRMSNorm compiles them (aligned tensors; ``push``: the
    op's choice on one node, PUTS where a peer is not reachable by load/store)."""
    cfg = launch_config(algo, 1, hidden, resident_programs=1)
    src = kernel_source(int(algo), world, cfg.block_h, dtype, aligned=True, push=int(push), batch_rows=cfg.batch_rows)
    return src, cfg.num_warps


# name -> (algorithm, world, dtype, push) of every kernel variant family the op launches, at H=GOAL_HIDDEN
AOT_VARIANTS = {
    "local_w1_bf16": (Algorithm.LOCAL, 1, "bf16", Push.PUTS),
    "local_w1_fp16": (Algorithm.LOCAL, 1, "fp16", Push.PUTS),
    "oneshot_w2_bf16": (Algorithm.ONESHOT, 2, "bf16", Push.STORES),
    "oneshot_w2_bf16_puts": (Algorithm.ONESHOT, 2, "bf16", Push.PUTS),
    "oneshot_w4_fp16": (Algorithm.ONESHOT, 4, "fp16", Push.STORES),
    "twoshot_w4_bf16": (Algorithm.TWOSHOT, 4, "bf16", Push.STORES),
    "twoshot_w8_bf16": (Algorithm.TWOSHOT, 8, "bf16", Push.STORES),
    "twoshot_w8_bf16_puts": (Algorithm.TWOSHOT, 8, "bf16", Push.PUTS),
}


def kernels() -> list[tuple[str, ASTSource]]:
    """Every kernel variant family the op launches, at the goal hidden size H=8192."""
    return [(name, variant(algo, w, GOAL_HIDDEN, dt, push)[0]) for name, (algo, w, dt, push) in AOT_VARIANTS.items()]


def options_for(name: str) -> dict[str, int]:
    """The launch options (warps) the op uses for kernel ``name`` of :func:`kernels`."""
    algo, world, dt, push = AOT_VARIANTS[name]
    return {"num_warps": variant(algo, world, GOAL_HIDDEN, dt, push)[1]}


Job = tuple[Algorithm, int, int, str, Push, int]


def _compile(job: Job) -> str:
    algo, world, hidden, dtype, push, arch = job
    from triton.backends.compiler import GPUTarget

    src, warps = variant(algo, world, hidden, dtype, push)
    start = time.time()
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps})
    name = f"{algo.name.lower()}_w{world}_h{hidden}_{dtype}_{push.name.lower()}"
    return f"{name}: {time.time() - start:.1f}s {compiled.hash[:12]}"


def warm_jobs(hiddens: list[int], worlds: list[int], arch: int) -> list[Job]:
    """Every (algorithm, world, hidden, dtype, push) the suite's shapes can launch."""
    jobs: list[Job] = []
    for hidden in hiddens:
        for dtype in ("bf16", "fp16"):
            for world in worlds:
                if world == 1:
                    jobs.append((Algorithm.LOCAL, world, hidden, dtype, Push.PUTS, arch))
                    continue
                for algo in (Algorithm.ONESHOT, Algorithm.TWOSHOT):
                    jobs += [(algo, world, hidden, dtype, push, arch) for push in Push]
    return jobs


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--warm", type=int, nargs="*", metavar="H", help="hidden sizes to precompile")
    parser.add_argument("--worlds", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--arch", type=int, default=90, help="--warm: the GPU's compute capability")
    parser.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1))
    args = parser.parse_args()
    if not args.warm:
        return compile_and_print("allreduce_rmsnorm")
    jobs = warm_jobs(args.warm, args.worlds, args.arch)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for line in pool.map(_compile, jobs):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
