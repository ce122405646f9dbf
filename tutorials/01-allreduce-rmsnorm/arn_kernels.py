"""The Triton kernel of the fused AllReduce(SUM) + residual add + RMSNorm, and its raw CUDA calls.

One kernel per call. Programs loop over token rows (``row = pid, pid + grid, ...``; at world 1 the
grid is one program per row). Per row, with ``e`` the row's epoch (its call count, kept in
``counters[row]`` in device memory so that CUDA graph replays advance it) and ``par = e % 2``:

* ``ALGO == LOCAL`` (world 1): ``reduced = x[row]``.
* ``ALGO == ONESHOT``: push ``x[row]`` to slot (par, me, row) of every peer with signal ``e``; wait for
  every peer's signal; sum the W rows in rank order in fp32.
* ``ALGO == TWOSHOT``: the row's owner is ``row % W``. Others push ``x[row]`` to the owner's slot
  (par, me, row // W) and wait for the all-gather signal; the owner waits for the W-1 pushes, sums in
  rank order, rounds, stores the reduced row in its all-gather slot and pushes it to every peer.

In every case the fp32 sum is rounded to the input dtype (what an all-reduce returns), then
``r = reduced + residual`` (fp32), ``residual_out = r``, ``norm_out = r * rsqrt(mean(r^2) + eps) * w``.
Rows that other ranks wrote are read with volatile loads after ``wait_ge``'s acquire.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.compiler import ASTSource

from triton_raw_ext import dialect

DEVICE_FILE = "allreduce-device.cu"
POINTER_TYPES = {"bf16": "*bf16", "fp16": "*fp16"}


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def push_row(dst, src, nbytes, sig, value, pe): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def wait_ge(sig, value): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def block_sync(): ...


@triton.jit
def _load_row(ptr, offs, mask, VOLATILE: tl.constexpr):
    return tl.load(ptr + offs, mask=mask, other=0.0, volatile=VOLATILE).to(tl.float32)


@triton.jit
def _oneshot_reduce(
    x_row, land, sig, row, e, par, me, offs, mask, H, MAX_T, ROWS, ROW_BYTES, WORLD: tl.constexpr
):
    """Push x_row to every peer, then sum all ranks' rows in rank order (fp32)."""
    for i in tl.static_range(1, WORLD):
        pe = (me + i) % WORLD
        slot = ((par * WORLD + me) * ROWS + row) * H
        push_row(land + slot, x_row, ROW_BYTES, sig + (par * (WORLD + 1) + me) * MAX_T + row, e, pe)
    acc = tl.zeros_like(offs).to(tl.float32)
    for src in tl.static_range(WORLD):
        if src == me:
            v = _load_row(x_row, offs, mask, False)
        else:
            wait_ge(sig + (par * (WORLD + 1) + src) * MAX_T + row, e)
            v = _load_row(land + ((par * WORLD + src) * ROWS + row) * H, offs, mask, True)
        acc += v
    return acc


