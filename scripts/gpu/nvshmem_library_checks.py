"""The checks of scripts.gpu.nvshmem_library_suite: kernels calling triton_raw_ext.nvshmem, run by every PE.

Each family's check (:data:`FAMILIES`) runs its calls between PEs of one world and yields one
``(label, error or None)`` per case, ``label`` naming the call. Every PE runs the same checks in
the same order (allocations and collectives are collective), each kernel with one program of four
warps. PE ``me`` works with ``right = me + 1`` and ``left = me - 1`` (mod ``n``); values are small
integers, exact in every element type. The kernel under test is given as a constexpr (``CALL``), so
one kernel serves a family's calls. Needs triton_raw_ext.runtime initialised.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

import triton_raw_ext.nvshmem as shm
from triton_raw_ext import runtime
from triton_raw_ext.nvshmem.calls import (
    AMO_ADD_TYPES,
    AMO_BITWISE_TYPES,
    AMO_CSWAP_TYPES,
    AMO_FETCH_TYPES,
    REDUCE_OPS,
    TYPES,
    WAIT_TYPES,
)

Case = tuple[str, str | None]
# Triton dtype -> the torch dtype of a buffer for it (unsigned as the signed type of the same width:
# a call checks the width of a pointer's element type, not its sign).
TORCH = {"int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8,
         "uint16": torch.int16, "uint32": torch.int32, "uint64": torch.int64, "float16": torch.float16,
         "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}  # fmt: skip
# The element types the typed point-to-point and data-moving collective calls are run with (every
# type for reductions, waits and atomics).
SAMPLE_TYPES = ("char", "uchar", "short", "int", "long", "uint64", "half", "bfloat16", "float", "double")
NELEMS = 64
NUM_WARPS = 4
# Tensors of the elementwise cases: one element per thread. A smaller tensor is replicated across
# threads by Triton's layout, and each copy would make the call (an atomic twice).
PER_THREAD = NUM_WARPS * 32


@dataclass(frozen=True)
class Pes:
    me: int
    n: int

    @property
    def right(self) -> int:
        return (self.me + 1) % self.n

    @property
    def left(self) -> int:
        return (self.me - 1) % self.n


def torch_dtype(type_name: str) -> torch.dtype:
    return TORCH[TYPES[type_name].dtype]


def pattern(pe: int, count: int, dtype: torch.dtype, offset: int = 0) -> torch.Tensor:
    """PE ``pe``'s values: small integers (exact in 8-bit and 16-bit floats too), distinct per PE."""
    return ((torch.arange(count, device="cuda") + offset + 17 * pe) % 100).to(dtype)


class CompileOnly:
    """While active, the checks compile their kernels into Triton's cache instead of running them:
    no NVSHMEM, plain CUDA tensors, no barriers or expectations; launch number ``i`` is compiled only
    when ``i % shards == shard``, so processes can share the compiling. Kernels take PE numbers
    unspecialised, so one pass compiles what every PE of every world size launches."""

    active: CompileOnly | None = None

    def __init__(self, shard: int = 0, shards: int = 1) -> None:
        self.shard, self.shards, self.launches = shard, shards, 0

    def __enter__(self) -> CompileOnly:
        CompileOnly.active = self
        return self

    def __exit__(self, *exc: object) -> None:
        CompileOnly.active = None


def zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A symmetric tensor of zeros (a plain one when only compiling)."""
    if CompileOnly.active:
        return torch.zeros(shape, device="cuda", dtype=dtype)
    return runtime.zeros(shape, dtype)


def synced() -> None:
    if not CompileOnly.active:
        runtime.barrier_all()
    torch.cuda.synchronize()


def case(label: str, check: Callable[[], None]) -> Case:
    """Run one case on this PE: its label and None, or the error it raised (PEs stay in step either way)."""
    try:
        check()
        error = None
    except Exception as exc:  # noqa: BLE001 - reported per case; the next case still runs
        error = f"{type(exc).__name__}: {exc}"[:600]
    synced()
    return label, error


def expect_equal(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    if CompileOnly.active:
        return
    if not torch.equal(got.cpu(), want.cpu()):
        raise AssertionError(f"{what}: got {got.flatten()[:8].tolist()}, expected {want.flatten()[:8].tolist()}")


# --------------------------------------------------------------------------------------------------
# Kernels.
# --------------------------------------------------------------------------------------------------


@triton.jit
def query_kernel(out, buf):
    me = shm.my_pe()
    n = shm.n_pes()
    tl.store(out + 0, me)
    tl.store(out + 1, n)
    tl.store(out + 2, shm.team_my_pe(shm.TEAM_WORLD))
    tl.store(out + 3, shm.team_n_pes(shm.TEAM_WORLD))
    tl.store(out + 4, shm.team_translate_pe(shm.TEAM_WORLD, (me + 1) % n, shm.TEAM_NODE))
    tl.store(out + 5, tl.load(shm.ptr(buf, (me + 1) % n), volatile=True))


@triton.jit(do_not_specialize=["pe"])
def transfer_kernel(dest, source, count, pe, CALL: tl.constexpr, QUIET: tl.constexpr):
    CALL(dest, source, count, pe)
    if QUIET:
        shm.quiet()


@triton.jit(do_not_specialize=["value", "pe"])
def p_g_kernel(dest, source, out, value, pe, P: tl.constexpr, G: tl.constexpr):
    P(dest, value.to(dest.dtype.element_ty), pe)
    tl.store(out, G(source, pe))


@triton.jit(do_not_specialize=["pe"])
def elementwise_kernel(dest, source, got, pe, BLOCK: tl.constexpr):
    """Per-element p and g, putmem and getmem of one int each: BLOCK remote stores and loads."""
    offs = tl.arange(0, BLOCK)
    shm.int_p(dest + offs, tl.load(source + offs), pe)
    tl.store(got + offs, shm.int_g(source + offs, pe))
    shm.putmem(dest + BLOCK + offs, source + offs, 4, pe)
    shm.getmem(got + BLOCK + offs, source + offs, 4, pe)
    shm.quiet()


@triton.jit(do_not_specialize=["pe"])
def put_signal_kernel(dest, source, count, sig, out, value, pe, CALL: tl.constexpr, SIG_OP: tl.constexpr):
    CALL(dest, source, count, sig, value, SIG_OP, pe)
    tl.store(out, shm.signal_wait_until(sig, shm.CMP_EQ, value))


@triton.jit(do_not_specialize=["pe"])
def signal_op_kernel(sig, out, value, pe):
    shm.signal_op(sig, value, shm.SIGNAL_SET, pe)
    shm.signal_wait_until(sig, shm.CMP_GE, value)
    tl.store(out, shm.signal_fetch(sig))


@triton.jit(do_not_specialize=["value", "pe"])
def wait_kernel(flag, value, pe, P: tl.constexpr, WAIT: tl.constexpr):
    v = value.to(flag.dtype.element_ty)
    P(flag, v, pe)
    WAIT(flag, shm.CMP_EQ, v)


@triton.jit(do_not_specialize=["pe"])
def elementwise_wait_kernel(flags, value, pe, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    shm.int_p(flags + offs, value + offs, pe)
    shm.int_wait_until(flags + offs, shm.CMP_EQ, value + offs)


@triton.jit(do_not_specialize=["round_number", "pe"])
def ordering_kernel(data, flag, out, round_number, pe, QUIET: tl.constexpr, BLOCK: tl.constexpr):
    """A non-blocking put, then fence (or quiet), then a flag: who sees the flag sees the data."""
    shm.putmem_nbi(data, data + BLOCK, BLOCK * 4, pe)
    if QUIET:
        shm.quiet()
    else:
        shm.fence()
    shm.int_p(flag, round_number, pe)
    shm.int_wait_until(flag, shm.CMP_EQ, round_number)
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(data + offs, volatile=True))


@triton.jit
def barrier_kernel(slots, out, rounds, CALL: tl.constexpr, TEAMED: tl.constexpr, QUIET: tl.constexpr):
    """Each round: a p into the right PE's slot, the barrier, read the slot the left PE wrote, barrier."""
    me = shm.my_pe()
    n = shm.n_pes()
    for r in range(1, rounds + 1):
        shm.int_p(slots + me, r, (me + 1) % n)
        if QUIET:
            shm.quiet()  # syncs order no puts: complete them first
        if TEAMED:
            CALL(shm.TEAM_WORLD)
        else:
            CALL()
        tl.store(out + r, tl.load(slots + (me + n - 1) % n, volatile=True))
        if TEAMED:
            CALL(shm.TEAM_WORLD)
        else:
            CALL()


