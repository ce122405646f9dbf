"""Reading and writing LLVM modules with llvmlite (LLVM 22.1), shared by the passes."""

from __future__ import annotations

import functools
import re
import struct
from pathlib import Path

import llvmlite.binding as llvm


@functools.lru_cache(maxsize=1)
def init_llvm() -> None:
    """Initialise llvmlite's targets once (NVPTX included)."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


# Float constants as newer LLVM prints them (Triton 3.8+): `f0x3F800000` (a float's bits), `-inf`, `nan`.
_FLOAT_BITS = re.compile(r"(?<![\w.])f0x([0-9A-Fa-f]{8})\b")
_FLOAT_SPECIAL = re.compile(r"(?<=[\s,(<\[])([-+]?)(inf|nan)(?=[\s,)>\]])")


def _double_hex(value: float) -> str:
    return "0x" + struct.pack(">d", value).hex().upper()


def classic_float_literals(text: str) -> str:
    """``text`` with float constants in the spelling every LLVM reads (a double's hex bits), for the
    llvmlite reader, which predates the newer spellings."""
    text = _FLOAT_BITS.sub(lambda m: _double_hex(struct.unpack(">f", bytes.fromhex(m.group(1)))[0]), text)
    return _FLOAT_SPECIAL.sub(lambda m: _double_hex(float(m.group(1) + m.group(2))), text)


def parse(data: bytes | str, name: str = "<module>", verify: bool = True) -> llvm.ModuleRef:
    """Parse bitcode (bytes starting with ``BC``) or textual IR; raise ValueError naming ``name``.

    ``verify=False`` skips LLVM's verifier (seconds on a vendor's 50 MB library; the reader still
    rejects malformed input). Textual IR may spell float constants as newer LLVM prints them.
    """
    init_llvm()
    try:
        if isinstance(data, bytes) and data[:2] == b"BC":
            mod = llvm.parse_bitcode(data)
        else:
            mod = llvm.parse_assembly(classic_float_literals(data.decode() if isinstance(data, bytes) else data))
        if verify:
            mod.verify()
    except RuntimeError as e:
        raise ValueError(f"{name} is not valid LLVM IR: {e}") from e
    return mod


def load(path: Path, verify: bool = True) -> llvm.ModuleRef:
    return parse(path.read_bytes(), str(path), verify)


def is_intrinsic(name: str) -> bool:
    return name.startswith("llvm.")


def defined_functions(mod: llvm.ModuleRef) -> list[llvm.ValueRef]:
    return [f for f in mod.functions if not f.is_declaration]


def declared_functions(mod: llvm.ModuleRef) -> list[llvm.ValueRef]:
    return [f for f in mod.functions if f.is_declaration and not is_intrinsic(f.name)]


def function_attributes(fn: llvm.ValueRef) -> str:
    """The function's own attribute string (the first entry of llvmlite's attribute list)."""
    attrs = list(fn.attributes)
    return attrs[0].decode() if attrs else ""


def nvptx_target_machine(cpu: str = "sm_90") -> llvm.TargetMachine:
    init_llvm()
    target = llvm.Target.from_triple("nvptx64-nvidia-cuda")
    return target.create_target_machine(cpu=cpu, features="+ptx86", opt=3)


def infer_function_attributes(mod: llvm.ModuleRef) -> None:
    """Infer function attributes (memory effects, ``nounwind`` ...) bottom-up, as clang's -O3 does."""
    tm = nvptx_target_machine()
    pto = llvm.create_pipeline_tuning_options(speed_level=0)
    pb = llvm.create_pass_builder(tm, pto)
    mpm = llvm.create_new_module_pass_manager()
    mpm.add_post_order_function_attributes_pass()
    mpm.run(mod, pb)


def simplify_functions(mod: llvm.ModuleRef, names: set[str] | None = None, cpu: str = "sm_90") -> None:
    """Run the -O3 function simplification pipeline on ``mod``'s defined functions (those in ``names``
    when given), each on its own: no inlining across functions, no module-wide passes."""
    pb = llvm.create_pass_builder(nvptx_target_machine(cpu), llvm.create_pipeline_tuning_options(speed_level=3))
    fpm = pb.getFunctionPassManager()
    for fn in defined_functions(mod):
        if names is None or fn.name in names:
            fpm.run(fn, pb)


def global_dce(mod: llvm.ModuleRef) -> None:
    """Delete unreferenced internal functions and globals, and declarations nothing uses."""
    tm = nvptx_target_machine()
    pto = llvm.create_pipeline_tuning_options(speed_level=0)
    pb = llvm.create_pass_builder(tm, pto)
    mpm = llvm.create_new_module_pass_manager()
    mpm.add_global_dead_code_eliminate_pass()
    mpm.add_strip_dead_prototype_pass()
    mpm.run(mod, pb)
