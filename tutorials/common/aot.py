"""Ahead-of-time builds of the tutorials' kernels: their sources, taken from the launches the ops make,
and the compile of every kernel a tutorial's ``aot`` module lists.

Contract: :func:`launch_source` turns a launch ``fn[grid](*args, **kwargs)`` into the ``ASTSource``
that Triton's JIT compiles for it on an sm_90 device, and the launch options among ``kwargs``
(``num_warps``, ``num_stages``), for ``triton.compile(source, target=SM90, options=options)``.
Signature types, constexprs and specialisations (16-byte aligned pointers, integers divisible by 16,
integers equal to 1 unless ``do_not_specialize``) come from the arguments as in a launch, through
the JIT's own argument binder (the same in Triton 3.6-3.9), so the AOT build is the kernel the op
runs. Tensors may live on the ``meta`` device: only their dtype and address count, and a meta
tensor's address (0) is aligned like torch's allocations. No GPU is needed.

:func:`compile_tutorial` compiles every kernel ``tutorials.<name>.aot.kernels()`` lists with its
``options_for(name)`` for :data:`SM90` (the main job's AOT mode, and ``python -m
tutorials.<name>.aot``: :func:`compile_and_print`): one row per kernel, a failure as a row too.
"""

from __future__ import annotations

import importlib
import time
import traceback
from typing import Any

from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

SM90 = GPUTarget("cuda", 90, 32)


def launch_source(fn: Any, *args: Any, **kwargs: Any) -> tuple[ASTSource, dict[str, Any]]:
    """(source, launch options) of launching the ``@triton.jit`` or ``@gluon.jit`` function ``fn`` with
    ``args`` and ``kwargs`` (constexprs by name, and launch options) on an sm_90 GPU."""
    from triton.compiler import make_backend
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(SM90)
    bind = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, _ = bind(*args, **kwargs)
    _, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, None)
    options = {name: value for name, value in kwargs.items() if name not in signature}
    return (GluonASTSource if fn.is_gluon() else ASTSource)(fn, signature, constexprs, attrs), options


def compile_tutorial(tutorial: str) -> list[dict[str, Any]]:
    """Compile every kernel of ``tutorials.<tutorial>.aot``; one row per kernel (errors become rows too)."""
    import triton

    try:
        aot = importlib.import_module(f"tutorials.{tutorial}.aot")
        sources = aot.kernels()
    except Exception as e:  # noqa: BLE001 - reported as a failed row, the job goes on
        return [{"tutorial": tutorial, "kernel": "<aot.py>", "ok": False, "error": f"{type(e).__name__}: {e}"}]
    rows = []
    for name, src in sources:
        start = time.perf_counter()
        try:
            c = triton.compile(src, target=SM90, options=aot.options_for(name))
        except Exception as e:  # noqa: BLE001
            rows.append({"tutorial": tutorial, "kernel": name, "ok": False,
                         "error": "".join(traceback.format_exception_only(e)).strip()[-2000:]})
            continue
        meta = c.metadata._asdict()
        rows.append({
            "tutorial": tutorial, "kernel": name, "ok": c.asm["cubin"][:4] == b"\x7fELF",
            "seconds": round(time.perf_counter() - start, 3), "ptx_kb": round(len(c.asm["ptx"]) / 1024, 1),
            "cubin_kb": round(len(c.asm["cubin"]) / 1024, 1), "shared_bytes": meta.get("shared"),
            "num_warps": meta.get("num_warps"), "nvshmem": meta.get("raw_nvshmem", []),
        })  # fmt: skip
    return rows


def print_rows(rows: list[dict[str, Any]]) -> None:
    """One line per row of :func:`compile_tutorial`: time, PTX and cubin size, shared memory, NVSHMEM symbols."""
    print(f"{'tutorial':<24} {'kernel':<40} {'ok':<4} {'s':>6} {'ptx KB':>8} {'cubin KB':>9} {'smem':>7} nvshmem")
    for r in rows:
        if r["ok"]:
            print(f"{r['tutorial']:<24} {r['kernel']:<40} {'yes':<4} {r['seconds']:>6.2f} {r['ptx_kb']:>8} "
                  f"{r['cubin_kb']:>9} {r['shared_bytes']:>7} {len(r['nvshmem'])} symbols")
        else:
            print(f"{r['tutorial']:<24} {r['kernel']:<40} FAIL  {r['error'].splitlines()[-1][:200]}")


def compile_and_print(tutorial: str) -> int:
    """Compile and print every kernel of ``tutorials.<tutorial>.aot``; exit status 1 if one failed."""
    rows = compile_tutorial(tutorial)
    print_rows(rows)
    return 0 if rows and all(r["ok"] for r in rows) else 1