@triton.jit(do_not_specialize=["root"])
def collective_kernel(dest, source, count, root, out, CALL: tl.constexpr, ROOTED: tl.constexpr):
    if ROOTED:
        status = CALL(shm.TEAM_WORLD, dest, source, count, root)
    else:
        status = CALL(shm.TEAM_WORLD, dest, source, count)
    tl.store(out, status)


@triton.jit(do_not_specialize=["pe"])
def amo_kernel(cell, out, value, cond, pe, CALL: tl.constexpr, FORM: tl.constexpr):
    """FORM: 0 fetch-like (cell, pe) -> old, 1 inc (cell, pe), 2 (cell, value, pe) -> old,
    3 (cell, value, pe), 4 compare_swap (cell, cond, value, pe) -> old."""
    t = cell.dtype.element_ty
    if FORM == 0:
        tl.store(out, CALL(cell, pe))
    elif FORM == 1:
        CALL(cell, pe)
    elif FORM == 2:
        tl.store(out, CALL(cell, value.to(t), pe))
    elif FORM == 3:
        CALL(cell, value.to(t), pe)
    else:
        tl.store(out, CALL(cell, cond.to(t), value.to(t), pe))


@triton.jit(do_not_specialize=["pe"])
def elementwise_amo_kernel(cells, out, pe, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, shm.int_atomic_fetch_add(cells + offs, offs + 1, pe))


def launch(kernel, *args, **constexprs) -> None:
    compiling = CompileOnly.active
    if compiling is None:
        kernel[(1,)](*args, num_warps=NUM_WARPS, **constexprs)
        return
    compiling.launches += 1
    if (compiling.launches - 1) % compiling.shards == compiling.shard:
        kernel.warmup(*args, grid=(1,), num_warps=NUM_WARPS, **constexprs)


# --------------------------------------------------------------------------------------------------
# Checks, one per family.
# --------------------------------------------------------------------------------------------------


def check_query(pes: Pes) -> Iterator[Case]:
    buf = zeros((1,), torch.int32)
    buf.fill_(100 + pes.me)
    out = torch.zeros(8, device="cuda", dtype=torch.int32)
    synced()

    def run() -> None:
        launch(query_kernel, out, buf)
        torch.cuda.synchronize()
        want = [pes.me, pes.n, pes.me, pes.n, pes.right, 100 + pes.right]
        expect_equal(out[:6], torch.tensor(want, dtype=torch.int32), "my_pe, n_pes, team_my_pe, team_n_pes, "
                     "team_translate_pe, the right PE's value through ptr")

    yield case("my_pe n_pes team_my_pe team_n_pes team_translate_pe ptr", run)


def _transfer_case(pes: Pes, call: str, type_name: str | None) -> Case:
    """``call`` moves NELEMS values between this PE and the right one (put: into it; get: from it)."""
    dtype = torch_dtype(type_name) if type_name else torch.int32
    count = NELEMS if type_name else NELEMS * 4  # typed calls count elements, *mem calls bytes
    source = zeros((NELEMS,), dtype)
    dest = zeros((NELEMS,), dtype)
    source.copy_(pattern(pes.me, NELEMS, dtype))
    synced()
    get = "get" in call

    def run() -> None:
        launch(transfer_kernel, dest, source, count, pes.right, CALL=getattr(shm, call), QUIET="nbi" in call)
        synced()  # a put has landed in the right PE's dest
        expect_equal(dest, pattern(pes.right if get else pes.left, NELEMS, dtype), call)

    return case(call, run)


