"""The NVSHMEM device calls of :mod:`triton_raw_ext.nvshmem`: one table, built from NVSHMEM's type tables.

Each :class:`Call` is one NVSHMEM device function under its name without the ``nvshmem_`` /
``nvshmemx_`` prefix, with its C signature, the `.cu` file (``family``) its wrappers live in and how
it maps onto a Triton program (``scope``, see :data:`SCOPES`). :mod:`.generate` writes the wrappers
from this table; the package turns it into Python names. The type lists are NVSHMEM's (its
``NVSHMEMI_REPT_FOR_*_TYPES`` macros, 3.4.5 to 3.8); every signature here is checked against
NVSHMEM's own declaration when the wrappers compile (``SAME_SIGNATURE`` in the `.cu` files).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# How a call maps onto the threads of a Triton program (module docstring of triton_raw_ext.nvshmem).
THREAD, WARP, BLOCK, EVERY = "thread", "warp", "block", "every"
SCOPES = (THREAD, WARP, BLOCK, EVERY)


@dataclass(frozen=True)
class CType:
    """A C type of a signature: its spelling, and the Triton dtype of the value (for a pointer: of what
    it points to; None for ``void``)."""

    c: str
    dtype: str | None
    pointer: bool = False

    def ptr(self, const: bool = False) -> CType:
        return CType(f"{'const ' if const else ''}{self.c} *", self.dtype, True)


@dataclass(frozen=True)
class Call:
    """One NVSHMEM device function as the library offers it."""

    name: str  # the Python name: NVSHMEM's without its prefix
    symbol: str  # NVSHMEM's function
    family: str  # the generated `.cu` file (without `.cu`) holding its wrappers: a kernel links the whole file
    scope: str  # one of SCOPES
    ret: CType  # VOID for none
    params: tuple[tuple[str, CType], ...]
    collective: bool = False  # a collective over PEs: never applied elementwise
    type_name: str | None = None  # NVSHMEM's name of the element type, for typed calls
    invoke: str | None = None  # what the wrappers call instead of symbol(params), and why (`note`)
    note: str = ""

    @property
    def elementwise_wrapper(self) -> str | None:
        """The wrapper making the call in every thread that runs it (once per element with tensor
        arguments); None for warp, block and collective calls, which cannot be applied elementwise."""
        return f"shm_{self.name}" if self.scope in (THREAD, EVERY) and not self.collective else None

    @property
    def program_wrapper(self) -> str:
        """The wrapper making the call once per Triton program: by thread 0 (thread calls), warp 0 (warp
        calls), or every thread (block calls, and the every-thread queries and orderings)."""
        return f"shm_{self.name}" + {THREAD: "__thread0", WARP: "__warp0"}.get(self.scope, "")

    @property
    def repeatable(self) -> bool:
        """Whether making the call twice with the same arguments has the effect of making it once (not
        so for atomics that change memory, nor for signal updates, which may add)."""
        changes_atomically = self.family == "atomics" and not self.name.endswith("_atomic_fetch")
        return not changes_atomically and self.name != "signal_op" and "put_signal" not in self.name

    @property
    def signature(self) -> str:
        """The C type of a pointer to NVSHMEM's function, as ``SAME_SIGNATURE`` checks it."""
        return f"{self.ret.c} (*)({', '.join(t.c for _, t in self.params)})"


VOID = CType("void", None)
VOID_PTR, CONST_VOID_PTR = CType("void *", None, True), CType("const void *", None, True)
INT = CType("int", "int32")
SIZE = CType("size_t", "uint64")
UINT64 = CType("uint64_t", "uint64")
TEAM = CType("nvshmem_team_t", "int32")

