"""C++ names of raw functions: demangling, and finding the function an ``extern_func_name`` means.

Demangling uses ``__cxa_demangle`` from the C++ runtime (libstdc++, or libc++abi), loaded with
ctypes: it is present wherever clang runs, and it is the demangler the C++ toolchain itself uses.

:func:`candidates` applies these rules in order; the first that matches anything decides:

1. the symbol itself: a C function's name, or a C++ mangled name (``_Z9VectorAddPfS_S_i``);
2. the demangled signature, with or without the return type that template instances carry
   (``VectorAdd(float*, float*, float*, int)``, ``float scale<float>(float, float)``);
3. the qualified name (``VectorAdd``, ``ns::add``, ``scale<float>``): every overload of it;
4. the qualified name without template arguments (``scale``): every instance of the template.

Spaces are ignored where C++ ignores them (``scale<unsigned int>`` keeps its one space).
"""

from __future__ import annotations

import ctypes
import functools
import re
from collections.abc import Callable, Iterable

_RUNTIMES = ("libstdc++.so.6", "libc++abi.so.1")
_IDENTIFIER_GAP = re.compile(r"(?<=\w)\s+(?=\w)")


@functools.lru_cache(maxsize=1)
def _cxa_demangle() -> tuple[Callable[..., int | None], Callable[[int], None]] | None:
    """``__cxa_demangle`` and ``free`` from the C++ runtime, or None where none can be loaded."""
    for name in _RUNTIMES:
        try:
            demangle = ctypes.CDLL(name).__cxa_demangle
        except (OSError, AttributeError):
            continue
        demangle.restype = ctypes.c_void_p
        demangle.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t),
                             ctypes.POINTER(ctypes.c_int)]  # fmt: skip
        libc = ctypes.CDLL(None)
        libc.free.argtypes = [ctypes.c_void_p]
        return demangle, libc.free
    return None


def can_demangle() -> bool:
    """Whether a C++ runtime with ``__cxa_demangle`` could be loaded."""
    return _cxa_demangle() is not None


@functools.lru_cache(maxsize=4096)
def demangle(symbol: str) -> str | None:
    """The demangled form of an Itanium-mangled ``symbol``; None for C names (or no demangler)."""
    found = _cxa_demangle()
    if found is None or not symbol.startswith("_Z"):
        return None
    cxa_demangle, free = found
    status = ctypes.c_int(0)
    text = cxa_demangle(symbol.encode(), None, None, ctypes.byref(status))
    if not text or status.value != 0:
        return None
    try:
        return ctypes.string_at(text).decode()
    finally:
        free(text)


def normalize(name: str) -> str:
    """``name`` with the spaces C++ ignores removed: ``foo<bar<int> >`` -> ``foo<bar<int>>``."""
    return _IDENTIFIER_GAP.sub(" ", re.sub(r"\s*([^\w\s])\s*", r"\1", name.strip()))


def _split(demangled: str) -> tuple[str, str]:
    """(return type, qualified name) of a demangled function signature.

    The parameter list is the last parenthesised group (after it come only the qualifiers of a
    member function); before it stands ``[return type ]qualified name``, the name starting after
    the last space outside ``<...>`` (an ``operator`` name is taken whole).
    """
    end = demangled.rfind(")") + 1
    depth, start = 0, end
    for i in range(end - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(demangled[i], 0)
        if depth == 0:
            start = i
            break
    head = demangled[:start]
    operator = head.find("operator")
    scan = head if operator < 0 else head[:operator]
    angle, cut = 0, 0
    for i, c in enumerate(scan):
        angle += {"<": 1, ">": -1}.get(c, 0)
        if c == " " and angle == 0:
            cut = i + 1
    return head[:cut].strip(), head[cut:]


def _strip_template_args(name: str) -> str:
    """``ns::scale<float>`` -> ``ns::scale``: the template arguments of the last name part."""
    if not name.endswith(">") or "operator" in name:
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {">": 1, "<": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i]
    return name


def _rule_names(symbol: str) -> list[set[str]]:
    """The normalized names each rule matches ``symbol`` by."""
    demangled = demangle(symbol)
    if demangled is None:
        return [{symbol}, set(), set(), set()]
    ret, qualified = _split(demangled)
    signature = demangled[len(ret) :]
    return [{symbol}, {normalize(demangled), normalize(signature)}, {normalize(qualified)},
            {normalize(_strip_template_args(qualified))}]  # fmt: skip


def candidates(requested: str, symbols: Iterable[str]) -> list[str]:
    """The symbols ``requested`` names, by the first rule of the module docstring that matches any."""
    table = {s: _rule_names(s) for s in symbols}
    for rule, wanted in enumerate([requested, normalize(requested), normalize(requested), normalize(requested)]):
        found = [s for s, names in table.items() if wanted in names[rule]]
        if found:
            return found
    return []


def describe(symbol: str) -> str:
    """``VectorAdd(float*, float*, float*, int) [_Z9VectorAddPfS_S_i]`` for C++, the name for C."""
    demangled = demangle(symbol)
    return f"{demangled} [{symbol}]" if demangled else symbol
