"""Reading LLVM debug-info metadata from IR text: the nodes, their fields, and source places.

LLVM prints each metadata node on one line, ``!12 = [distinct ]!DIKind(field: value, ...)``; the
plugin reads clang's libraries and Triton's kernel IR as text, so this reads the nodes from there.
What it answers: a node's kind and fields, the file, line and function of a ``!DILocation``, and
where each function (``!DISubprogram``) of a file starts.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

_NODE = re.compile(r"^!(\d+) = (?:distinct )?!(\w*)[({](.*)[)}]$", re.MULTILINE)


def field(body: str, key: str) -> str | None:
    """The value of field ``key`` in a node's body (quotes removed), or None."""
    m = re.search(rf'(?:^|[ ,(]){key}: ("[^"]*"|[^,]+)', body)
    return m.group(1).strip('"') if m else None


@dataclass(frozen=True)
class SourcePlace:
    """A line of a source file, in a function."""

    path: str  # normalised, as the PTX ``.file`` directive gives it
    line: int
    function: str  # the DISubprogram's name (C++: unqualified, without parameters)


class MetadataNodes:
    """The metadata nodes of a module's text: ``!12 = !DIBasicType(...)`` as 12 -> (kind, body)."""

    def __init__(self, ir_text: str) -> None:
        self.nodes = {m.group(1): (m.group(2), m.group(3)) for m in _NODE.finditer(ir_text)}

    def get(self, ref: str | None) -> tuple[str, str] | None:
        return self.nodes.get(ref.lstrip("!")) if ref and ref.startswith("!") else None

    def path(self, file_ref: str | None) -> str | None:
        """The path a ``!DIFile`` names: its filename, inside its directory when relative."""
        node = self.get(file_ref)
        if node is None or node[0] != "DIFile":
            return None
        return os.path.normpath(os.path.join(field(node[1], "directory") or "", field(node[1], "filename") or ""))

    def subprogram(self, scope_ref: str | None) -> tuple[str, str] | None:
        """The ``!DISubprogram`` that scope ``scope_ref`` (a subprogram or a lexical block) is in."""
        node = self.get(scope_ref)
        while node is not None and node[0] != "DISubprogram":
            node = self.get(field(node[1], "scope"))
        return node

    def place(self, location_ref: str | None) -> SourcePlace | None:
        """Where ``!DILocation`` ``location_ref`` is: file, line and function (not where it was inlined)."""
        node = self.get(location_ref)
        if node is None or node[0] != "DILocation":
            return None
        scope = self.get(field(node[1], "scope"))
        subprogram = self.subprogram(field(node[1], "scope"))
        path = self.path(field(scope[1], "file")) if scope else None
        if subprogram is None or path is None:
            return None
        return SourcePlace(path, int(field(node[1], "line") or 0), field(subprogram[1], "name") or "")

    def function_starts(self) -> list[SourcePlace]:
        """The first line of every function defined in the module (its ``!DISubprogram``)."""
        starts = []
        for kind, body in self.nodes.values():
            if kind == "DISubprogram" and "DISPFlagDefinition" in body:
                path = self.path(field(body, "file"))
                if path is not None:
                    starts.append(SourcePlace(path, int(field(body, "line") or 0), field(body, "name") or ""))
        return starts