# NVSHMEM's type names -> (C type, Triton dtype).
TYPES = {
    "bfloat16": CType("__nv_bfloat16", "bfloat16"), "half": CType("half", "float16"),
    "float": CType("float", "float32"), "double": CType("double", "float64"),
    "char": CType("char", "int8"), "schar": CType("signed char", "int8"), "short": CType("short", "int16"),
    "int": CType("int", "int32"), "long": CType("long", "int64"), "longlong": CType("long long", "int64"),
    "uchar": CType("unsigned char", "uint8"), "ushort": CType("unsigned short", "uint16"),
    "uint": CType("unsigned int", "uint32"), "ulong": CType("unsigned long", "uint64"),
    "ulonglong": CType("unsigned long long", "uint64"),
    "int8": CType("int8_t", "int8"), "int16": CType("int16_t", "int16"), "int32": CType("int32_t", "int32"),
    "int64": CType("int64_t", "int64"), "uint8": CType("uint8_t", "uint8"), "uint16": CType("uint16_t", "uint16"),
    "uint32": CType("uint32_t", "uint32"), "uint64": CType("uint64_t", "uint64"),
    "size": CType("size_t", "uint64"), "ptrdiff": CType("ptrdiff_t", "int64"),
}  # fmt: skip
RMA_TYPES = tuple(TYPES)  # NVSHMEMI_REPT_FOR_STANDARD_RMA_TYPES
WAIT_TYPES = ("short", "int", "long", "longlong", "ushort", "uint", "ulong", "ulonglong", "int32", "int64", "uint32",
              "uint64", "size", "ptrdiff")  # fmt: skip
BITWISE_REDUCE_TYPES = ("uchar", "ushort", "uint", "ulong", "ulonglong", "int8", "int16", "int32", "int64", "uint8",
                        "uint16", "uint32", "uint64", "size")  # fmt: skip
REDUCE_TYPES = (*BITWISE_REDUCE_TYPES, "char", "schar", "short", "int", "long", "longlong", "bfloat16", "half",
                "float", "double")  # fmt: skip
REDUCE_OPS = {"and": BITWISE_REDUCE_TYPES, "or": BITWISE_REDUCE_TYPES, "xor": BITWISE_REDUCE_TYPES,
              "min": REDUCE_TYPES, "max": REDUCE_TYPES, "sum": REDUCE_TYPES, "prod": REDUCE_TYPES}  # fmt: skip
# Atomic memory operations: NVSHMEM's device library defines each for these types only.
AMO_FETCH_TYPES = ("int", "long", "longlong", "uint", "ulong", "ulonglong", "int32", "int64", "uint32", "uint64",
                   "size", "ptrdiff", "float", "double")  # fetch, set, swap  # fmt: skip
AMO_CSWAP_TYPES = AMO_FETCH_TYPES[:-2]
AMO_ADD_TYPES = ("int", "long", "uint", "ulong", "ulonglong", "int32", "uint32", "uint64", "size")
AMO_BITWISE_TYPES = ("uint", "ulong", "ulonglong", "int32", "int64", "uint32", "uint64")
# Triton's LLVM (3.6, 3.8) fails an assertion in NVPTX instruction selection on NVSHMEM's half and
# bfloat16 p (a 16-bit value passed by value into its transfer code); the same 16 bits go as uint16.
SIXTEEN_BIT_P = "nvshmem_uint16_p((uint16_t *)dest, __builtin_bit_cast(uint16_t, value), pe)"
SIXTEEN_BIT_P_NOTE = ("made as nvshmem_uint16_p of the value's bits: Triton's LLVM cannot select instructions for "
                      "NVSHMEM's 16-bit float p")
# NVSHMEM's device atomics that act on 32 of a 64-bit type's bits (3.4-3.8: long swap; ulong fetch_add
# and the add, inc and fetch_inc made from it) are made as the same operation of the 64-bit integer
# type that NVSHMEM gets right, on the same bits.
SAME_BITS_AS = {("long", "swap"): "longlong",
                **{("ulong", op): "ulonglong" for op in ("fetch_add", "add", "fetch_inc", "inc")}}  # fmt: skip
# NVSHMEM before 3.8 returns a double swap's old bits converted to double as a number.
DOUBLE_SWAP = ("__builtin_bit_cast(double, nvshmem_ulonglong_atomic_swap((unsigned long long *)dest, "
               "__builtin_bit_cast(unsigned long long, value), pe))")
DOUBLE_SWAP_NOTE = ("made as nvshmem_ulonglong_atomic_swap of the value's bits: NVSHMEM before 3.8 returns the old "
                    "value's bits converted to double")
# Python scope -> (NVSHMEM name suffix, prefix): the thread form is nvshmem_<name>, the others nvshmemx_<name>_<scope>.
GROUPS = {THREAD: ("", "nvshmem_"), WARP: ("_warp", "nvshmemx_"), BLOCK: ("_block", "nvshmemx_")}


