"""NVSHMEM's constants for Triton code, with the values of the installed NVSHMEM's headers.

Contract: :func:`read_constants` reads the enumerations in the headers under ``include/`` of the
NVSHMEM in use (:func:`~triton_raw_ext.nvshmem_install.find_nvshmem`) and returns, for each
enumerator named in :data:`NAMES`, its value, under its name without ``NVSHMEM_`` / ``NVSHMEMX_``.
Enumerators without ``=`` count on from the previous one, as in C; a value may be a number,
``INT_MAX`` or an earlier enumerator (other expressions are not evaluated: such an enumerator, and
those counting on from it, have no value). A name of :data:`NAMES` the headers do not define, or
whose value cannot be read, is an error naming the folder read. The test suite checks the values
against clang's.
"""

from __future__ import annotations

import re

from ..errors import RawCompileError
from ..nvshmem_install import find_nvshmem

NAMES = (
    "NVSHMEM_CMP_EQ", "NVSHMEM_CMP_NE", "NVSHMEM_CMP_GT", "NVSHMEM_CMP_LE", "NVSHMEM_CMP_LT", "NVSHMEM_CMP_GE",
    "NVSHMEM_SIGNAL_SET", "NVSHMEM_SIGNAL_ADD",
    "NVSHMEM_TEAM_INVALID", "NVSHMEM_TEAM_WORLD", "NVSHMEM_TEAM_SHARED", "NVSHMEMX_TEAM_NODE",
    "NVSHMEMX_TEAM_SAME_MYPE_NODE",
)  # fmt: skip
INT_MAX = 2**31 - 1
_ENUM = re.compile(r"\benum\b[^{;()]*\{([^{}]*)\}", re.DOTALL)
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
_ENUMERATOR = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?:=\s*(.+?))?\s*$", re.DOTALL)


def python_name(c_name: str) -> str:
    """``NVSHMEM_CMP_EQ`` -> ``CMP_EQ``, ``NVSHMEMX_TEAM_NODE`` -> ``TEAM_NODE``."""
    return re.sub(r"^NVSHMEMX?_", "", c_name)


def _value(text: str, known: dict[str, int | None]) -> int | None:
    """The value of an enumerator's expression, or None when it is not a number, INT_MAX or a known name."""
    text = text.strip().strip("()").replace(" ", "")
    if re.fullmatch(r"[-+]?(0[xX][0-9a-fA-F]+|\d+)[uUlL]*", text):
        return int(text.rstrip("uUlL"), 0)
    if text == "INT_MAX":
        return INT_MAX
    return known.get(text)


def enumerators(source: str, known: dict[str, int | None]) -> None:
    """Add every enumerator of the enumerations in C ``source`` to ``known``, with its value or None."""
    for body in _ENUM.findall(_COMMENT.sub("", source)):
        value: int | None = -1
        for item in body.split(","):
            match = _ENUMERATOR.match(item)
            if match is None:
                continue
            name, expression = match.groups()
            value = _value(expression, known) if expression else None if value is None else value + 1
            known[name] = value


def read_constants() -> dict[str, int]:
    """Python name -> value for :data:`NAMES`, read from the installed NVSHMEM's headers."""
    include = find_nvshmem().include_dir
    known: dict[str, int | None] = {}
    for header in sorted([*include.rglob("*.h"), *include.rglob("*.cuh")]):
        source = header.read_text(errors="replace")
        if "enum" in source:
            enumerators(source, known)
    missing = [name for name in NAMES if known.get(name) is None]
    if missing:
        raise RawCompileError(f"cannot read {', '.join(missing)} from NVSHMEM's headers in {include}; "
                              f"reinstall NVSHMEM (pip install nvidia-nvshmem-cu13)")
    return {python_name(name): known[name] for name in NAMES}
