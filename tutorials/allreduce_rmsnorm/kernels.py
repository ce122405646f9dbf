"""The Triton kernel of the fused AllReduce(SUM) + residual add + RMSNorm, and its raw CUDA calls.

One kernel per call. Program ``pid`` handles rows ``pid, pid + grid, ...`` (at world 1 the grid is
one program per row). Each row has an epoch ``e`` (its call count, kept in ``counters[row]`` in
device memory so that CUDA graph replays advance it, stored back after the row's last phase) and
uses the workspace half ``par = e % 2``; a push of row data comes with the signal value ``e``.

* ``ALGO == LOCAL`` (world 1): ``reduced = x[row]``.
* ``ALGO == ONESHOT``, per program: (1) push every row ``x[row]`` to slot (par, me, row) of every
  peer, complete the pushes once, then set every row's signal (par, me, row) on every peer to ``e``;
  (2) per row (``BATCH_ROWS`` rows at a time), wait for every peer's signal, sum the W rows in rank
  order in fp32.
* ``ALGO == TWOSHOT``, row owner ``row % W``, per program: (1) push the rows others own to the
  owner's slot (par, me, row // W), complete, signal; (2) for the rows this rank owns, wait for the
  W-1 pushes, sum in rank order, round and store in the all-gather slot (par, row); then push those
  rows to every peer, complete, signal (par, W, row); (3) per row, wait for the owner's all-gather
  signal (own rows: none) and read the reduced row from the all-gather slot.

A push is either the program's own vector stores through the peer's mapped copy, completed by
``publish_stores`` (``PUSH == 1``), or NVSHMEM non-blocking block puts completed by ``complete_puts``
(``PUSH == 0``); the signals follow the completion in thread 0 either way.

No program waits before it has issued all its phase-1 pushes and signals, and program p waits only
for programs p of other ranks (every rank has the same grid), which are resident (plan caps the
grid), so the waits cannot deadlock. In every case the fp32 sum is rounded to the input dtype (what
an all-reduce returns), then ``r = reduced + residual`` (fp32), ``residual_out = r``,
``norm_out = r * rsqrt(mean(r^2) + eps) * w``. Rows other ranks wrote are read with volatile loads
after ``wait_ge``'s acquire.

Reuse of the two halves (the README's "Reuse without races", for this order): rank A writes half
``par`` of peer B (data and signal words) for row t in its kernel with epoch e + 2, which starts only
after A's kernel with epoch e + 1 finished. That kernel finished row t only after B's kernel with
epoch e + 1 had sent a signal for row t (one-shot: A waits for B's push; two-shot: A waits for the
owner's all-gather, sent after the owner saw every rank's reduce-scatter push, or, if A owns t, for
every peer's push). B's kernel e + 1 started after B's kernel e finished (kernels on a stream run in
order), so B no longer reads half ``par`` of epoch e, and half e + 1 is never written at epoch e + 2.
The argument uses only the order of kernels on a rank, not the order of the phases inside one.
Epochs only grow, so a signal left by an earlier call never satisfies a later wait.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.compiler import ASTSource

from triton_raw_ext import dialect

DEVICE_FILE = "allreduce-device.cu"
POINTER_TYPES = {"bf16": "*bf16", "fp16": "*fp16"}


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def put_row(dst, src, nbytes, pe): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def complete_puts(): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def signal_set(sig, value, pe): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def wait_ge(sig, value, me, peer, timeout_ms): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def block_sync(): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def peer_offset(sym, pe): ...


@dialect(name="cuda", file=DEVICE_FILE, library="nvshmem")
def publish_stores(): ...


@triton.jit
def _peer(region, pe):
    """PE ``pe``'s copy of the symmetric ``region``, a pointer this program can store through: ``region``
    moved by the distance between the two copies, which the op checked is a multiple of 16 elements (so
    the stores keep ``region``'s 16-byte vectors)."""
    elem: tl.constexpr = region.dtype.element_ty.primitive_bitwidth // 8
    return region + tl.multiple_of(peer_offset(region, pe) // elem, 16)


@triton.jit
def _load_row(ptr, offs, mask, VOLATILE: tl.constexpr):
    return tl.load(ptr + offs, mask=mask, other=0.0, volatile=VOLATILE).to(tl.float32)


@triton.jit
def _epoch(cnt_ptr, row):
    """The row's epoch in this call (its counter is stored back only after the row's last phase)."""
    return tl.load(cnt_ptr + row) + 1


@triton.jit
def _slot(region, e, src, idx, NROWS, H, WORLD: tl.constexpr):
    """Row ``idx`` from rank ``src`` in half ``e % 2`` of a ``[2, WORLD, NROWS, H]`` landing region."""
    return region + (((e % 2) * WORLD + src) * NROWS + idx) * H


@triton.jit
def _signal(sig, e, src, row, MAX_T, WORLD: tl.constexpr):
    """Signal word (e % 2, src, row) of the ``[2, WORLD + 1, MAX_T]`` signals (src == WORLD: all-gather)."""
    return sig + ((e % 2) * (WORLD + 1) + src) * MAX_T + row


@triton.jit
def _ag_row(ag, e, row, MAX_T, H):
    """Row ``row`` in half ``e % 2`` of the ``[2, MAX_T, H]`` all-gather region."""
    return ag + ((e % 2) * MAX_T + row) * H


@triton.jit
def _finish_rows(reduced, rows, row_ok, res_ptr, norm_ptr, res_out_ptr, w, offs, mask, H, eps):
    """Residual add and RMSNorm of rows ``rows`` ([R], those with ``row_ok``) from their all-reduced
    values ``reduced`` ([R, BLOCK_H] fp32); stores both outputs."""
    dtype = res_ptr.dtype.element_ty
    m = row_ok[:, None] & mask[None, :]
    at = rows[:, None] * H + offs[None, :]
    r = reduced + tl.load(res_ptr + at, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32)
    tl.store(res_out_ptr + at, r.to(dtype), mask=m)
    inv = tl.rsqrt(tl.sum(r * r, axis=1) / H + eps)
    tl.store(norm_ptr + at, (r * inv[:, None] * w[None, :]).to(dtype), mask=m)


@triton.jit
def _finish_row(reduced, row, res_ptr, norm_ptr, res_out_ptr, w, offs, mask, H, eps):
    """:func:`_finish_rows` of the one row ``row`` (``reduced``: [BLOCK_H] fp32)."""
    one = tl.full([1], 0, tl.int64) + row
    _finish_rows(reduced[None, :], one, one >= 0, res_ptr, norm_ptr, res_out_ptr, w, offs, mask, H, eps)


@triton.jit
def _row_batch(j0, n_mine, pid, grid, cnt_ptr, mask, R: tl.constexpr):
    """Rows ``j0 .. j0 + R - 1`` of the program's rows ``pid, pid + grid, ...`` (``n_mine`` of them):
    their indices, which exist, their epochs and the [R, BLOCK_H] element mask."""
    jj = j0 + tl.arange(0, R)
    row_ok = jj < n_mine
    rows = (pid + jj * grid).to(tl.int64)
    e = tl.load(cnt_ptr + rows, mask=row_ok, other=0) + 1
    return rows, row_ok, e, row_ok[:, None] & mask[None, :]


@triton.jit
def _oneshot(
    x_ptr, res_ptr, norm_ptr, res_out_ptr, land, sig, cnt_ptr, w, offs, mask,
    T, H, eps, me, MAX_T, ROWS, row_bytes, wait_ms, WORLD: tl.constexpr, BLOCK_H: tl.constexpr,
    PUSH: tl.constexpr, R: tl.constexpr,
):  # fmt: skip
    """Phase 1: push every row to every peer, complete, signal. Phase 2: wait, sum in rank order, finish.
    Phase 2, and phase 1 with stores, take R rows of the program at a time (plan.Tuning.batch_rows);
    puts and signals go one row at a time."""
    pid = tl.program_id(0)
    grid = tl.num_programs(0)
    n_mine = (T - pid + grid - 1) // grid  # rows pid, pid + grid, ... below T
    if PUSH == 1:
        for j0 in range(0, n_mine, R):
            rows, row_ok, e, m = _row_batch(j0, n_mine, pid, grid, cnt_ptr, mask, R)
            v = tl.load(x_ptr + rows[:, None] * H + offs[None, :], mask=m, other=0.0)
            for i in tl.static_range(1, WORLD):
                dst = _slot(_peer(land, (me + i) % WORLD), e, me, rows, ROWS, H, WORLD)
                tl.store(dst[:, None] + offs[None, :], v, mask=m)
        publish_stores()
    else:
        for step in range(pid, T, grid):
            row = step.to(tl.int64)
            e = _epoch(cnt_ptr, row)
            for i in tl.static_range(1, WORLD):
                put_row(_slot(land, e, me, row, ROWS, H, WORLD), x_ptr + row * H, row_bytes, (me + i) % WORLD)
        complete_puts()
    for step in range(pid, T, grid):
        row = step.to(tl.int64)
        e = _epoch(cnt_ptr, row)
        for i in tl.static_range(1, WORLD):
            signal_set(_signal(sig, e, me, row, MAX_T, WORLD), e, (me + i) % WORLD)
    for j0 in range(0, n_mine, R):
        rows, row_ok, e, m = _row_batch(j0, n_mine, pid, grid, cnt_ptr, mask, R)
        acc = tl.zeros([R, BLOCK_H], dtype=tl.float32)
        for src in tl.static_range(WORLD):
            if src == me:
                v = tl.load(x_ptr + rows[:, None] * H + offs[None, :], mask=m, other=0.0)
            else:
                for r in tl.static_range(R):
                    if j0 + r < n_mine:
                        row = (pid + (j0 + r) * grid).to(tl.int64)
                        e_r = _epoch(cnt_ptr, row)
                        wait_ge(_signal(sig, e_r, src, row, MAX_T, WORLD), e_r, me, src, wait_ms)
                at = _slot(land, e, src, rows, ROWS, H, WORLD)[:, None] + offs[None, :]
                v = tl.load(at, mask=m, other=0.0, volatile=True)
            acc += v.to(tl.float32)
        tl.store(cnt_ptr + rows, e, mask=row_ok)
        reduced = acc.to(x_ptr.dtype.element_ty).to(tl.float32)
        _finish_rows(reduced, rows, row_ok, res_ptr, norm_ptr, res_out_ptr, w, offs, mask, H, eps)


@triton.jit
def _twoshot(
    x_ptr, res_ptr, norm_ptr, res_out_ptr, rs, ag, sig, cnt_ptr, w, offs, mask,
    T, H, eps, me, MAX_T, RS_ROWS, row_bytes, wait_ms, WORLD: tl.constexpr, PUSH: tl.constexpr,
):  # fmt: skip
    """Phase 1: reduce-scatter pushes. Phase 2: reduce the owned rows into the all-gather slots, push
    them to every peer. Phase 3: per row, wait for the all-gather, finish."""
    pid = tl.program_id(0)
    grid = tl.num_programs(0)
    for step in range(pid, T, grid):
        row = step.to(tl.int64)
        owner = (row % WORLD).to(tl.int32)
        if owner != me:
            e = _epoch(cnt_ptr, row)
            if PUSH == 1:
                dst = _slot(_peer(rs, owner), e, me, row // WORLD, RS_ROWS, H, WORLD)
                tl.store(dst + offs, tl.load(x_ptr + row * H + offs, mask=mask), mask=mask)
            else:
                put_row(_slot(rs, e, me, row // WORLD, RS_ROWS, H, WORLD), x_ptr + row * H, row_bytes, owner)
    if PUSH == 1:
        publish_stores()
    else:
        complete_puts()
    for step in range(pid, T, grid):
        row = step.to(tl.int64)
        owner = (row % WORLD).to(tl.int32)
        if owner != me:
            e = _epoch(cnt_ptr, row)
            signal_set(_signal(sig, e, me, row, MAX_T, WORLD), e, owner)
    for step in range(pid, T, grid):
        row = step.to(tl.int64)
        if row % WORLD == me:
            e = _epoch(cnt_ptr, row)
            acc = tl.zeros_like(offs).to(tl.float32)
            for src in tl.static_range(WORLD):
                if src == me:
                    v = _load_row(x_ptr + row * H, offs, mask, False)
                else:
                    wait_ge(_signal(sig, e, src, row, MAX_T, WORLD), e, me, src, wait_ms)
                    v = _load_row(_slot(rs, e, src, row // WORLD, RS_ROWS, H, WORLD), offs, mask, True)
                acc += v
            reduced = acc.to(ag.dtype.element_ty)
            tl.store(_ag_row(ag, e, row, MAX_T, H) + offs, reduced, mask=mask)
            if PUSH == 1:
                for i in tl.static_range(1, WORLD):
                    tl.store(_ag_row(_peer(ag, (me + i) % WORLD), e, row, MAX_T, H) + offs, reduced, mask=mask)
    if PUSH == 1:
        publish_stores()
    else:
        block_sync()  # the puts read all-gather rows that other threads of the block stored
        for step in range(pid, T, grid):
            row = step.to(tl.int64)
            if row % WORLD == me:
                ag_row = _ag_row(ag, _epoch(cnt_ptr, row), row, MAX_T, H)
                for i in tl.static_range(1, WORLD):
                    put_row(ag_row, ag_row, row_bytes, (me + i) % WORLD)
        complete_puts()
    for step in range(pid, T, grid):
        row = step.to(tl.int64)
        if row % WORLD == me:
            e = _epoch(cnt_ptr, row)
            for i in tl.static_range(1, WORLD):
                signal_set(_signal(sig, e, WORLD, row, MAX_T, WORLD), e, (me + i) % WORLD)
    for step in range(pid, T, grid):
        row = step.to(tl.int64)
        e = _epoch(cnt_ptr, row)
        if row % WORLD != me:
            wait_ge(_signal(sig, e, WORLD, row, MAX_T, WORLD), e, me, (row % WORLD).to(tl.int32), wait_ms)
        reduced = _load_row(_ag_row(ag, e, row, MAX_T, H), offs, mask, True)
        tl.store(cnt_ptr + row, e)
        _finish_row(reduced, row, res_ptr, norm_ptr, res_out_ptr, w, offs, mask, H, eps)


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
    wait_ms,
    WORLD: tl.constexpr,
    ALGO: tl.constexpr,
    BLOCK_H: tl.constexpr,
    PUSH: tl.constexpr,
    BATCH_ROWS: tl.constexpr,
):
    """See the module docstring. ALGO: 0 local, 1 one-shot, 2 two-shot (plan.Algorithm); PUSH: 0
    NVSHMEM puts, 1 stores through peer pointers (plan.Push); BATCH_ROWS: one-shot's row batch;
    wait_ms: the bound of each wait for a peer's signal (``triton_raw_ext.knobs.wait_timeout_ms()``)."""
    offs = tl.arange(0, BLOCK_H)
    mask = offs < H
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    row_bytes = H.to(tl.int64) * (x_ptr.dtype.element_ty.primitive_bitwidth // 8)
    if ALGO == 0:
        for step in range(tl.program_id(0), T, tl.num_programs(0)):
            row = step.to(tl.int64)
            reduced = tl.load(x_ptr + row * H + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(
                tl.float32
            )
            _finish_row(reduced, row, res_ptr, norm_ptr, res_out_ptr, w, offs, mask, H, eps)
    elif ALGO == 1:
        _oneshot(
            x_ptr, res_ptr, norm_ptr, res_out_ptr, land_ptr, sig_ptr, cnt_ptr, w, offs, mask,
            T, H, eps, me, MAX_T, ROWS, row_bytes, wait_ms, WORLD, BLOCK_H, PUSH, BATCH_ROWS,
        )  # fmt: skip
    else:
        _twoshot(
            x_ptr, res_ptr, norm_ptr, res_out_ptr, rs_ptr, ag_ptr, sig_ptr, cnt_ptr, w, offs, mask,
            T, H, eps, me, MAX_T, RS_ROWS, row_bytes, wait_ms, WORLD, PUSH,
        )  # fmt: skip


def kernel_source(
    algo: int, world: int, block_h: int, dtype: str, aligned: bool, push: int = 0, batch_rows: int = 1
) -> ASTSource:
    """The kernel specialised for one launch configuration, for ``triton.compile``.

    ``dtype``: "bf16" or "fp16". ``aligned``: every tensor pointer is 16-byte aligned and H is a
    multiple of 16; this lets Triton emit 16-byte loads and stores, and the op checks it at launch.
    ``push``: how rows reach peers (plan.Push; no effect at world 1). ``batch_rows``: rows a
    one-shot program handles at once (plan.Tuning.batch_rows; no effect on the other algorithms).
    """
    if dtype not in POINTER_TYPES:
        raise ValueError(f"dtype must be one of {sorted(POINTER_TYPES)}, got {dtype!r}")
    ptr = POINTER_TYPES[dtype]
    signature = {
        "x_ptr": ptr, "res_ptr": ptr, "w_ptr": ptr, "norm_ptr": ptr, "res_out_ptr": ptr,
        "land_ptr": ptr, "rs_ptr": ptr, "ag_ptr": ptr, "sig_ptr": "*i64", "cnt_ptr": "*i64",
        "T": "i32", "H": "i32", "eps": "fp32", "me": "i32", "MAX_T": "i32", "ROWS": "i32", "RS_ROWS": "i32",
        "wait_ms": "i32", "WORLD": "constexpr", "ALGO": "constexpr", "BLOCK_H": "constexpr", "PUSH": "constexpr",
        "BATCH_ROWS": "constexpr",
    }  # fmt: skip
    constexprs = {"WORLD": world, "ALGO": algo, "BLOCK_H": block_h, "PUSH": push, "BATCH_ROWS": batch_rows}
    names = list(signature)
    attrs = {}
    if aligned:
        divisible = [n for n in names if signature[n].startswith("*")] + ["H"]
        attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    return ASTSource(fused_allreduce_rmsnorm_kernel, signature=signature, constexprs=constexprs, attrs=attrs)