def _grouped(name: str, family: str, ret: CType, params: list[tuple[str, CType]], collective: bool = False,
             type_name: str | None = None) -> list[Call]:
    """``name`` in NVSHMEM's thread, warp and block forms (``<name>``, ``<name>_warp``, ``<name>_block``)."""
    return [Call(name + suffix, prefix + name + suffix, family, scope, ret, tuple(params), collective, type_name)
            for scope, (suffix, prefix) in GROUPS.items()]


def _query() -> list[Call]:
    team_query = [("team", TEAM)]
    return [
        Call("my_pe", "nvshmem_my_pe", "query", EVERY, INT, ()),
        Call("n_pes", "nvshmem_n_pes", "query", EVERY, INT, ()),
        Call("team_my_pe", "nvshmem_team_my_pe", "query", EVERY, INT, tuple(team_query)),
        Call("team_n_pes", "nvshmem_team_n_pes", "query", EVERY, INT, tuple(team_query)),
        Call("team_translate_pe", "nvshmem_team_translate_pe", "query", EVERY, INT,
             (("src_team", TEAM), ("src_pe", INT), ("dest_team", TEAM))),
        Call("ptr", "nvshmem_ptr", "query", EVERY, VOID_PTR, (("dest", CONST_VOID_PTR), ("pe", INT))),
    ]


def _rma() -> list[Call]:
    calls = []
    for op in ("putmem", "getmem", "putmem_nbi", "getmem_nbi"):
        params = [("dest", VOID_PTR), ("source", CONST_VOID_PTR), ("nelems", SIZE), ("pe", INT)]
        calls += _grouped(op, "rma", VOID, params)
    for type_name in RMA_TYPES:
        t = TYPES[type_name]
        for op in ("put", "get", "put_nbi", "get_nbi"):
            params = [("dest", t.ptr()), ("source", t.ptr(const=True)), ("nelems", SIZE), ("pe", INT)]
            calls += _grouped(f"{type_name}_{op}", op.removesuffix("_nbi"), VOID, params, type_name=type_name)
        p = Call(f"{type_name}_p", f"nvshmem_{type_name}_p", "rma", THREAD, VOID,
                 (("dest", t.ptr()), ("value", t), ("pe", INT)), type_name=type_name)
        if type_name in ("half", "bfloat16"):
            p = replace(p, invoke=SIXTEEN_BIT_P, note=SIXTEEN_BIT_P_NOTE)
        calls.append(p)
        calls.append(Call(f"{type_name}_g", f"nvshmem_{type_name}_g", "rma", THREAD, t,
                          (("source", t.ptr(const=True)), ("pe", INT)), type_name=type_name))
    return calls


def _signal() -> list[Call]:
    signal = [("sig_addr", UINT64.ptr()), ("signal", UINT64), ("sig_op", INT), ("pe", INT)]
    calls = []
    for op in ("putmem_signal", "putmem_signal_nbi"):
        calls += _grouped(op, "signal", VOID, [("dest", VOID_PTR), ("source", CONST_VOID_PTR), ("nelems", SIZE),
                                               *signal])
    for type_name in RMA_TYPES:
        t = TYPES[type_name]
        for op in ("put_signal", "put_signal_nbi"):
            calls += _grouped(f"{type_name}_{op}", "put_signal", VOID,
                              [("dest", t.ptr()), ("source", t.ptr(const=True)), ("nelems", SIZE), *signal],
                              type_name=type_name)
    calls += [
        Call("signal_op", "nvshmemx_signal_op", "signal", THREAD, VOID, tuple(signal)),
        Call("signal_fetch", "nvshmem_signal_fetch", "signal", THREAD, UINT64, (("sig_addr", UINT64.ptr()),)),
        Call("signal_wait_until", "nvshmem_signal_wait_until", "signal", THREAD, UINT64,
             (("sig_addr", UINT64.ptr()), ("cmp", INT), ("cmp_value", UINT64))),
    ]
    for type_name in WAIT_TYPES:
        t = TYPES[type_name]
        calls.append(Call(f"{type_name}_wait_until", f"nvshmem_{type_name}_wait_until", "signal", THREAD, VOID,
                          (("ivar", t.ptr()), ("cmp", INT), ("cmp_value", t)), type_name=type_name))
    return calls


def _ordering_and_sync() -> list[Call]:
    calls = [Call("fence", "nvshmem_fence", "sync", EVERY, VOID, ()),
             Call("quiet", "nvshmem_quiet", "sync", EVERY, VOID, ())]
    calls += _grouped("barrier_all", "sync", VOID, [], collective=True)
    calls += _grouped("sync_all", "sync", VOID, [], collective=True)
    calls += _grouped("barrier", "sync", INT, [("team", TEAM)], collective=True)
    calls += _grouped("team_sync", "sync", INT, [("team", TEAM)], collective=True)
    return calls


