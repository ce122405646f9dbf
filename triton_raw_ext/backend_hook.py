"""The Triton backend hook, installed on import of :mod:`triton_raw_ext`.

It wraps the NVIDIA backend's `llir` and `cubin` stages:

1. Raw libraries: the TTGIR's ``tt.extern_elementwise`` calls into ``triton_raw`` name the `.ll`
   files to link; they, each followed by its user libraries (``libs=``), are put in front of
   ``extern_libs`` for this compile. Triton links them before its O3 pipeline, each only for what
   is still undefined, and O3 inlines them into the kernel (the wrappers are ``alwaysinline``); the
   libdevice it links after them resolves the CUDA math they call (``__nv_expf`` ...) under
   Triton's own ftz setting.
2. NVSHMEM: if the optimized kernel IR still declares NVSHMEM functions, NVSHMEM's device bitcode
   is linked once (:mod:`triton_raw_ext.nvshmem_link`).
3. Errors in raw code: a function the raw code calls that nothing defines (after the links above),
   and PTX of the raw code that ptxas rejects (in the `cubin` stage), are reported against the
   `.cu` (:mod:`triton_raw_ext.raw_code_errors`).

It wraps the `cubin` stage too: a kernel whose `llir` stage left NVSHMEM collectives to link as
precompiled objects is assembled by Triton's ptxas as relocatable code (``-c``) and linked with
them by nvlink (:mod:`triton_raw_ext.nvshmem_objects`); every other kernel goes through the stage
it found.

It chains with a previously installed ``add_stages_inspection_hook`` (called first), and leaves a
kernel without raw calls to the stage it found, untouched. Where Triton puts the hook into its cache
keys (3.7 and newer), the key is the plugin's code digest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from pathlib import Path

from triton import knobs
from triton.backends.nvidia.compiler import sm_arch_from_capability

from .cu_compiler import SIGNATURE_FILE
from .language import LIBRARY_NAME
from .nvshmem_link import link_nvshmem
from .nvshmem_objects import link_kernel, register_limit
from .ptxas_bound import bounded
from .ptxas_bound import install as install_ptxas_bound
from .raw_code_errors import check_undefined_calls, ptxas_errors_in_raw_code
from .triton_version import stage_hook
from .version import code_digest
from .wait_reports import define_record_pointer

_RAW_LIBPATH = re.compile(rf'libname = "{LIBRARY_NAME}", libpath = "([^"]+)"')
_HOOK_MARK = "_triton_raw_ext_hook"


def _mlir_string(text: str) -> str:
    """The value of an MLIR string literal's body: ``\\XX`` escapes (non-ASCII bytes, ``"``, ``\\``)
    decoded as UTF-8, so a cache folder under ``/home/jöe`` is found again."""
    def byte(m: re.Match[bytes]) -> bytes:
        return b"\\" if m.group(1) == b"\\" else bytes([int(m.group(1), 16)])

    return re.sub(rb"\\(\\|[0-9A-Fa-f]{2})", byte, text.encode()).decode()


def raw_libraries(ttgir: str) -> dict[str, str]:
    """``extern_libs`` entries (name -> path) for the raw libraries that TTGIR text calls into, each
    followed by the user libraries (``libs=``) its ``signature.json`` lists."""
    paths: list[str] = []
    for raw in sorted({_mlir_string(path) for path in _RAW_LIBPATH.findall(ttgir)}):
        folder = Path(raw).parent
        user = json.loads((folder / SIGNATURE_FILE).read_text()).get("libs", [])
        paths += [raw, *(str(folder / name) for name in user if str(folder / name) not in paths)]
    return {f"{LIBRARY_NAME}_{i}": path for i, path in enumerate(paths)}


def _wrap_llir(backend, stages: dict, options, capability: int, linked: list[Path]) -> None:
    original = stages["llir"]

    def make_llir(src, metadata):
        libs = raw_libraries(str(src))
        if not libs:
            return original(src, metadata)
        linked.extend(Path(path) for path in libs.values())
        # Raw libraries first: Triton links the list in order, each library only for what is still
        # undefined, so libdevice (in Triton's list) then resolves the raw code's __nv_* calls too.
        extern_libs = libs | dict(options.extern_libs or ())
        llir = backend.make_llir(src, metadata, dataclasses.replace(options, extern_libs=extern_libs), capability)
        llir = link_nvshmem(llir, capability, sm_arch_from_capability(capability), metadata)
        llir = define_record_pointer(llir)
        check_undefined_calls(llir, linked, metadata.get("raw_nvshmem_objects") or ())
        return llir

    stages["llir"] = make_llir


def _wrap_cubin(backend, stages: dict, options, linked: list[Path]) -> None:
    original = stages["cubin"]

    def make_cubin(src, metadata):
        with ptxas_errors_in_raw_code(src, linked), (bounded() if linked else contextlib.nullcontext()):
            collectives = metadata.get("raw_nvshmem_objects")
            if not collectives:
                return original(src, metadata)
            relocatable = dataclasses.replace(options, ptx_options=" ".join(filter(None, [options.ptx_options, "-c"])))
            kernel = backend.make_cubin(src, metadata, relocatable, backend.target.arch)
            limit = register_limit(options.num_warps, getattr(options, "maxnreg", None))
            return link_kernel(kernel, collectives, backend.target.arch, limit)

    stages["cubin"] = make_cubin


def _add_stages(backend, stages: dict, options, language, capability: int) -> None:
    if backend.target.backend == "cuda" and "llir" in stages:
        linked: list[Path] = []  # the libraries this compile's llir stage links, for the later stages' errors
        _wrap_llir(backend, stages, options, capability, linked)
        if "cubin" in stages:
            _wrap_cubin(backend, stages, options, linked)


def install() -> None:
    """Install the stage hook, the module-load hook and the `.cu` edit watch; safe to call more than once."""
    previous = knobs.runtime.add_stages_inspection_hook
    if getattr(previous, _HOOK_MARK, False):
        return
    hook = stage_hook(_add_stages, f"triton_raw_ext-{code_digest()}", previous)
    setattr(hook, _HOOK_MARK, True)
    knobs.runtime.add_stages_inspection_hook = hook
    install_ptxas_bound()
    from .module_init import init_loaded_module
    from .source_watch import install as install_source_watch

    knobs.runtime.kernel_load_end_hook.add(init_loaded_module)
    install_source_watch()
