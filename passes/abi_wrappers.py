"""Pass `abi-wrappers`: give each exported device function the signature Triton calls.

Contract:

* **Exported** functions are the defined, externally visible ones: ``external`` linkage, or
  ``weak_odr`` (an explicit template instantiation, ``template __device__ float scale<float>(float,
  float);``), whose name does not start with ``__`` or ``llvm.`` and which are not kernels
  (``ptx_kernel``). C++ functions count under their mangled names (``_Z9VectorAddPfS_S_i``); the
  helpers a source keeps to itself do not: ``static`` functions and anonymous namespaces
  (``internal``), ``inline`` functions and implicit template instantiations (``linkonce_odr``).
  An exported ``weak_odr`` function becomes ``external`` (this library is its only definition) and
  gets its attributes inferred as clang does for other functions, so that its memory effects are
  known. ``functions`` replaces the rule with a list of names.
* For every exported ``@f`` the pass adds ``@f__triton`` with the types Triton's
  ``extern_elementwise`` passes: scalars as they are, pointers as ``i64``, the
  ``__half``/``__nv_bfloat16`` structs clang passes ``byval`` or directly as ``half``/``bfloat``.
* An address crosses as the generic address, as CUDA's ``(uintptr_t)p`` gives it: ``inttoptr`` for
  generic and global (``addrspace(1)``) pointers, whose generic address is the global one (Triton's
  pointers are global), ``addrspacecast`` through a generic pointer for the other spaces (shared
  ``addrspace(3)``, constant, local), whose pointers are offsets in a window of their own.
* Results: ``void`` becomes a dummy ``i32 0``; a scalar crosses as it is; a pointer as its ``i64``
  address (its pointee is not in the IR and is not this pass's business), recorded as ``"ptr"``
  when it is generic or global and as ``"i64"`` otherwise, so that it never becomes a Triton
  (global) pointer. A struct,
  returned directly or through an ``sret`` parameter, crosses as its scalar fields, flattened in
  declaration order (nested structs and arrays included; ``__half`` and ``__nv_bfloat16`` are
  scalars, pointers are ``i64``), packed low bits first into 64-bit words, a field never straddling
  two words. ``@f__triton`` returns word 0, ``@f__triton_w<k>`` word k. A struct of at most 64 bits
  (``{float, int}``, ``__half2``) is one word, so a call runs ``@f`` once; each further word runs
  ``@f`` again (Triton's optimizer merges the copies where it can), so wider structs are wrapped
  only for functions that write no memory and are not convergent. Unions and packed structs are
  not wrapped (the IR does not say which member is live, or which bytes are padding), nor structs
  with ``i1`` fields, which clang never emits (it stores ``bool`` fields as ``i8``).
* Wrappers are ``alwaysinline`` (and ``convergent`` when ``@f`` is); every other defined function
  becomes ``alwaysinline`` unless the source asked for ``noinline``, so that Triton's optimizer
  inlines the raw code as a region.
* A function whose types cannot cross is reported in ``WrapperReport.unsupported`` with the reason
  instead of wrapped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import llvmlite.binding as llvm

from .module_io import defined_functions, function_attributes, infer_function_attributes, parse
from .tool_pass import Option, OptionValues, ToolContext, ToolPass, names

WRAPPER_SUFFIX = "__triton"
WORD_BITS = 64
SCALAR_BITS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "float": 32, "double": 64, "half": 16,
               "bfloat": 16, "ptr": 64}  # fmt: skip
SCALAR_TYPES = tuple(t for t in SCALAR_BITS if t != "ptr")
GENERIC_OR_GLOBAL = ("ptr", "ptr addrspace(1)")
STRUCT_SCALARS = {"struct.__half": "half", "struct.__nv_bfloat16": "bfloat"}
EXPORTED_LINKAGES = (llvm.Linkage.external, llvm.Linkage.weak_odr)
_MEMORY = re.compile(r"\bmemory\(([^)]*)\)")
_RENAMED = re.compile(r"\.\d+$")


@dataclass
class WrappedFunction:
    """One exported function: what Triton calls and with which ABI types."""

    target: str  # the function in the module
    symbol: str  # the wrapper Triton calls (a struct result: the one returning word 0)
    ret: str  # "void", an ABI scalar type, "ptr" or "struct"
    params: list[tuple[str, str]]  # (parameter name, ABI type: a scalar type or "ptr")
    pure: bool  # no memory effects and not convergent: Triton may CSE or drop the call
    fields: list[tuple[str, int, int]] = field(default_factory=list)  # struct: (ABI type, word, bit offset)
    words: list[str] = field(default_factory=list)  # struct: the wrapper returning each word; words[0] == symbol


@dataclass
class WrapperReport:
    wrapped: list[WrappedFunction] = field(default_factory=list)
    unsupported: dict[str, str] = field(default_factory=dict)  # function -> reason


def _type_name(ty: llvm.TypeRef) -> str:
    return ty.name if ty.is_struct else str(ty)


def _struct_scalar(name: str) -> str | None:
    """``half``/``bfloat`` for the struct types of ``__half``/``__nv_bfloat16``, else None.

    LLVM names a struct type ``struct.__half.<n>`` when its context already holds ``struct.__half``
    (the process parsed another source before), so that suffix is ignored.
    """
    return STRUCT_SCALARS.get(_RENAMED.sub("", name))


def _ir_type(ty: llvm.TypeRef) -> str:
    """How the type is spelled in IR text: ``%struct.x`` for named structs, else as printed."""
    return f"%{ty.name}" if ty.is_struct and ty.name else str(ty)


def _is_pointer(ty: str) -> bool:
    return ty == "ptr" or ty.startswith("ptr addrspace(")


def _from_address(address: str, value: str, ty: str) -> list[str]:
    """IR lines making ``value``, of pointer type ``ty``, from the generic ``i64`` ``address``."""
    if ty in GENERIC_OR_GLOBAL:
        return [f"  {value} = inttoptr i64 {address} to {ty}"]
    return [f"  {value}.gen = inttoptr i64 {address} to ptr", f"  {value} = addrspacecast ptr {value}.gen to {ty}"]


def _to_address(value: str, ty: str, address: str) -> list[str]:
    """IR lines making ``address``, the generic ``i64`` address of ``value``, of pointer type ``ty``."""
    if ty in GENERIC_OR_GLOBAL:
        return [f"  {address} = ptrtoint {ty} {value} to i64"]
    return [f"  {value}.gen = addrspacecast {ty} {value} to ptr", f"  {address} = ptrtoint ptr {value}.gen to i64"]


def _abi_param(arg: llvm.ValueRef, index: int) -> tuple[str, list[str], str]:
    """(ABI type, IR lines converting %p<index> into the callee's argument, call operand)."""
    attrs = [a.decode() for a in arg.attributes]
    ty = str(arg.type)
    byval = next((a for a in attrs if a.startswith("byval(")), None)
    p, a = f"%p{index}", f"%a{index}"
    if byval:
        struct = byval[len("byval(") : -1].lstrip("%")
        abi = _struct_scalar(struct)
        if abi is None:
            shown = re.sub(r"\.\d+$", "", struct)  # LLVM numbers a type name again in each module it parses
            raise TypeError(f"parameter {arg.name or index!r} is a struct passed by value (%{shown}), which Triton "
                            f"cannot pass; take its fields as separate parameters (a __half2 as two __half), or a "
                            f"pointer to it")
        align = next((x for x in attrs if x.startswith("align ")), "align 2")
        lines = [
            f"  {a} = alloca %{struct}, {align}",
            f"  {a}.bits = bitcast {abi} {p} to i16",
            f"  {a}.val = insertvalue %{struct} poison, i16 {a}.bits, 0",
            f"  store %{struct} {a}.val, ptr {a}, {align}",
        ]
        return abi, lines, f"ptr byval(%{struct}) {align} {a}"
    if _is_pointer(ty):
        return "ptr", _from_address(p, a, ty), f"{ty} {a}"
    struct = _type_name(arg.type)
    if arg.type.is_struct and (abi := _struct_scalar(struct)):
        lines = [f"  {a}.bits = bitcast {abi} {p} to i16", f"  {a} = insertvalue %{struct} poison, i16 {a}.bits, 0"]
        return abi, lines, f"%{struct} {a}"
    if ty in SCALAR_TYPES:
        return ty, [], f"{ty} {p}"
    raise TypeError(f"parameter {index} has IR type {ty}, which Triton cannot pass")


def _leaves(ty: llvm.TypeRef, path: tuple[int, ...]) -> list[tuple[str, str, tuple[int, ...]]]:
    """The scalar fields of a struct or array type: (ABI type, IR type, extractvalue indices).

    For ``__half``/``__nv_bfloat16`` the indices reach the ``i16`` inside the struct.
    """
    name = _type_name(ty)
    if ty.is_struct and (abi := _struct_scalar(name)):
        return [(abi, "i16", (*path, 0))]
    if ty.is_struct:
        if name.startswith("union."):
            raise TypeError(f"it returns %{name}, a union, whose active member the IR does not say")
        if ty.is_packed_struct:
            raise TypeError(f"it returns the packed struct {_ir_type(ty)}, whose padding cannot be told from fields")
        return [leaf for i, element in enumerate(ty.elements) for leaf in _leaves(element, (*path, i))]
    if ty.is_array:
        element = next(iter(ty.elements))
        return [leaf for i in range(ty.element_count) for leaf in _leaves(element, (*path, i))]
    text = str(ty)
    if text in SCALAR_TYPES and text != "i1":  # clang stores bool fields as i8
        return [(text, text, path)]
    if _is_pointer(text):
        return [("ptr", text, path)]
    raise TypeError(f"it returns a struct with a field of IR type {text}, which Triton cannot receive")


def _pack(leaves: list[tuple[str, str, tuple[int, ...]]]) -> list[tuple[str, int, int]]:
    """Place each field in a 64-bit word, low bits first, never across two words."""
    fields, word, offset = [], 0, 0
    for abi, _, _ in leaves:
        bits = SCALAR_BITS[abi]
        if offset + bits > WORD_BITS:
            word, offset = word + 1, 0
        fields.append((abi, word, offset))
        offset += bits
    return fields


def _word_lines(struct_ty: str, leaves: list[tuple[str, str, tuple[int, ...]]],
                fields: list[tuple[str, int, int]], word: int) -> list[str]:
    """IR lines that pack the fields of ``word`` from the struct value ``%r`` and return it."""
    lines, value = [], ""
    for k, ((abi, ir, path), (_, w, offset)) in enumerate(zip(leaves, fields, strict=True)):
        if w != word:
            continue
        part, bits = f"%f{k}", f"i{SCALAR_BITS[abi]}"
        lines.append(f"  {part} = extractvalue {struct_ty} %r, {', '.join(map(str, path))}")
        if _is_pointer(ir):
            lines += _to_address(part, ir, f"{part}.bits")
            part += ".bits"
        elif ir in ("float", "double", "half", "bfloat"):
            lines.append(f"  {part}.bits = bitcast {ir} {part} to {bits}")
            part += ".bits"
        if bits != "i64":
            lines.append(f"  %f{k}.z = zext {bits} {part} to i64")
            part = f"%f{k}.z"
        if offset:
            lines.append(f"  %f{k}.s = shl i64 {part}, {offset}")
            part = f"%f{k}.s"
        if value:
            lines.append(f"  %f{k}.w = or i64 {value}, {part}")
            part = f"%f{k}.w"
        value = part
    return [*lines, f"  ret i64 {value}"]


def _writes_memory(fn_attrs: str) -> bool:
    effects = _MEMORY.search(fn_attrs)
    return effects is None or "write" in effects.group(1)


class _Wrapper:
    """The pieces every wrapper of one function shares: its parameters, their conversion, the call."""

    def __init__(self, fn: llvm.ValueRef) -> None:
        self.params: list[tuple[str, str]] = []
        self.body: list[str] = []
        self.sret: tuple[str, str] | None = None  # (struct type, align) of an sret parameter
        operands = []
        for i, arg in enumerate(fn.arguments):
            attrs = [a.decode() for a in arg.attributes]
            marker = next((a for a in attrs if a.startswith("sret(")), None)
            if marker:
                self.sret = marker[len("sret(") : -1], next((x for x in attrs if x.startswith("align ")), "align 8")
                self.body.append(f"  %ret = alloca {self.sret[0]}, {self.sret[1]}")
                operands.append(f"ptr {marker} {self.sret[1]} %ret")
                continue
            abi, lines, operand = _abi_param(arg, len(self.params))
            self.params.append((arg.name or f"arg{i}", abi))
            self.body += lines
            operands.append(operand)
        self.call = f"@{fn.name}({', '.join(operands)})"
        fn_attrs = function_attributes(fn)
        self.convergent = "convergent" in fn_attrs.split()
        self.pure = "memory(none)" in fn_attrs and not self.convergent
        self.writes = _writes_memory(fn_attrs)

    def define(self, ret: str, name: str, lines: list[str]) -> str:
        signature = ", ".join(f"{'i64' if abi == 'ptr' else abi} %p{i}" for i, (_, abi) in enumerate(self.params))
        attrs = "alwaysinline nounwind" + (" convergent" if self.convergent else "")
        return "\n".join([f"define {ret} @{name}({signature}) {attrs} {{", "entry:", *self.body, *lines, "}"])


def _struct_wrappers(fn: llvm.ValueRef, w: _Wrapper, symbol: str,
                     structs: dict[str, llvm.TypeRef]) -> tuple[WrappedFunction, list[str]]:
    """The word wrappers of a function returning a struct, directly or through its sret parameter."""
    if w.sret is not None:
        struct_ty, align = w.sret
        if struct_ty.lstrip("%") not in structs:
            raise TypeError(f"it returns {struct_ty} through an sret parameter, which Triton cannot receive")
        struct = structs[struct_ty.lstrip("%")]
        result = [f"  call void {w.call}", f"  %r = load {struct_ty}, ptr %ret, {align}"]
    else:
        struct, *_ = fn.global_value_type.elements
        struct_ty = _ir_type(struct)
        result = [f"  %r = call {struct_ty} {w.call}"]
    leaves = _leaves(struct, ())
    if not leaves:
        raise TypeError(f"it returns {struct_ty}, a struct without fields")
    fields = _pack(leaves)
    count = fields[-1][1] + 1
    if count > 1 and (w.writes or w.convergent):
        raise TypeError(f"it returns {struct_ty}, whose fields fill {count} 64-bit words: each word would run the "
                        f"function again, and it writes memory or is convergent; return at most 64 bits of fields")
    words = [symbol] + [f"{symbol}_w{k}" for k in range(1, count)]
    texts = [w.define("i64", name, result + _word_lines(struct_ty, leaves, fields, k)) for k, name in enumerate(words)]
    return WrappedFunction(fn.name, symbol, "struct", w.params, w.pure, fields, words), texts


def _wrappers(fn: llvm.ValueRef, symbol: str, structs: dict[str, llvm.TypeRef]) -> tuple[WrappedFunction, list[str]]:
    """The wrapper info and the IR text of each wrapper function of ``fn``."""
    w = _Wrapper(fn)
    ret_ty, *_ = fn.global_value_type.elements
    ret = _type_name(ret_ty)
    if w.sret is not None or (ret_ty.is_struct and not _struct_scalar(ret)):
        return _struct_wrappers(fn, w, symbol, structs)
    if abi := _struct_scalar(ret):
        lines = [f"  %r = call %{ret} {w.call}", f"  %r.bits = extractvalue %{ret} %r, 0",
                 f"  %r.val = bitcast i16 %r.bits to {abi}", f"  ret {abi} %r.val"]
        return WrappedFunction(fn.name, symbol, abi, w.params, w.pure), [w.define(abi, symbol, lines)]
    if ret == "void":
        lines = [f"  call void {w.call}", "  ret i32 0"]
        return WrappedFunction(fn.name, symbol, "void", w.params, w.pure), [w.define("i32", symbol, lines)]
    if _is_pointer(ret):
        lines = [f"  %r = call {ret} {w.call}", *_to_address("%r", ret, "%r.addr"), "  ret i64 %r.addr"]
        abi = "ptr" if ret in GENERIC_OR_GLOBAL else "i64"
        return WrappedFunction(fn.name, symbol, abi, w.params, w.pure), [w.define("i64", symbol, lines)]
    if ret in SCALAR_TYPES:
        lines = [f"  %r = call {ret} {w.call}", f"  ret {ret} %r"]
        return WrappedFunction(fn.name, symbol, ret, w.params, w.pure), [w.define(ret, symbol, lines)]
    raise TypeError(f"it returns IR type {ret}, which Triton cannot receive")


def _is_kernel(fn: llvm.ValueRef) -> bool:
    """A ``__global__`` function: its ``define`` line has the ``ptx_kernel`` calling convention."""
    header = next(line for line in str(fn).splitlines() if line.startswith("define "))
    return "ptx_kernel" in header.split("@", 1)[0]


def _is_exported(fn: llvm.ValueRef) -> bool:
    return (fn.linkage in EXPORTED_LINKAGES and not fn.name.startswith(("__", "llvm."))
            and not _is_kernel(fn))  # fmt: skip


def _not_callable(fn: llvm.ValueRef) -> str | None:
    """Why a visible function a user may name is not exported (None for the rest)."""
    if fn.linkage not in EXPORTED_LINKAGES or fn.name.startswith("llvm."):
        return None
    if _is_kernel(fn):
        return ("it is a __global__ kernel, which a Triton kernel cannot call; make it a __device__ function "
                "(the Triton kernel is the launch)")
    if fn.name.startswith("__"):
        return "names starting with __ are reserved for CUDA and the compiler; rename it"
    return None


def _declaration(fn: llvm.ValueRef) -> str:
    ret_ty, *param_tys = fn.global_value_type.elements
    params = ", ".join(_ir_type(t) for t in param_tys)
    return f"declare {_ir_type(ret_ty)} @{fn.name}({params})"


def abi_wrappers(mod: llvm.ModuleRef, functions: list[str] | None = None) -> WrapperReport:
    """Add the ``<name>__triton`` wrappers of each exported function; see the module docstring."""
    report = WrapperReport()
    candidates = [f for f in defined_functions(mod) if (f.name in functions if functions else _is_exported(f))]
    if not functions:
        for fn in defined_functions(mod):
            reason = _not_callable(fn)
            if reason:
                report.unsupported[fn.name] = reason
    if functions:
        missing = sorted(set(functions) - {f.name for f in candidates})
        if missing:
            raise ValueError(f"abi-wrappers: no defined function named {', '.join(missing)}")
    instantiations = [f for f in candidates if f.linkage == llvm.Linkage.weak_odr]
    for fn in instantiations:
        fn.linkage = llvm.Linkage.external
    if instantiations:
        infer_function_attributes(mod)
    structs = {t.name: t for t in mod.struct_types}
    pieces: list[str] = []
    for fn in candidates:
        try:
            info, texts = _wrappers(fn, fn.name + WRAPPER_SUFFIX, structs)
        except TypeError as e:
            report.unsupported[fn.name] = str(e)
            continue
        report.wrapped.append(info)
        pieces += [*texts, _declaration(fn)]
    for fn in defined_functions(mod):
        attrs = function_attributes(fn).split()
        if "noinline" not in attrs and "alwaysinline" not in attrs:
            fn.add_function_attribute("alwaysinline")
    if pieces:
        types = [str(t) for t in mod.struct_types if not t.is_literal_struct]
        header = [f'target datalayout = "{mod.data_layout}"', f'target triple = "{mod.triple}"', *types]
        mod.link_in(parse("\n".join(header + pieces), "<abi wrappers>"))
    return report


def _run(mod: llvm.ModuleRef, options: OptionValues, context: ToolContext) -> list[str]:
    report = abi_wrappers(mod, options["functions"])
    lines = [f"wrapped {w.target} as {', '.join(w.words or [w.symbol])}" for w in report.wrapped]
    return lines + [f"cannot wrap {fn}: {reason}" for fn, reason in report.unsupported.items()]


ABI_WRAPPERS_PASS = ToolPass(
    "abi-wrappers", (Option("functions", "functions to wrap (default: exported)", names),), run=_run
)
