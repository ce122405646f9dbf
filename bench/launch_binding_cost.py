"""Host cost of Triton's per-launch argument binding against a bound launch's, for the tutorials' kernels,
on the CPU (no GPU needed).

For each kernel MegaMoE launches (both impls, bf16 and fp8, world 1 and 2: ``megamoe.aot``) and each of
AllGather-GEMM's GEMMs, on meta tensors: µs per launch of what ``kernel[grid](...)`` does before the
launcher each time (Triton's binder, then its cache key with a warm key cache), against
``tutorials.common.bound_launch.BoundArguments.arguments`` with the op's per-call arguments (what the
ops do instead). Neither includes the launcher nor the driver. Medians of five rounds of ``--calls``
calls, each after a warmup (``op_dispatch_cost.us_per_call``). Run from the repository root:
``python -m bench.launch_binding_cost [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from triton.compiler import make_backend
from triton.runtime.jit import compute_cache_key, create_function_from_signature

from bench.op_dispatch_cost import us_per_call
from tutorials.common.aot import SM90
from tutorials.common.bound_launch import BoundArguments
from tutorials.common.run_metadata import run_metadata


def _us(fn: Callable[[], object], calls: int) -> float:
    return statistics.median(us_per_call(fn, calls) for _ in range(5))


def launches() -> list[tuple[str, Any, tuple, dict, list[str]]]:
    """(name, kernel, args, kwargs, varying parameters) of every launch measured."""
    from tutorials.allgather_gemm import aot as t2_aot
    from tutorials.allgather_gemm.allgather_gemm import GEMM_PER_CALL, SM_PUSH_PER_CALL, gemm_launch, sm_push_launch
    from tutorials.allgather_gemm.kernels import ag_gemm_kernel, ag_gemm_sm_push_kernel
    from tutorials.allgather_gemm.schedule import DEFAULT_CONFIG
    from tutorials.megamoe import aot as t3_aot
    from tutorials.megamoe.megamoe import PER_CALL_KEYS

    out = []
    for cfg, launch in t3_aot.all_launches():
        bindings = t3_aot.launch_bindings(launch, cfg)
        kwargs = {**launch.constexprs, "num_warps": launch.num_warps, "num_stages": launch.num_stages}
        varying = [name for name, key in launch.params if key in PER_CALL_KEYS]
        name = f"{launch.name} ({cfg.precision}, world {cfg.world})"
        out.append((name, launch.fn, tuple(launch.arguments(bindings)), kwargs, varying))
    m, n, k = t2_aot.SHAPE
    meta = lambda *shape, dtype=torch.bfloat16: torch.empty(shape, dtype=dtype, device="meta")  # noqa: E731
    from triton.tools.tensor_descriptor import TensorDescriptor

    block = [DEFAULT_CONFIG.block_m, DEFAULT_CONFIG.block_k]
    a, workspace = meta(m, k), meta(2, 2 * m, k)
    local, buffers = TensorDescriptor.from_tensor(a, block), TensorDescriptor.from_tensor(workspace.view(-1, k), block)
    b, c, ready = meta(k, n), meta(2 * m, n), meta(2, dtype=torch.int32)
    _, args, kwargs = gemm_launch(DEFAULT_CONFIG, local, buffers, b, c, ready, epoch=1, rank=0, world=2, wait_ms=1000,
                                  num_sms=132, wait=True)  # fmt: skip
    out.append(("ag_gemm_kernel", ag_gemm_kernel, args, kwargs, list(GEMM_PER_CALL)))
    state = meta(8, dtype=torch.int32)
    _, args, kwargs = sm_push_launch(DEFAULT_CONFIG, local, buffers, b, c, a, workspace, ready, state, rank=0, world=2,
                                     wait_ms=1000, num_sms=132)  # fmt: skip
    out.append(("ag_gemm_sm_push_kernel", ag_gemm_sm_push_kernel, args, kwargs, list(SM_PUSH_PER_CALL)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--out", type=Path, help="folder for launch_binding_cost.json")
    args = parser.parse_args(argv)
    backend = make_backend(SM90)
    rows = []
    for name, fn, fn_args, kwargs, varying in launches():
        bind = create_function_from_signature(fn.signature, fn.params, backend)
        key_cache: dict = {}

        def triton_binding(bind=bind, fn_args=fn_args, kwargs=kwargs, key_cache=key_cache) -> None:
            _, specialization, options = bind(*fn_args, **kwargs)
            compute_cache_key(key_cache, specialization, options)

        bound = BoundArguments(fn, fn_args, kwargs, varying, backend)
        values = [fn_args[fn.arg_names.index(v)] for v in varying]
        bound_us = _us(lambda b=bound, values=values: b.arguments(*values), args.calls)
        row = {"kernel": name, "parameters": len(fn.arg_names), "varying": len(varying),
               "triton_us": _us(triton_binding, args.calls), "bound_us": bound_us}  # fmt: skip
        rows.append(row)
        print(f"{name:44} {row['parameters']:3d} params  Triton {row['triton_us']:6.1f} us  bound {bound_us:5.1f} us")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "launch_binding_cost.json").write_text(json.dumps({**run_metadata(), "rows": rows}, indent=1))
        print(f"-> {args.out / 'launch_binding_cost.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