def check_rma(pes: Pes) -> Iterator[Case]:
    for op in ("putmem", "getmem", "putmem_nbi", "getmem_nbi"):
        for scope in ("", "_warp", "_block"):
            yield _transfer_case(pes, op + scope, None)
    for type_name in SAMPLE_TYPES:
        for op in ("put", "get", "put_nbi", "get_nbi"):
            for scope in ("", "_warp", "_block") if type_name == "int" else ("_block",):
                yield _transfer_case(pes, f"{type_name}_{op}{scope}", type_name)
    for type_name in TYPES:  # p and g of every type
        dtype = torch_dtype(type_name)
        dest, source = zeros((1,), dtype), zeros((1,), dtype)
        source.fill_(40 + pes.me)
        out = torch.zeros(1, device="cuda", dtype=dtype)
        synced()
        value = 20.0 + pes.me if dtype.is_floating_point else 20 + pes.me

        def run(dest=dest, source=source, out=out, value=value, dtype=dtype, type_name=type_name) -> None:
            launch(p_g_kernel, dest, source, out, value, pes.right, P=getattr(shm, f"{type_name}_p"),
                   G=getattr(shm, f"{type_name}_g"))
            synced()
            expect_equal(dest, torch.tensor([20 + pes.left], dtype=dtype), f"{type_name}_p")
            expect_equal(out, torch.tensor([40 + pes.right], dtype=dtype), f"{type_name}_g")

        yield case(f"{type_name}_p {type_name}_g", run)
    source, dest = zeros((PER_THREAD,), torch.int32), zeros((2 * PER_THREAD,), torch.int32)
    got = torch.zeros(2 * PER_THREAD, device="cuda", dtype=torch.int32)
    source.copy_(pattern(pes.me, PER_THREAD, torch.int32))
    synced()

    def elementwise() -> None:
        launch(elementwise_kernel, dest, source, got, pes.right, BLOCK=PER_THREAD)
        synced()
        expect_equal(dest, pattern(pes.left, PER_THREAD, torch.int32).repeat(2), "int_p and putmem per element")
        expect_equal(got, pattern(pes.right, PER_THREAD, torch.int32).repeat(2), "int_g and getmem per element")

    yield case("int_p int_g putmem getmem with tensor arguments", elementwise)


def _put_signal_case(pes: Pes, call: str, type_name: str | None, sig_op: str) -> Case:
    dtype = torch_dtype(type_name) if type_name else torch.int32
    count = NELEMS if type_name else NELEMS * 4
    source, dest = zeros((NELEMS,), dtype), zeros((NELEMS,), dtype)
    sig = zeros((1,), torch.int64)
    out = torch.zeros(1, device="cuda", dtype=torch.int64)
    source.copy_(pattern(pes.me, NELEMS, dtype))
    synced()

    def run() -> None:
        launch(put_signal_kernel, dest, source, count, sig, out, 42, pes.right, CALL=getattr(shm, call),
               SIG_OP=getattr(shm, sig_op).value)
        torch.cuda.synchronize()  # waited for the left PE's signal, so its data is here
        expect_equal(dest, pattern(pes.left, NELEMS, dtype), call)
        expect_equal(out, torch.tensor([42]), f"{call}: signal_wait_until's value")

    return case(f"{call} {sig_op}", run)


def check_signal(pes: Pes) -> Iterator[Case]:
    for op in ("putmem_signal", "putmem_signal_nbi"):
        for scope in ("", "_warp", "_block"):
            for sig_op in ("SIGNAL_SET", "SIGNAL_ADD"):
                yield _put_signal_case(pes, op + scope, None, sig_op)
    for type_name in SAMPLE_TYPES:
        for op in ("put_signal", "put_signal_nbi"):
            for scope in ("", "_warp", "_block") if type_name == "int" else ("_block",):
                yield _put_signal_case(pes, f"{type_name}_{op}{scope}", type_name, "SIGNAL_SET")
    sig = zeros((1,), torch.int64)
    out = torch.zeros(1, device="cuda", dtype=torch.int64)
    synced()

    def signal_op() -> None:
        launch(signal_op_kernel, sig, out, 77, pes.right)
        torch.cuda.synchronize()
        expect_equal(out, torch.tensor([77]), "signal_fetch after signal_op")

    yield case("signal_op signal_fetch signal_wait_until", signal_op)


