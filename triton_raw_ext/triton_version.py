"""Everything that differs between the supported Triton releases, in one place.

Supported: the Triton that each current torch release pins (3.6 for torch 2.11, 3.7 for 2.12-2.13,
3.8 for 2.14, 3.9 for 2.15). The rest of the plugin asks this module instead of comparing versions:

* :data:`LEGACY_LLVM`: Triton 3.6 bundles a pre-release LLVM 22.0 that refuses some attributes that
  clang 22.1 and NVSHMEM 3.8 write (see the ``triton-compat`` pass); 3.7 and newer read them.
* :func:`stage_hook`: from 3.7 Triton also calls the stage-inspection hook with no arguments, to
  put the custom pipeline into its cache keys, and expects ``(key, hash)`` back.
* :func:`translate_to_asm`: from 3.8 Triton's ``llvm.translate_to_asm`` takes an 8th argument.
* :func:`serializes_wgmma_in_flight_across_loops`: from 3.7 Triton's ptxas serializes every wgmma of a
  kernel that leaves one in flight across a loop's back edge (C7518); 3.6's waits where the result is
  used (C7517) and keeps the overlap.
* :data:`GLUON_SHARED_ADDRESS`: from 3.9 Gluon's ``gl.inline_asm`` takes a shared-memory descriptor
  (as the 32-bit shared address of its origin). Before, no Gluon operation turns a descriptor into
  a value: ``tt.elementwise_inline_asm`` and ``tt.extern_elementwise`` refuse ``!ttg.memdesc``
  operands, so a raw function cannot be given Gluon's shared memory.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

import triton

SUPPORTED = ((3, 6), (3, 7), (3, 8), (3, 9))  # the tested releases of each: stack.TESTED_TRITON


def parse_version(text: str) -> tuple[int, int]:
    """``"3.7.1+git..."`` -> ``(3, 7)``; raises ValueError on anything else."""
    m = re.match(r"(\d+)\.(\d+)", text)
    if not m:
        raise ValueError(f"not a Triton version: {text!r}")
    return int(m.group(1)), int(m.group(2))


VERSION = parse_version(triton.__version__)
LEGACY_LLVM_BEFORE = (3, 7)
LEGACY_LLVM = VERSION < LEGACY_LLVM_BEFORE
_TRANSLATE_TAKES_GEP_FLAG = VERSION >= (3, 8)
GLUON_SHARED_ADDRESS = VERSION >= (3, 9)


def serializes_wgmma_in_flight_across_loops(version: tuple[int, int] = VERSION) -> bool:
    """Whether the ptxas of Triton ``version`` (default the installed one) serializes every wgmma of a
    kernel that leaves one in flight across a loop's back edge."""
    return version >= (3, 7)


def unsupported_reason(version: str = triton.__version__) -> str | None:
    """Why ``version`` is not supported (naming the fix), or None when it is."""
    if parse_version(version) in SUPPORTED:
        return None
    known = ", ".join(f"{a}.{b}" for a, b in SUPPORTED)
    return (f"triton {version} is not supported by triton-raw-ext (supported: {known}); install a "
            f"supported one (`pip install 'triton>=3.6,<3.10'`) or a torch release that pins one (2.11-2.15)")


def stage_hook(add_stages: Callable, key: str, previous: Callable | None) -> Callable:
    """The value for ``knobs.runtime.add_stages_inspection_hook``: ``previous``, then ``add_stages``.

    Called with the stage arguments ``(backend, stages, options, language, capability)`` it runs a
    hook installed before (``previous``) and then ``add_stages``. Called with no arguments (Triton
    >= 3.7 does so at every cache-key computation, so this stays cheap) it returns ``(key, hash)``
    with ``previous``'s key in front: kernels compiled through the hook get cache entries of their
    own, and a change of ``key`` (the plugin's code) recompiles them.
    """
    key_hash = hashlib.sha256(key.encode()).hexdigest()

    def hook(*args):
        if not args:
            if previous is None:
                return key, key_hash
            previous_key, previous_hash = previous()
            return previous_key + key, hashlib.sha256((previous_hash + key_hash).encode()).hexdigest()
        if previous is not None:
            previous(*args)
        return add_stages(*args)

    return hook


def translate_to_asm(src: str, cpu: str, features: str) -> str:
    """PTX for LLVM IR text ``src`` from Triton's own LLVM, with the flags its ``make_ptx`` uses."""
    from triton._C.libtriton import llvm

    llvm.init_targets()
    args = [src, "nvptx64-nvidia-cuda", cpu, features, ["nvptx-mad-wide-opt"], False, False]
    if _TRANSLATE_TAKES_GEP_FLAG:
        args.append(False)  # canonicalize_gep: only Triton's fp sanitizer sets it
    return llvm.translate_to_asm(*args)