def _as_same_bits(call: Call, op: str, other: str) -> Call:
    """``call`` made as NVSHMEM's ``op`` of type ``other`` (same width), its arguments and result cast."""
    own, other_type = TYPES[call.type_name], TYPES[other]
    casts = {own.ptr(): other_type.ptr().c, own: other_type.c}
    args = ", ".join(f"({casts[t]}){name}" if t in casts else name for name, t in call.params)
    invoke = f"nvshmem_{other}_atomic_{op}({args})"
    return replace(call, invoke=f"({call.ret.c}){invoke}" if call.ret != VOID else invoke,
                   note=f"made as nvshmem_{other}_atomic_{op}: NVSHMEM's acts on 32 of the 64 bits")


def _atomics() -> list[Call]:
    calls = []

    def amo(op: str, types: tuple[str, ...], returns: bool, params) -> None:
        for type_name in types:
            t = TYPES[type_name]
            call = Call(f"{type_name}_atomic_{op}", f"nvshmem_{type_name}_atomic_{op}", "atomics", THREAD,
                        t if returns else VOID, tuple(params(t)), type_name=type_name)
            if (type_name, op) in SAME_BITS_AS:
                call = _as_same_bits(call, op, SAME_BITS_AS[type_name, op])
            elif (type_name, op) == ("double", "swap"):
                call = replace(call, invoke=DOUBLE_SWAP, note=DOUBLE_SWAP_NOTE)
            calls.append(call)

    amo("fetch", AMO_FETCH_TYPES, True, lambda t: [("source", t.ptr(const=True)), ("pe", INT)])
    amo("set", AMO_FETCH_TYPES, False, lambda t: [("dest", t.ptr()), ("value", t), ("pe", INT)])
    amo("swap", AMO_FETCH_TYPES, True, lambda t: [("dest", t.ptr()), ("value", t), ("pe", INT)])
    amo("compare_swap", AMO_CSWAP_TYPES, True, lambda t: [("dest", t.ptr()), ("cond", t), ("value", t), ("pe", INT)])
    amo("fetch_inc", AMO_ADD_TYPES, True, lambda t: [("dest", t.ptr()), ("pe", INT)])
    amo("inc", AMO_ADD_TYPES, False, lambda t: [("dest", t.ptr()), ("pe", INT)])
    for op, types in (("add", AMO_ADD_TYPES), ("and", AMO_BITWISE_TYPES), ("or", AMO_BITWISE_TYPES),
                      ("xor", AMO_BITWISE_TYPES)):
        amo(f"fetch_{op}", types, True, lambda t: [("dest", t.ptr()), ("value", t), ("pe", INT)])
        amo(op, types, False, lambda t: [("dest", t.ptr()), ("value", t), ("pe", INT)])
    return calls


def _collectives() -> list[Call]:
    calls = []
    for op, extra in (("broadcast", [("PE_root", INT)]), ("alltoall", []), ("fcollect", [])):
        calls += _grouped(f"{op}mem", op, INT,
                          [("team", TEAM), ("dest", VOID_PTR), ("source", CONST_VOID_PTR), ("nelems", SIZE), *extra],
                          collective=True)
        for type_name in RMA_TYPES:
            t = TYPES[type_name]
            calls += _grouped(f"{type_name}_{op}", op, INT,
                              [("team", TEAM), ("dest", t.ptr()), ("source", t.ptr(const=True)), ("nelems", SIZE),
                               *extra], collective=True, type_name=type_name)
    return calls


def _reductions() -> list[Call]:
    calls = []
    for op, types in REDUCE_OPS.items():
        for type_name in types:
            t = TYPES[type_name]
            calls += _grouped(f"{type_name}_{op}_reduce", f"reduce_{op}", INT,
                              [("team", TEAM), ("dest", t.ptr()), ("source", t.ptr(const=True)), ("nreduce", SIZE)],
                              collective=True, type_name=type_name)
    return calls


CALLS: tuple[Call, ...] = (*_query(), *_rma(), *_signal(), *_ordering_and_sync(), *_atomics(), *_collectives(),
                           *_reductions())
FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(call.family for call in CALLS))
