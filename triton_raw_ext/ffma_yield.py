"""Yield hints in a cubin's long runs of FFMA: the promotion of a block-scaled GEMM's K block products.

ptxas schedules a consumer's promotion (``sum += part * scale``, one FFMA per accumulator register) as one run
of FFMAs in which every other instruction reads a scale register from the operand reuse cache and so asks
the warp scheduler to stay on the warp. While one warpgroup runs that run, the other warpgroup's wgmma
waits for issue slots. Clearing the reuse flags and the stay hint of the run's FFMAs (DeepGEMM's
idea for its own kernels) lets the scheduler switch warps at every FFMA.

Both fields are hints of the instruction's control bits (the high 64-bit word of Hopper's 128-bit
instructions): the register file is read either way and the stall counts and scoreboards are kept, so
the results are the same bits.
"""

from __future__ import annotations

import re
import struct
import subprocess
import tempfile
from pathlib import Path

MIN_RUN = 16  # FFMAs in a row that count as a promotion run (SwiGLU's and quantization's are shorter)
REUSE_FLAGS = 0xF << 58  # operand reuse cache flags, bits 122-125 of the instruction
STAY_HINT = 1 << 45  # bit 109: set, the scheduler keeps issuing from this warp (ptxas sets it on reuse)
INSTRUCTION_BYTES = 16

_INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)")
_SECTION = re.compile(r"\s*\.section\s+(\.text\.[^,\s]+)")


def text_sections(cubin: bytes) -> dict[str, tuple[int, int]]:
    """Each ``.text.<kernel>`` section of the ELF ``cubin``: name -> (file offset, size)."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("ffma_yield reads 64-bit ELF cubins only")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)

    def header(i: int) -> tuple[int, int, int]:
        name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize)
        return name, offset, size

    _, strtab, _ = header(shstrndx)
    sections = {}
    for i in range(shnum):
        name, offset, size = header(i)
        label = cubin[strtab + name:cubin.index(b"\0", strtab + name)].decode()
        if label.startswith(".text."):
            sections[label] = (offset, size)
    return sections


def ffma_runs(sass: str) -> dict[str, list[list[int]]]:
    """The runs of at least MIN_RUN consecutive FFMAs of nvdisasm's ``sass``, per text section: each run the
    byte offsets of its instructions within the section."""
    runs: dict[str, list[list[int]]] = {}
    section, current = None, []

    def close() -> None:
        if section is not None and len(current) >= MIN_RUN:
            runs.setdefault(section, []).append(list(current))
        current.clear()

    for line in sass.splitlines():
        if m := _SECTION.match(line):
            close()
            section = m[1]
        elif m := _INSTRUCTION.match(line):
            if m[2] == "FFMA":
                current.append(int(m[1], 16))
            else:
                close()
    close()
    return runs


def yield_in_ffma_runs(cubin: bytes, nvdisasm: str, fraction: float = 1.0) -> tuple[bytes, int]:
    """``cubin`` with the reuse flags and the stay hint cleared on the FFMAs of its promotion runs (the first
    ``fraction`` of each run), and how many instructions changed."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        sass = subprocess.run([nvdisasm, "-c", str(path)], capture_output=True, text=True, check=True).stdout
    sections = text_sections(cubin)
    patched = bytearray(cubin)
    changed = 0
    for section, runs in ffma_runs(sass).items():
        base, size = sections[section]
        for run in runs:
            for offset in run[: round(len(run) * fraction)]:
                assert offset + INSTRUCTION_BYTES <= size, (section, offset)
                where = base + offset + 8
                high, = struct.unpack_from("<Q", patched, where)
                if high & REUSE_FLAGS:
                    struct.pack_into("<Q", patched, where, high & ~(REUSE_FLAGS | STAY_HINT))
                    changed += 1
    return bytes(patched), changed


REQUEST = "triton_raw_ext.ffma_yield"  # a PTX comment "// triton_raw_ext.ffma_yield <percent>" asks for this
_REQUEST = re.compile(rf"//\s*{re.escape(REQUEST)}\s+(\d+)")


def yield_where_requested(ptx: str, cubin: bytes) -> bytes:
    """``cubin`` assembled from ``ptx``, with :func:`yield_in_ffma_runs` applied to the first percent of each run
    that a ``// triton_raw_ext.ffma_yield <percent>`` comment in the PTX asks for (a kernel's inline asm), else
    unchanged."""
    if not (m := _REQUEST.search(ptx)):
        return cubin
    from triton import knobs

    patched, _ = yield_in_ffma_runs(cubin, knobs.nvidia.nvdisasm.path, int(m[1]) / 100)
    return patched
