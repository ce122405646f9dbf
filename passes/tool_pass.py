"""How a pass presents itself to ``triton-raw-opt``: its name, its options and what it reports.

Contract: each pass module declares one :class:`ToolPass`; ``triton-raw-opt`` builds its command line
from them (``--<option>`` for every option of every pass; an option several passes declare is one
flag) and runs the passes named in ``--passes`` in order. A module pass's ``run`` changes the module
in place and returns the lines it reports, which the tool prints as ``triton-raw-opt: <pass>: <line>``;
it raises ``ValueError`` when it fails on valid input. A text pass (``rewrite_text``) takes the IR
text and returns the new text with the lines it reports, so it runs after every module pass. Option
parsers raise ``ValueError`` naming what they accept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm


def names(value: str) -> list[str]:
    """A comma-separated list of symbol names."""
    return [n.strip() for n in value.split(",") if n.strip()]


@dataclass(frozen=True)
class Option:
    """``--<name>``: what it is for, how its text is read, and whether the pass needs it."""

    name: str
    help: str
    parse: Callable[[str], Any] = str
    required: bool = False


@dataclass(frozen=True)
class ToolContext:
    """What the tool gives a pass besides its options: the target, and a reader for further input files."""

    arch: int
    cpu: str
    read_module: Callable[[Path], llvm.ModuleRef]


OptionValues = Mapping[str, Any]  # option name -> parsed value, None when not given


@dataclass(frozen=True)
class ToolPass:
    """A pass as ``triton-raw-opt`` runs it: exactly one of ``run`` (module) and ``rewrite_text`` (text)."""

    name: str
    options: tuple[Option, ...] = ()
    run: Callable[[llvm.ModuleRef, OptionValues, ToolContext], list[str]] | None = None
    rewrite_text: Callable[[str, OptionValues], tuple[str, list[str]]] | None = None

    def __post_init__(self) -> None:
        if (self.run is None) == (self.rewrite_text is None):
            raise TypeError(f"pass {self.name}: give exactly one of run= and rewrite_text=")
