"""The element type a pointer result points to, read from clang's debug info.

The IR of ``float *row(float *base, int i)`` returns ``ptr``: the pointee is gone. The declaration
keeps it, and clang's debug info carries the declaration's types for every function, C and C++
alike, with typedefs and qualifiers as nodes that can be followed to the base type. The raw library
is therefore compiled once more with debug info (only when an exported function returns a
pointer), and each function's ``DISubprogram`` (found by its linkage name) gives its return type:
through typedefs and ``const``/``volatile``, a pointer or reference, then through typedefs and
qualifiers again to a base type. A base type Triton has an element type for (the integer and
floating types, ``bool``, ``__half``, ``__nv_bfloat16``) names it; ``void``, structs, pointers and
anything else name nothing, and the result stays an ``int64`` address.

The IR has no signedness either: ``unsigned int`` and ``int`` are both ``i32``. The same debug
info says which scalar results, and which fields of struct results, are unsigned integers
(:func:`result_leaves`), so that they cross as Triton's unsigned types.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .debug_metadata import MetadataNodes, field

_QUALIFIERS = ("DW_TAG_typedef", "DW_TAG_const_type", "DW_TAG_volatile_type", "DW_TAG_restrict_type",
               "DW_TAG_atomic_type")  # fmt: skip
_POINTERS = ("DW_TAG_pointer_type", "DW_TAG_reference_type", "DW_TAG_rvalue_reference_type")
_BASE_TYPES = {
    ("DW_ATE_float", 16): "float16", ("DW_ATE_float", 32): "float32", ("DW_ATE_float", 64): "float64",
    ("DW_ATE_boolean", 8): "int1", ("DW_ATE_signed_char", 8): "int8", ("DW_ATE_unsigned_char", 8): "uint8",
    **{("DW_ATE_signed", n): f"int{n}" for n in (8, 16, 32, 64)},
    **{("DW_ATE_unsigned", n): f"uint{n}" for n in (8, 16, 32, 64)},
    **{("DW_ATE_UTF", n): f"uint{n}" for n in (8, 16, 32)},  # char8_t, char16_t, char32_t
}  # fmt: skip
_STRUCTS = {"__half": "float16", "__nv_bfloat16": "bfloat16"}


class _Nodes(MetadataNodes):
    """The metadata nodes, with the type walks this module needs."""

    def strip(self, ref: str | None, tags: tuple[str, ...]) -> tuple[str, str] | None:
        """The node ``ref`` names, following ``baseType`` through the derived types with ``tags``."""
        node = self.get(ref)
        while node and node[0] == "DIDerivedType" and field(node[1], "tag") in tags:
            node = self.get(field(node[1], "baseType"))
        return node

    def return_type(self, subprogram: str) -> str | None:
        """The reference to a subprogram's return type (None for ``void``)."""
        routine = self.get(field(subprogram, "type"))
        types = self.get(field(routine[1], "types")) if routine else None
        first = types[1].split(",")[0].strip() if types else ""
        return first if first.startswith("!") else None


def _element_type(nodes: _Nodes, subprogram: str) -> str | None:
    pointer = nodes.strip(nodes.return_type(subprogram), _QUALIFIERS)
    if not pointer or pointer[0] != "DIDerivedType" or field(pointer[1], "tag") not in _POINTERS:
        return None
    base = nodes.strip(field(pointer[1], "baseType"), _QUALIFIERS)
    if base is None:
        return None
    kind, body = base
    if kind == "DIBasicType":
        size = field(body, "size")
        return _BASE_TYPES.get((field(body, "encoding") or "", int(size) if size else 0))
    if kind == "DICompositeType":
        return _STRUCTS.get(field(body, "name") or "")
    return None


def _definitions(nodes: _Nodes, symbols: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(symbol, body) of the ``DISubprogram`` of each of ``symbols`` defined in the module."""
    wanted = set(symbols)
    for kind, body in nodes.nodes.values():
        if kind == "DISubprogram" and "DISPFlagDefinition" in body:
            symbol = field(body, "linkageName") or field(body, "name")
            if symbol in wanted:
                yield symbol, body


def pointee_types(ir_text: str, symbols: Iterable[str]) -> dict[str, str]:
    """Map each of ``symbols`` whose pointer result has a Triton element type to that type's name
    in ``triton.language`` (``"float32"``, ``"uint8"`` ...), reading ``ir_text``, a module compiled
    with full debug info. Symbols without one (or without debug info) are left out."""
    nodes = _Nodes(ir_text)
    found: dict[str, str] = {}
    for symbol, subprogram in _definitions(nodes, symbols):
        element = _element_type(nodes, subprogram)
        if element is not None:
            found[symbol] = element
    return found


def _leaves(nodes: _Nodes, ref: str | None) -> list[str | None] | None:
    """The scalar fields of the type ``ref`` names, flattened as the IR lays them out (base classes,
    then members in declaration order, arrays element by element): for each, the Triton name of an
    unsigned integer type (``"uint32"``), else None. None when the layout cannot be told (bit fields,
    unions, unknown nodes)."""
    node = nodes.strip(ref, _QUALIFIERS)
    if node is None:
        return None
    kind, body = node
    tag = field(body, "tag")
    if kind == "DIBasicType":
        size = field(body, "size")
        name = _BASE_TYPES.get((field(body, "encoding") or "", int(size) if size else 0), "")
        return [name if name.startswith("uint") else None]
    if kind == "DIDerivedType" and tag in _POINTERS:
        return [None]
    if kind != "DICompositeType":
        return None
    if field(body, "name") in _STRUCTS or tag == "DW_TAG_enumeration_type":
        return [None]
    elements = nodes.get(field(body, "elements"))
    refs = [r.strip() for r in elements[1].split(",") if r.strip()] if elements else []
    if tag == "DW_TAG_array_type":
        count = 1
        for subrange in (nodes.get(r) for r in refs):
            size = field(subrange[1], "count") if subrange else None
            if size is None or not size.isdigit():
                return None
            count *= int(size)
        element = _leaves(nodes, field(body, "baseType"))
        return None if element is None else element * count
    if tag not in ("DW_TAG_structure_type", "DW_TAG_class_type"):
        return None
    found: list[str | None] = []
    for member in (nodes.get(r) for r in refs):
        if member is None or member[0] != "DIDerivedType":
            continue  # methods (DISubprogram) take no room
        flags = field(member[1], "flags") or ""
        if field(member[1], "tag") not in ("DW_TAG_member", "DW_TAG_inheritance") or "DIFlagStaticMember" in flags:
            continue
        if "DIFlagBitField" in flags:
            return None
        inner = _leaves(nodes, field(member[1], "baseType"))
        if inner is None:
            return None
        found += inner
    return found


def result_leaves(ir_text: str, symbols: Iterable[str]) -> dict[str, list[str | None]]:
    """Map each of ``symbols`` to the scalar fields of its declared result (one for a scalar, see
    :func:`_leaves`), reading ``ir_text``, a module compiled with full debug info. Symbols whose
    result is ``void`` or cannot be laid out are left out."""
    nodes = _Nodes(ir_text)
    found: dict[str, list[str | None]] = {}
    for symbol, subprogram in _definitions(nodes, symbols):
        leaves = _leaves(nodes, nodes.return_type(subprogram))
        if leaves is not None:
            found[symbol] = leaves
    return found
