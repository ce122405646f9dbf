"""Pass `abi-wrappers`: give each exported device function the signature Triton calls.

Triton's ``extern_elementwise`` passes pointers as ``i64`` (``int64`` tensors), half/bfloat values
as ``half``/``bfloat``, and needs a value back even from a ``void`` function. For every exported
function ``@f`` this pass adds ``@f__triton`` that converts (``inttoptr`` for pointers, the
``__half``/``__nv_bfloat16`` structs clang passes ``byval``, a dummy ``i32 0`` for ``void``) and
calls ``@f``. Wrappers and every other defined function are marked ``alwaysinline`` (unless the
source asked for ``noinline``) so that Triton's optimizer inlines the raw code as a region.

Exported functions are the defined, externally visible functions with C names (not starting with
``_Z``, ``__`` or ``llvm.``), unless a list is given. A function whose types cannot cross the
boundary is reported in ``WrapperReport.unsupported`` with the reason instead of wrapped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import llvmlite.binding as llvm

from .module_io import defined_functions, function_attributes, parse

WRAPPER_SUFFIX = "__triton"
SCALAR_TYPES = ("i1", "i8", "i16", "i32", "i64", "float", "double", "half", "bfloat")
STRUCT_SCALARS = {"struct.__half": "half", "struct.__nv_bfloat16": "bfloat"}
EXTERNAL_LINKAGES = (llvm.Linkage.external,)


@dataclass
class WrappedFunction:
    """One exported function: what Triton calls and with which ABI types."""

    target: str  # the function in the module
    symbol: str  # the wrapper Triton calls
    ret: str  # "void" or an ABI scalar type
    params: list[tuple[str, str]]  # (parameter name, ABI type: a scalar type or "ptr")
    pure: bool  # no memory effects and not convergent: Triton may CSE or drop the call


@dataclass
class WrapperReport:
    wrapped: list[WrappedFunction] = field(default_factory=list)
    unsupported: dict[str, str] = field(default_factory=dict)  # function -> reason


def _type_name(ty: llvm.TypeRef) -> str:
    return ty.name if ty.is_struct else str(ty)


def _ir_type(ty: llvm.TypeRef) -> str:
    """How the type is spelled in IR text: ``%struct.x`` for named structs, else as printed."""
    return f"%{ty.name}" if ty.is_struct else str(ty)


def _abi_param(fn_name: str, arg: llvm.ValueRef, index: int) -> tuple[str, list[str], str]:
    """(ABI type, IR lines converting %p<index> into the callee's argument, call operand)."""
    attrs = [a.decode() for a in arg.attributes]
    ty = str(arg.type)
    byval = next((a for a in attrs if a.startswith("byval(")), None)
    p, a = f"%p{index}", f"%a{index}"
    if byval:
        struct = byval[len("byval(") : -1].lstrip("%")
        if struct not in STRUCT_SCALARS:
            raise TypeError(f"parameter {index} is passed byval as %{struct}, which Triton cannot pass")
        abi = STRUCT_SCALARS[struct]
        align = next((x for x in attrs if x.startswith("align ")), "align 2")
        lines = [
            f"  {a} = alloca %{struct}, {align}",
            f"  {a}.bits = bitcast {abi} {p} to i16",
            f"  {a}.val = insertvalue %{struct} poison, i16 {a}.bits, 0",
            f"  store %{struct} {a}.val, ptr {a}, {align}",
        ]
        return abi, lines, f"ptr byval(%{struct}) {align} {a}"
    if ty == "ptr" or ty.startswith("ptr addrspace("):
        return "ptr", [f"  {a} = inttoptr i64 {p} to {ty}"], f"{ty} {a}"
    if arg.type.is_struct and _type_name(arg.type) in STRUCT_SCALARS:
        struct = _type_name(arg.type)
        abi = STRUCT_SCALARS[struct]
        lines = [f"  {a}.bits = bitcast {abi} {p} to i16", f"  {a} = insertvalue %{struct} poison, i16 {a}.bits, 0"]
        return abi, lines, f"%{struct} {a}"
    if ty in SCALAR_TYPES:
        return ty, [], f"{ty} {p}"
    raise TypeError(f"parameter {index} has IR type {ty}, which Triton cannot pass")


def _abi_return(ty: llvm.TypeRef) -> tuple[str, str]:
    """(ABI type, IR type of the callee's result)."""
    if ty.is_struct and _type_name(ty) in STRUCT_SCALARS:
        return STRUCT_SCALARS[_type_name(ty)], f"%{_type_name(ty)}"
    text = str(ty)
    if text == "void" or text in SCALAR_TYPES:
        return text, text
    raise TypeError(f"it returns IR type {text}, which Triton cannot receive")


def _wrapper_ir(fn: llvm.ValueRef, symbol: str) -> tuple[WrappedFunction, str]:
    ret_ty, *_ = fn.global_value_type.elements
    abi_ret, callee_ret = _abi_return(ret_ty)
    params, body, operands = [], [], []
    for i, arg in enumerate(fn.arguments):
        abi, lines, operand = _abi_param(fn.name, arg, i)
        params.append((arg.name or f"arg{i}", abi))
        body += lines
        operands.append(operand)
    wrapper_ret = "i32" if abi_ret == "void" else abi_ret
    signature = ", ".join(f"{'i64' if abi == 'ptr' else abi} %p{i}" for i, (_, abi) in enumerate(params))
    call = f"call {callee_ret} @{fn.name}({', '.join(operands)})"
    if abi_ret == "void":
        body += [f"  {call}", "  ret i32 0"]
    elif callee_ret.startswith("%"):
        body += [f"  %r = {call}", f"  %r.bits = extractvalue {callee_ret} %r, 0",
                 f"  %r.val = bitcast i16 %r.bits to {abi_ret}", f"  ret {abi_ret} %r.val"]
    else:
        body += [f"  %r = {call}", f"  ret {abi_ret} %r"]
    fn_attrs = function_attributes(fn)
    convergent = "convergent" in fn_attrs.split()
    attrs = "alwaysinline nounwind" + (" convergent" if convergent else "")
    text = "\n".join([f"define {wrapper_ret} @{symbol}({signature}) #0 {{", "entry:", *body, "}",
                      f"attributes #0 = {{ {attrs} }}"])
    pure = "memory(none)" in fn_attrs and not convergent
    return WrappedFunction(fn.name, symbol, abi_ret, params, pure), text


def _is_exported(fn: llvm.ValueRef) -> bool:
    name = fn.name
    return fn.linkage in EXTERNAL_LINKAGES and not name.startswith(("_Z", "__", "llvm."))


def _declaration(fn: llvm.ValueRef) -> str:
    ret_ty, *param_tys = fn.global_value_type.elements
    params = ", ".join(_ir_type(t) for t in param_tys)
    return f"declare {_ir_type(ret_ty)} @{fn.name}({params})"


def abi_wrappers(mod: llvm.ModuleRef, functions: list[str] | None = None) -> WrapperReport:
    """Add a ``<name>__triton`` wrapper for each exported function; see the module docstring."""
    report = WrapperReport()
    candidates = [f for f in defined_functions(mod) if (f.name in functions if functions else _is_exported(f))]
    if functions:
        missing = sorted(set(functions) - {f.name for f in candidates})
        if missing:
            raise ValueError(f"abi-wrappers: no defined function named {', '.join(missing)}")
    pieces: list[str] = []
    structs = sorted({f"%{t.name} = type {{ i16 }}" for t in mod.struct_types if t.name in STRUCT_SCALARS})
    for fn in candidates:
        try:
            info, text = _wrapper_ir(fn, fn.name + WRAPPER_SUFFIX)
        except TypeError as e:
            report.unsupported[fn.name] = str(e)
            continue
        report.wrapped.append(info)
        pieces.append(text.replace("#0", f"#{len(pieces)}"))
        pieces.append(_declaration(fn))
    for fn in defined_functions(mod):
        attrs = function_attributes(fn).split()
        if "noinline" not in attrs and "alwaysinline" not in attrs:
            fn.add_function_attribute("alwaysinline")
    if pieces:
        header = [f'target datalayout = "{mod.data_layout}"', f'target triple = "{mod.triple}"', *structs]
        mod.link_in(parse("\n".join(header + pieces), "<abi wrappers>"))
    return report