@triton.jit
def _twoshot_reduce(
    x_row, rs, ag, sig, row, e, par, me, offs, mask, H, MAX_T, RS_ROWS, ROW_BYTES, WORLD: tl.constexpr
):
    """Reduce-scatter to the row's owner, all-gather of the rounded sum back (returns fp32)."""
    owner = (row % WORLD).to(tl.int32)
    ag_row = ag + (par * MAX_T + row) * H
    ag_sig = sig + (par * (WORLD + 1) + WORLD) * MAX_T + row
    if me != owner:
        slot = ((par * WORLD + me) * RS_ROWS + row // WORLD) * H
        push_row(rs + slot, x_row, ROW_BYTES, sig + (par * (WORLD + 1) + me) * MAX_T + row, e, owner)
        wait_ge(ag_sig, e)
        reduced = _load_row(ag_row, offs, mask, True)
    else:
        acc = tl.zeros_like(offs).to(tl.float32)
        for src in tl.static_range(WORLD):
            if src == me:
                v = _load_row(x_row, offs, mask, False)
            else:
                wait_ge(sig + (par * (WORLD + 1) + src) * MAX_T + row, e)
                v = _load_row(rs + ((par * WORLD + src) * RS_ROWS + row // WORLD) * H, offs, mask, True)
            acc += v
        rounded = acc.to(ag.dtype.element_ty)
        tl.store(ag_row + offs, rounded, mask=mask)
        block_sync()
        for i in tl.static_range(1, WORLD):
            push_row(ag_row, ag_row, ROW_BYTES, ag_sig, e, (me + i) % WORLD)
        reduced = rounded.to(tl.float32)
    return reduced


@triton.jit
def fused_allreduce_rmsnorm_kernel(
    x_ptr,
    res_ptr,
    w_ptr,
    norm_ptr,
    res_out_ptr,  # [T, H] contiguous, weight [H]
    land_ptr,
    rs_ptr,
    ag_ptr,
    sig_ptr,
    cnt_ptr,  # workspace (unused at world 1)
    T,
    H,
    eps,
    me,
    MAX_T,
    ROWS,
    RS_ROWS,
    WORLD: tl.constexpr,
    ALGO: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    """See the module docstring. ALGO: 0 local, 1 one-shot, 2 two-shot (arn_plan.Algorithm)."""
    offs = tl.arange(0, BLOCK_H)
    mask = offs < H
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dtype = x_ptr.dtype.element_ty
    row_bytes = H.to(tl.int64) * (dtype.primitive_bitwidth // 8)
    for step in range(tl.program_id(0), T, tl.num_programs(0)):
        row = step.to(tl.int64)
        x_row = x_ptr + row * H
        if ALGO == 0:
            reduced = tl.load(x_row + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(
                tl.float32
            )
        else:
            e = tl.load(cnt_ptr + row) + 1
            par = e % 2
            if ALGO == 1:
                acc = _oneshot_reduce(
                    x_row, land_ptr, sig_ptr, row, e, par, me, offs, mask, H, MAX_T, ROWS, row_bytes, WORLD
                )
            else:
                acc = _twoshot_reduce(
                    x_row,
                    rs_ptr,
                    ag_ptr,
                    sig_ptr,
                    row,
                    e,
                    par,
                    me,
                    offs,
                    mask,
                    H,
                    MAX_T,
                    RS_ROWS,
                    row_bytes,
                    WORLD,
                )
            reduced = acc.to(dtype).to(tl.float32)
            tl.store(cnt_ptr + row, e)
        r = reduced + tl.load(
            res_ptr + row * H + offs, mask=mask, other=0.0, eviction_policy="evict_first"
        ).to(tl.float32)
        tl.store(res_out_ptr + row * H + offs, r.to(dtype), mask=mask)
        inv = tl.rsqrt(tl.sum(r * r, axis=0) / H + eps)
        tl.store(norm_ptr + row * H + offs, (r * inv * w).to(dtype), mask=mask)


def kernel_source(algo: int, world: int, block_h: int, dtype: str, aligned: bool) -> ASTSource:
    """The kernel specialised for one launch configuration, for ``triton.compile``.

    ``dtype``: "bf16" or "fp16". ``aligned``: every tensor pointer is 16-byte aligned and H is a
    multiple of 16; this lets Triton emit 16-byte loads and stores, and the op checks it at launch.
    """
    if dtype not in POINTER_TYPES:
        raise ValueError(f"dtype must be one of {sorted(POINTER_TYPES)}, got {dtype!r}")
    ptr = POINTER_TYPES[dtype]
    signature = {
        "x_ptr": ptr, "res_ptr": ptr, "w_ptr": ptr, "norm_ptr": ptr, "res_out_ptr": ptr,
        "land_ptr": ptr, "rs_ptr": ptr, "ag_ptr": ptr, "sig_ptr": "*i64", "cnt_ptr": "*i64",
        "T": "i32", "H": "i32", "eps": "fp32", "me": "i32", "MAX_T": "i32", "ROWS": "i32", "RS_ROWS": "i32",
        "WORLD": "constexpr", "ALGO": "constexpr", "BLOCK_H": "constexpr",
    }  # fmt: skip
    constexprs = {"WORLD": world, "ALGO": algo, "BLOCK_H": block_h}
    names = list(signature)
    attrs = {}
    if aligned:
        divisible = [n for n in names if signature[n].startswith("*")] + ["H"]
        attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    return ASTSource(fused_allreduce_rmsnorm_kernel, signature=signature, constexprs=constexprs, attrs=attrs)