def check_wait(pes: Pes) -> Iterator[Case]:
    for type_name in WAIT_TYPES:
        dtype = torch_dtype(type_name)
        flag = zeros((1,), dtype)
        synced()

        def run(flag=flag, dtype=dtype, type_name=type_name) -> None:
            launch(wait_kernel, flag, 9, pes.right, P=getattr(shm, f"{type_name}_p"),
                   WAIT=getattr(shm, f"{type_name}_wait_until"))
            torch.cuda.synchronize()
            expect_equal(flag, torch.tensor([9], dtype=dtype), f"{type_name}_wait_until")

        yield case(f"{type_name}_wait_until", run)
    flags = zeros((PER_THREAD,), torch.int32)
    synced()

    def elementwise() -> None:
        launch(elementwise_wait_kernel, flags, 5, pes.right, BLOCK=PER_THREAD)
        torch.cuda.synchronize()
        expect_equal(flags, torch.arange(PER_THREAD, dtype=torch.int32) + 5, "int_wait_until per element")

    yield case("int_wait_until with tensor arguments", elementwise)


def check_fence_quiet(pes: Pes) -> Iterator[Case]:
    for order, quiet in (("fence", False), ("quiet", True)):
        data = zeros((2 * NELEMS,), torch.int32)
        flag = zeros((1,), torch.int32)
        out = torch.zeros(NELEMS, device="cuda", dtype=torch.int32)
        synced()

        def run(data=data, flag=flag, out=out, quiet=quiet) -> None:
            for round_number in (1, 2, 3):  # new data each round: a stale copy cannot pass
                data[NELEMS:] = pattern(pes.me, NELEMS, torch.int32, offset=round_number)
                synced()
                launch(ordering_kernel, data, flag, out, round_number, pes.right, QUIET=quiet, BLOCK=NELEMS)
                synced()
                expect_equal(out, pattern(pes.left, NELEMS, torch.int32, offset=round_number),
                             f"data seen with the flag, round {round_number}")

        yield case(f"putmem_nbi, {order}, int_p, int_wait_until", run)


# (call, takes a team, needs a quiet first: a sync completes no puts)
SYNCS = (("barrier_all", False, False), ("sync_all", False, True), ("barrier", True, False), ("team_sync", True, True))


def check_sync(pes: Pes) -> Iterator[Case]:
    rounds = 4
    for name, teamed, quiet in SYNCS:
        for scope in ("", "_warp", "_block"):
            slots = zeros((pes.n,), torch.int32)
            out = torch.zeros(rounds + 1, device="cuda", dtype=torch.int32)
            synced()

            def run(slots=slots, out=out, call=name + scope, teamed=teamed, quiet=quiet) -> None:
                launch(barrier_kernel, slots, out, rounds, CALL=getattr(shm, call), TEAMED=teamed, QUIET=quiet)
                synced()
                expect_equal(out[1:], torch.arange(1, rounds + 1, dtype=torch.int32),
                             f"{call}: the left PE's rounds")

            yield case(name + scope, run)


def _collective_case(pes: Pes, call: str, type_name: str | None, kind: str) -> Case:
    """A broadcast, alltoall or fcollect over the world; ``count`` NELEMS elements (or their bytes) per PE."""
    dtype = torch_dtype(type_name) if type_name else torch.int32
    count = NELEMS if type_name else NELEMS * 4
    blocks = 1 if kind == "broadcast" else pes.n
    source = zeros((blocks * NELEMS,), dtype)
    dest = zeros((pes.n * NELEMS if kind != "broadcast" else NELEMS,), dtype)
    out = torch.full((1,), -1, device="cuda", dtype=torch.int32)
    source.copy_(pattern(pes.me, blocks * NELEMS, dtype))
    synced()
    root = pes.n - 1  # broadcasts from the last PE: a root other than PE 0

    def run() -> None:
        launch(collective_kernel, dest, source, count, root, out, CALL=getattr(shm, call), ROOTED=kind == "broadcast")
        synced()
        if kind == "broadcast":
            want = pattern(root, NELEMS, dtype)
        elif kind == "alltoall":  # block j of dest: block `me` of PE j's source
            want = torch.cat([pattern(j, NELEMS, dtype, offset=pes.me * NELEMS) for j in range(pes.n)])
        else:  # fcollect: every PE's first block
            want = torch.cat([pattern(j, NELEMS, dtype) for j in range(pes.n)])
        expect_equal(dest, want, call)
        expect_equal(out, torch.tensor([0], dtype=torch.int32), f"{call}'s status")

    return case(call, run)


