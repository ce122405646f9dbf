"""Pass `triton-compat`: make textual IR from LLVM 22.1 (clang, llvmlite) fit for Triton's LLVM.

Text in, text out, and the last step before Triton reads the IR (re-printing with llvmlite would
re-add what this pass removes). On every Triton version it removes the first two and rewrites the
third:

* the ``"target-cpu"`` and ``"target-features"`` function attributes: they differ from the
  kernel's and stop Triton's O3 inliner from inlining the raw functions into the kernel;
* the ``nvvm-reflect-ftz`` module flag (libraries only, ``drop_flags``): Triton sets it to 1,
  clang writes 0, and the conflict at link time kills the Python process;
* the ``DebugDirectivesOnly`` emission kind of debug compile units, which becomes
  ``LineTablesOnly``, the kind of the kernel's own unit. clang gives optimized device code
  (``-g``, ``-gline-tables-only``) directives-only units: ``.loc`` lines but no DWARF entries. In
  a kernel whose unit has DWARF entries, the entry of an inlined raw function refers to the
  function's entry in the raw unit, which is never laid out, and LLVM's DWARF writer aborts the
  process. As line tables the raw unit keeps the same ``.file``/``.loc`` lines.

Only for Triton 3.6 (``legacy_llvm``: its LLVM is a 22.0 pre-release; 3.7 and newer read these)
it also removes the ``nocreateundeforpoison`` attribute and the ``target_mem0``/``target_mem1``
locations inside ``memory(...)``, which that LLVM refuses to parse. Their access is added to every
other location's (that LLVM counts the memory under some other location), so the memory effects
only ever widen.
"""

from __future__ import annotations

import re

from triton_raw_ext.triton_version import LEGACY_LLVM, LEGACY_LLVM_BEFORE, SUPPORTED, parse_version

from .tool_pass import Option, OptionValues, ToolPass

# LLVM prints function and call-site attributes in groups at the end; only those lines are edited.
_ATTRIBUTE_GROUP = re.compile(r"^attributes #\d+ = \{.*\}$", re.MULTILINE)
_TARGET_ATTRIBUTES = re.compile(r'\s*(?:"target-cpu"="[^"]*"|"target-features"="[^"]*")')
_NEW_ATTRIBUTES = re.compile(r"\s*\bnocreateundeforpoison\b")
_ACCESS_BITS = {"none": 0, "read": 1, "write": 2, "readwrite": 3}
_ACCESS_NAMES = {bits: name for name, bits in _ACCESS_BITS.items()}
_DROPPED_FLAGS = ("nvvm-reflect-ftz",)
_DIRECTIVES_ONLY = re.compile(r"^(!\d+ = distinct !DICompileUnit\(.*\bemissionKind: )DebugDirectivesOnly\b",
                              re.MULTILINE)


def _drop_module_flags(text: str, names: tuple[str, ...]) -> str:
    ids = []
    for name in names:
        for m in re.finditer(rf'^(!\d+) = !\{{i32 \d+, !"{re.escape(name)}", [^}}]*\}}\n', text, re.MULTILINE):
            ids.append(m.group(1))
    for node in ids:
        text = re.sub(rf"^{node} = .*\n", "", text, flags=re.MULTILINE)

        def drop(m: re.Match[str], node: str = node) -> str:
            items = [x.strip() for x in m.group(1).split(",") if x.strip() and x.strip() != node]
            return "!llvm.module.flags = !{" + ", ".join(items) + "}"

        text = re.sub(r"^!llvm\.module\.flags = !\{([^}]*)\}", drop, text, flags=re.MULTILINE)
    return text


def _clean_memory(m: re.Match[str]) -> str:
    """Drop the target_mem locations, adding their access to every remaining location's."""
    default, located, target = 0, {}, 0
    for item in (x.strip() for x in m.group(1).split(",") if x.strip()):
        location, _, access = (p.strip() for p in item.rpartition(":"))
        if not location:
            default = _ACCESS_BITS[access]
        elif location.startswith("target_mem"):
            target |= _ACCESS_BITS[access]
        else:
            located[location] = _ACCESS_BITS[access]
    default |= target
    parts = [f"{loc}: {_ACCESS_NAMES[bits | target]}" for loc, bits in located.items() if bits | target != default]
    if default or not parts:
        parts.insert(0, _ACCESS_NAMES[default])
    return f"memory({', '.join(parts)})"


def triton_compat(text: str, drop_flags: bool = True, legacy_llvm: bool = LEGACY_LLVM) -> str:
    """Apply the edits above; ``drop_flags=False`` keeps module flags (for whole kernels).

    ``legacy_llvm`` defaults to whether the installed Triton is 3.6.
    """
    def edit_group(m: re.Match[str]) -> str:
        group = _TARGET_ATTRIBUTES.sub("", m.group(0))
        if legacy_llvm:
            group = _NEW_ATTRIBUTES.sub("", group)
            group = re.sub(r"memory\(([^)]*)\)", _clean_memory, group)
        return re.sub(r"\{\s+\}$", "{ nounwind }", group)  # an empty group does not parse

    text = _ATTRIBUTE_GROUP.sub(edit_group, text)
    text = _DIRECTIVES_ONLY.sub(r"\1LineTablesOnly", text)
    return _drop_module_flags(text, _DROPPED_FLAGS) if drop_flags else text


def _triton_version(value: str) -> tuple[int, int]:
    version = parse_version(value)
    if version not in SUPPORTED:
        raise ValueError(f"{value}: supported Triton versions are {', '.join(f'{a}.{b}' for a, b in SUPPORTED)}")
    return version


def _rewrite(text: str, options: OptionValues) -> tuple[str, list[str]]:
    version = options["for-triton"]
    return triton_compat(text, legacy_llvm=LEGACY_LLVM if version is None else version < LEGACY_LLVM_BEFORE), []


TRITON_COMPAT_PASS = ToolPass(
    "triton-compat",
    (Option("for-triton", "Triton version (default: installed)", _triton_version),),
    rewrite_text=_rewrite,
)
