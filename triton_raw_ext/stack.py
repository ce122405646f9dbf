"""The software stack the plugin sits in: torch, Triton and NVSHMEM, and which combinations are tested.

Reads installed distributions' metadata only (nothing is imported), so ``scripts/install.sh``,
``scripts/test_matrix.sh`` and ``triton-raw doctor`` can use it before Triton or torch work (run
as a script: see :func:`main`).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from importlib import metadata

TESTED_TRITON = ("3.6.0", "3.7.1", "3.8.0", "3.9.0")  # CI runs the CPU suite against each
SUPPORTED_TRITON = "triton>=3.6,<3.10"
TESTED_NVSHMEM = ("3.4.5", "3.7.2", "3.8.0")  # compiled and linked by the CPU suite and the compile benchmark
DEFAULT_NVSHMEM = "3.4.5"  # the unified-bitcode release the GPU machine has
NVSHMEM_WHEELS = {12: "nvidia-nvshmem-cu12", 13: "nvidia-nvshmem-cu13"}
# The CPU matrix (scripts/test_matrix.sh): each tested Triton beside an NVSHMEM wheel, so that every
# tested NVSHMEM release and both CUDA majors are compiled against; 3.9 gets torch 2.15's own pin.
MATRIX_NVSHMEM = {
    "3.6.0": "nvidia-nvshmem-cu13==3.4.5",
    "3.7.1": "nvidia-nvshmem-cu13==3.8.0",
    "3.8.0": "nvidia-nvshmem-cu12==3.8.0",
    "3.9.0": "nvidia-nvshmem-cu13==3.7.2",
}
_PIN = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*==\s*([0-9][0-9A-Za-z.+]*)")


def installed(name: str) -> str | None:
    """The installed version of distribution ``name``, or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def torch_pins() -> dict[str, str]:
    """The exact versions the installed torch requires on Linux (``{"triton": "3.7.1", ...}``).

    A CPU build of torch pins nothing; without torch the result is empty.
    """
    try:
        requirements = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        return {}
    pins = {}
    for requirement in requirements:
        m = _PIN.match(requirement)
        if m and "extra ==" not in requirement:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def torch_cuda_major() -> int:
    """The CUDA major version of the installed torch's build (``+cu130`` -> 13); 13 if unknown."""
    version = installed("torch") or ""
    m = re.search(r"\+cu(\d\d)", version)
    if m:
        return int(m.group(1))
    pinned = [name for name in torch_pins() if name.startswith("nvidia-") and name.endswith(("-cu12", "-cu13"))]
    return int(pinned[0][-2:]) if pinned else 13


def _series(version: str) -> str:
    return ".".join(version.split(".")[:2])


@dataclass(frozen=True)
class Stack:
    """What is installed, and whether it is a combination the project tests."""

    torch: str | None
    triton: str | None
    nvshmem: str | None  # the NVSHMEM wheel's version, either CUDA major
    torch_triton_pin: str | None

    @property
    def problems(self) -> list[str]:
        """Why this combination is not a tested one, each with its fix (empty when it is)."""
        found = []
        if self.triton is None:
            found.append(f"Triton is not installed: `pip install '{SUPPORTED_TRITON}'`")
        elif self.triton not in TESTED_TRITON:
            found.append(f"triton {self.triton} is not a tested version ({', '.join(TESTED_TRITON)}): "
                         f"`pip install 'triton=={_nearest(self.triton)}'` or a torch that pins a tested one")
        if self.torch_triton_pin and self.triton and self.torch_triton_pin != self.triton:
            found.append(f"torch {self.torch} requires triton {self.torch_triton_pin} but {self.triton} is "
                         f"installed: `pip install 'triton=={self.torch_triton_pin}'`")
        if self.nvshmem is not None and self.nvshmem not in TESTED_NVSHMEM:
            found.append(f"NVSHMEM {self.nvshmem} is not a tested version ({', '.join(TESTED_NVSHMEM)})")
        return found


def _nearest(version: str) -> str:
    same_series = [v for v in TESTED_TRITON if _series(v) == _series(version)]
    return same_series[0] if same_series else TESTED_TRITON[-1]


def current() -> Stack:
    nvshmem = next((v for v in map(installed, NVSHMEM_WHEELS.values()) if v), None)
    return Stack(installed("torch"), installed("triton"), nvshmem, torch_pins().get("triton"))


def install_requirements() -> list[str]:
    """What ``scripts/install.sh`` asks pip for beside the installed torch (or none).

    Triton: torch's pin when it pins one (refused with the reason if we do not support it), else
    the supported range. NVSHMEM: torch's pin when it pins one, else :data:`DEFAULT_NVSHMEM`, for
    the CUDA major torch was built for.
    """
    pins = torch_pins()
    triton = pins.get("triton")
    if triton is not None and _series(triton) not in {_series(v) for v in TESTED_TRITON}:
        raise SystemExit(f"install: torch {installed('torch')} pins triton {triton}, which triton-raw-ext does not "
                         f"support ({', '.join(TESTED_TRITON)}); install torch 2.11-2.15 (e.g. "
                         f"`pip install torch==2.13.0`) or set TORCH_SPEC")
    wheel = NVSHMEM_WHEELS[torch_cuda_major()]
    nvshmem = pins.get(wheel, DEFAULT_NVSHMEM)
    return [f"triton=={triton}" if triton else SUPPORTED_TRITON, f"{wheel}=={nvshmem}"]


def main() -> None:
    """``stack.py requirements``: :func:`install_requirements`, one a line; ``stack.py matrix``: each
    tested Triton and its NVSHMEM requirement (:data:`MATRIX_NVSHMEM`), one pair a line."""
    commands = {
        "requirements": install_requirements,
        "matrix": lambda: [f"{triton} {nvshmem}" for triton, nvshmem in MATRIX_NVSHMEM.items()],
    }
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        raise SystemExit(f"usage: stack.py {{{'|'.join(commands)}}}")
    print("\n".join(commands[sys.argv[1]]()))


if __name__ == "__main__":
    main()