def _data_collective_calls(kind: str) -> list[tuple[str, str | None]]:
    """(call, element type) of a broadcast, alltoall or fcollect family: the bytes forms, the typed block form."""
    return [(f"{kind}mem{scope}", None) for scope in ("", "_warp", "_block")] + \
        [(f"{t}_{kind}_block", t) for t in SAMPLE_TYPES]


def _data_collective_checks(kind: str) -> Callable[[Pes], Iterator[Case]]:
    def check(pes: Pes) -> Iterator[Case]:
        for call, type_name in _data_collective_calls(kind):
            yield _collective_case(pes, call, type_name, kind)

    return check


def _reduce_source(op: str, pe: int, dtype: torch.dtype) -> torch.Tensor:
    i = torch.arange(NELEMS, device="cuda")
    if op == "prod":
        values = 1 + (i + pe) % 2  # at most 2**n: fits int8 at 4 PEs
    elif op in ("and", "or", "xor"):
        values = ((i + pe) * 37) % 64
    else:
        values = (i * 3 + pe * 7) % 29
    return values.to(dtype)


def _reduce_expected(op: str, n: int, dtype: torch.dtype) -> torch.Tensor:
    parts = [_reduce_source(op, pe, dtype).to(torch.int64) for pe in range(n)]
    combine = {"sum": torch.add, "prod": torch.mul, "min": torch.minimum, "max": torch.maximum,
               "and": torch.bitwise_and, "or": torch.bitwise_or, "xor": torch.bitwise_xor}[op]  # fmt: skip
    result = parts[0]
    for part in parts[1:]:
        result = combine(result, part)
    return result.to(dtype)


def _reduce_calls(op: str) -> list[tuple[str, str]]:
    """(call, element type) of reduction ``op``: the block form of every type, thread and warp forms of two."""
    thread_and_warp = ("int32",) if op in ("and", "or", "xor") else ("int32", "float")
    return [(f"{t}_{op}_reduce_block", t) for t in REDUCE_OPS[op]] + \
        [(f"{t}_{op}_reduce{scope}", t) for t in thread_and_warp for scope in ("", "_warp")]


def _reduce_checks(op: str) -> Callable[[Pes], Iterator[Case]]:
    def check(pes: Pes) -> Iterator[Case]:
        for call, type_name in _reduce_calls(op):
            dtype = torch_dtype(type_name)
            source, dest = zeros((NELEMS,), dtype), zeros((NELEMS,), dtype)
            out = torch.full((1,), -1, device="cuda", dtype=torch.int32)
            source.copy_(_reduce_source(op, pes.me, dtype))
            synced()

            def run(source=source, dest=dest, out=out, dtype=dtype, call=call) -> None:
                launch(collective_kernel, dest, source, NELEMS, 0, out, CALL=getattr(shm, call), ROOTED=False)
                synced()
                expect_equal(dest, _reduce_expected(op, pes.n, dtype), call)

            yield case(call, run)

    return check


# op -> (types, kernel form, the cell after the left PE's op with value v on a cell holding c, returns the old value)
AMOS = {
    "fetch": (AMO_FETCH_TYPES, 0, lambda c, v: c, True), "set": (AMO_FETCH_TYPES, 3, lambda c, v: v, False),
    "swap": (AMO_FETCH_TYPES, 2, lambda c, v: v, True), "compare_swap": (AMO_CSWAP_TYPES, 4, lambda c, v: v, True),
    "fetch_inc": (AMO_ADD_TYPES, 0, lambda c, v: c + 1, True), "inc": (AMO_ADD_TYPES, 1, lambda c, v: c + 1, False),
    "fetch_add": (AMO_ADD_TYPES, 2, operator.add, True), "add": (AMO_ADD_TYPES, 3, operator.add, False),
    "fetch_and": (AMO_BITWISE_TYPES, 2, operator.and_, True), "and": (AMO_BITWISE_TYPES, 3, operator.and_, False),
    "fetch_or": (AMO_BITWISE_TYPES, 2, operator.or_, True), "or": (AMO_BITWISE_TYPES, 3, operator.or_, False),
    "fetch_xor": (AMO_BITWISE_TYPES, 2, operator.xor, True), "xor": (AMO_BITWISE_TYPES, 3, operator.xor, False),
}  # fmt: skip
# The cell's and the value's high bits for 64-bit integer types: an operation on 32 bits only is seen.
HIGH_BITS = 3 << 33


def check_atomics(pes: Pes) -> Iterator[Case]:
    for op, (types, form, after, fetches) in AMOS.items():
        for type_name in types:
            dtype = torch_dtype(type_name)
            high = HIGH_BITS if dtype == torch.int64 else 0
            cell_value, value = (12.0, 5.0) if dtype.is_floating_point else (12 + high, 5 + high)
            cell = zeros((1,), dtype)
            cell.fill_(cell_value)
            out = torch.zeros(1, device="cuda", dtype=dtype)
            synced()
            call, want = f"{type_name}_atomic_{op}", after(cell_value, value)

            def run(cell=cell, out=out, value=value, cond=cell_value, dtype=dtype, call=call, form=form, want=want,
                    fetches=fetches) -> None:
                launch(amo_kernel, cell, out, value, cond, pes.right, CALL=getattr(shm, call), FORM=form)
                synced()
                expect_equal(cell, torch.tensor([want], dtype=dtype), f"{call}: the cell the left PE updated")
                if fetches:
                    expect_equal(out, torch.tensor([cond], dtype=dtype), f"{call}: the right PE's old value")

            yield case(call, run)
    cells = zeros((PER_THREAD,), torch.int32)
    out = torch.zeros(PER_THREAD, device="cuda", dtype=torch.int32)
    synced()

    def elementwise() -> None:
        launch(elementwise_amo_kernel, cells, out, pes.right, BLOCK=PER_THREAD)
        synced()
        expect_equal(cells, torch.arange(1, PER_THREAD + 1, dtype=torch.int32), "int_atomic_fetch_add per element")
        expect_equal(out, torch.zeros(PER_THREAD, dtype=torch.int32), "the old values")

    yield case("int_atomic_fetch_add with tensor arguments", elementwise)


FAMILIES: dict[str, Callable[[Pes], Iterator[Case]]] = {
    "query": check_query, "rma": check_rma, "signal": check_signal, "wait": check_wait,
    "fence_quiet": check_fence_quiet, "barrier_sync": check_sync, "broadcast": _data_collective_checks("broadcast"),
    "alltoall": _data_collective_checks("alltoall"), "fcollect": _data_collective_checks("fcollect"),
    **{f"reduce_{op}": _reduce_checks(op) for op in REDUCE_OPS}, "atomics": check_atomics,
}  # fmt: skip


def collectives_used(families: list[str]) -> list[str]:
    """NVSHMEM symbols of the collectives ``families`` call: what the suite builds objects for up front."""
    names = [name + scope for name, _, _ in SYNCS for scope in ("", "_warp", "_block")] \
        if "barrier_sync" in families else []
    for kind in ("broadcast", "alltoall", "fcollect"):
        names += [call for call, _ in _data_collective_calls(kind)] if kind in families else []
    for op in REDUCE_OPS:
        names += [call for call, _ in _reduce_calls(op)] if f"reduce_{op}" in families else []
    return sorted({getattr(shm, name).call.symbol for name in names})
