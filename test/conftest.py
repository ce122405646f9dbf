"""Test setup: private Triton and plugin caches per test run, GPU detection, AOT helper."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

_RUN_CACHES = Path(tempfile.mkdtemp(prefix="triton-raw-tests-"))
os.environ.setdefault("TRITON_CACHE_DIR", str(_RUN_CACHES / "triton"))
os.environ.setdefault("TRITON_RAW_CACHE_DIR", str(_RUN_CACHES / "raw"))
# Triton 3.9 warns that its FP-fusion default will change; the tests keep the default of 3.6-3.8.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
# Child processes of tests run a script or `-c` code from a test folder and import what lies beside it;
# the GPU setup's PYTHONSAFEPATH (which keeps the checkout from shadowing the install) would hide it.
os.environ.pop("PYTHONSAFEPATH", None)

ROOT = Path(__file__).resolve().parents[1]
TEST_DIR = Path(__file__).resolve().parent
KERNELS = TEST_DIR / "kernels"
EXAMPLE_KERNELS = ROOT / "examples" / "kernels"  # the sample kernels the benchmarks and GPU scripts share
ELF_MAGIC = b"\x7fELF"
# A definition, declaration or call instruction naming a raw function (not a value named %call.i).
RAW_FUNCTION = re.compile(r"^(?:define|declare)\b[^@\n]*@rawext_\w+|(?<![%\w.])call\b[^@\n]*@rawext_\w+", re.MULTILINE)
SM90 = None  # set lazily: importing triton here would read the cache env above too early


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment, with ``extra`` added, for a child Python process that imports the
    repository's packages (``tutorials``, ``examples``, ``scripts``) or this folder's modules
    (``conftest``, ``kernels``): the repository root and ``test/`` go on PYTHONPATH after what is
    already there, so that an installed plugin (the GPU setup's) keeps precedence over the checkout."""
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + [str(ROOT), str(TEST_DIR)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **extra}


def has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def has_nvshmem() -> bool:
    from triton_raw_ext.nvshmem_install import find_nvshmem

    return find_nvshmem(required=False) is not None


def has_per_sm_nvshmem() -> bool:
    """Whether the NVSHMEM found ships per-SM device bitcode for sm_90 (3.7 and newer), not the unified file."""
    from triton_raw_ext.errors import RawCompileError
    from triton_raw_ext.nvshmem_install import find_nvshmem

    install = find_nvshmem(required=False)
    try:
        return install is not None and install.bitcode_for(90).name.startswith("libnvshmem_device_sm_")
    except RawCompileError:
        return False


requires_gpu = pytest.mark.skipif(not has_gpu(), reason="needs a CUDA GPU (none visible)")
requires_nvshmem = pytest.mark.skipif(not has_nvshmem(), reason="needs NVSHMEM (pip install nvidia-nvshmem-cu13)")
requires_per_sm_nvshmem = pytest.mark.skipif(
    not has_per_sm_nvshmem(),
    reason="needs an NVSHMEM with per-SM device bitcode (`pip install 'nvidia-nvshmem-cu13>=3.7'`, or NVSHMEM_HOME)",
)


def aot(fn, signature: dict[str, str], constexprs: dict[str, object] | None = None, **options):
    """Compile ``fn`` (``@triton.jit`` or ``@gluon.jit``) ahead of time for sm_90 (no GPU needed) and
    return Triton's CompiledKernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.experimental.gluon._runtime import GluonASTSource

    source = GluonASTSource if fn.is_gluon() else ASTSource
    src = source(fn, signature=signature, constexprs=constexprs or {})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options or None)


def assert_raw_inlined(compiled) -> None:
    """No raw function is left defined, declared or called in the kernel's LLVM IR, and the cubin was built."""
    assert not RAW_FUNCTION.findall(compiled.asm["llir"]), "a raw function survived Triton's inliner"
    assert compiled.asm["cubin"][:4] == ELF_MAGIC


@pytest.fixture
def through_llir(monkeypatch, tmp_path):
    """AOT compiles in this test run every stage up to Triton's `llir` (the raw libraries, Triton's
    inlining, the NVSHMEM link) and give empty placeholders for the PTX and the cubin, to check many
    kernels fast. Triton's cache is the test's own folder, so no other test meets a placeholder."""
    from triton import knobs

    from triton_raw_ext.triton_version import stage_hook

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))

    def placeholder_ptx(llir: str, metadata: dict) -> str:
        metadata["name"] = re.search(r"^define ptx_kernel void @(\w+)", llir, re.MULTILINE).group(1)
        return ""

    def add_stages(backend, stages, options, language, capability):
        stages["ptx"] = placeholder_ptx
        stages["cubin"] = lambda src, metadata: b""

    previous = knobs.runtime.add_stages_inspection_hook
    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", stage_hook(add_stages, "through-llir", previous))


def stub_in(folder: Path):
    """A Python stub whose defining file is in ``folder`` (paths in @dialect resolve against it)."""
    namespace: dict = {}
    exec(compile("def f(x): ...\n", str(folder / "stub.py"), "exec"), namespace)
    return namespace["f"]


def aot_error(fn, signature: dict[str, str], constexprs: dict[str, object] | None = None) -> str:
    """Compile ``fn`` as :func:`aot` does and return the text of the error it must raise (and its cause)."""
    with pytest.raises(Exception) as info:  # Triton wraps errors from builtins in CompilationError
        aot(fn, signature, constexprs)
    text = str(info.value)
    if info.value.__cause__ is not None:
        text += "\n" + str(info.value.__cause__)
    return text


_PTXAS_REPORTS: dict[str, str] = {}  # by the PTX's digest: a test that checks spills and wgmma assembles once


def ptxas_report(ptx: str, tmp_path: Path) -> str:
    """What the ptxas Triton uses for sm_90a says (``-v``) when it assembles ``ptx``."""
    import hashlib
    import subprocess

    from triton.backends.nvidia.compiler import get_ptxas

    key = hashlib.sha256(ptx.encode()).hexdigest()
    if key not in _PTXAS_REPORTS:
        source = tmp_path / "kernel.ptx"
        source.write_text(ptx)
        _PTXAS_REPORTS[key] = subprocess.run(
            [get_ptxas(90).path, "-v", "-arch=sm_90a", str(source), "-o", str(tmp_path / "kernel.cubin")],
            capture_output=True, text=True, check=True,
        ).stderr  # fmt: skip
    return _PTXAS_REPORTS[key]


def assert_no_spills(ptx: str, tmp_path: Path) -> None:
    """Require 0 bytes of spill stores in every function ptxas reports for ``ptx``."""
    report = ptxas_report(ptx, tmp_path)
    spills = re.findall(r"(\d+) bytes spill stores", report)
    assert spills and all(int(n) == 0 for n in spills), report


def sass_cfg(sass: list[str]) -> tuple[list[list[int]], list[set[int]]]:
    """Basic blocks (indices into ``sass``, nvdisasm lines) and each block's successors. A label starts a
    block; a branch or an exit ends one; an unpredicated ``BRA``, ``EXIT`` or ``RET`` does not fall through.
    A ``BRX`` (the jump into a warp-specialized partition) goes to each of its ``BRANCH_TARGETS``."""
    blocks: list[list[int]] = [[]]
    labels: dict[str, int] = {}
    for i, line in enumerate(sass):
        if m := re.match(r"\s*(\.L_x_\d+):", line):
            if blocks[-1]:
                blocks.append([])
            labels[m[1]] = len(blocks) - 1
        elif re.search(r"\b(BRA|BRX|EXIT|RET)\b", line):
            blocks[-1].append(i)
            blocks.append([])
        elif line.strip():
            blocks[-1].append(i)
    succ: list[set[int]] = []
    for b, block in enumerate(blocks):
        last = sass[block[-1]] if block else ""
        out = {labels[m[1]]} if (m := re.search(r"BRA `\((\.L_x_\d+)\)", last)) else set()
        if targets := re.search(r'BRANCH_TARGETS ([^"]+)"', last):
            out |= {labels[name.strip()] for name in targets[1].split(",")}
        ends = re.search(r"\b(BRA|BRX|EXIT|RET)\b", last) and not re.match(r"\s*(/\*\w+\*/)?\s*@", last)
        if not ends and b + 1 < len(blocks):
            out.add(b + 1)
        succ.append(out)
    return blocks, succ


def natural_loops(succ: list[set[int]]) -> dict[int, set[int]]:
    """The natural loops of a CFG whose entries are block 0 and every block no other block branches to (a
    function of the listing, or a partition's code): each loop header and the blocks of its loop (the
    header, and every block that reaches one of its back edges' sources without passing the header). A
    back edge is an edge to a block that dominates its source; nvdisasm's out-of-line retry blocks that
    branch back into a loop are thus part of that loop, not loops of their own."""
    n = len(succ)
    pred: list[set[int]] = [set() for _ in range(n)]
    for b, out in enumerate(succ):
        for t in out:
            pred[t].add(b)
    entries = {0} | {b for b in range(n) if not pred[b] - {b}}
    dom = [set(range(n)) for _ in range(n)]
    for b in entries:
        dom[b] = {b}
    changed = True
    while changed:
        changed = False
        for b in set(range(n)) - entries:
            new = set.intersection(*(dom[p] for p in pred[b])) | {b}
            if new != dom[b]:
                dom[b], changed = new, True
    loops: dict[int, set[int]] = {}
    for src, out in enumerate(succ):
        for head in out:
            if head in dom[src]:
                body, todo = loops.setdefault(head, {head}), [src]
                while todo:
                    b = todo.pop()
                    if b not in body:
                        body.add(b)
                        todo.extend(pred[b])
    return loops


def wgmma_loop_spills(sass: list[str]) -> list[str]:
    """The local-memory loads and stores (LDL / STL: ptxas spills) of ``sass`` (nvdisasm lines) that sit in
    an innermost natural loop running wgmma (HGMMA, QGMMA for fp8)."""
    blocks, succ = sass_cfg(sass)
    loops = natural_loops(succ)
    lines = {h: sorted(i for b in body for i in blocks[b]) for h, body in loops.items()}
    wgmma = {h: body for h, body in loops.items() if any(re.search(r"\b[HQI]GMMA", sass[i]) for i in lines[h])}
    innermost = [h for h, body in wgmma.items() if not any(o != h and o in body for o in wgmma)]
    assert innermost, "no loop runs wgmma"
    return [sass[i].strip() for h in sorted(innermost) for i in lines[h] if re.search(r"\b(LDL|STL)\b", sass[i])]


def sass(cubin: bytes, tmp_path: Path) -> str:
    """The SASS of ``cubin`` (Triton's nvdisasm)."""
    import subprocess

    import triton

    path = tmp_path / "kernel.cubin"
    path.write_bytes(cubin)
    disasm = triton.knobs.nvidia.nvdisasm.path
    return subprocess.run([disasm, "-c", str(path)], capture_output=True, text=True, check=True).stdout


def assert_no_spills_in_wgmma_loops(cubin: bytes, tmp_path: Path) -> None:
    """No ptxas spill in a loop that runs wgmma (:func:`wgmma_loop_spills` on the SASS of ``cubin``): values
    a kernel spills once and reloads per work item cost a few cached loads, spills in a K loop every step."""
    spills = wgmma_loop_spills(sass(cubin, tmp_path).splitlines())
    assert not spills, spills


def assert_wgmma_pipelined(ptx: str, tmp_path: Path) -> None:
    """The kernel uses wgmma and ptxas keeps it asynchronous: no C7510 (serialised wgmma, e.g. for a
    call anywhere in the kernel)."""
    assert "wgmma.mma_async" in ptx
    report = ptxas_report(ptx, tmp_path)
    assert "C7510" not in report and "serialized" not in report, report


# Block labels: LLVM's ($L__BB0_3) and those of inline PTX (waitL_0 in NVSHMEM's per-SM waits).
_LABEL = re.compile(r"^\s*([$\w]+):")
_BRANCH = re.compile(r"^\s*(@!?%?\w+\s+)?bra(?:\.uni)?\s+([$\w]+);")
_REGISTER = re.compile(r"%[a-zA-Z]+\d+")
_INSTRUCTION = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.]*)\s+([^;]*);")
RECORD_POINTER = "triton_raw_wait_record_ptr"  # <triton_raw/bounded_wait.h>'s report of an expired wait
# The header's word that says who writes the report; its name is uniqued per .cu (a static).
_REPORT_STATE = re.compile(r"\[\w*triton_raw_wait_report_state\]")


def entry_lines(ptx: str) -> list[str]:
    """The lines of the .entry function, up to the brace that closes it (inner scopes nest; the
    functions after it, NVSHMEM's out-of-line transport code say, are left out)."""
    lines, depth = ptx[ptx.index(".entry") :].splitlines(), 0
    for i, line in enumerate(lines):
        depth += (line.strip() == "{") - (line.strip() == "}")
        if depth == 0 and line.strip() == "}":
            return lines[:i]
    raise AssertionError("the .entry function's braces do not balance")


def entry_cfg(ptx: str) -> tuple[list[list[str]], list[set[int]]]:
    """Basic blocks (lines) of the kernel's .entry function and each block's successors. A label starts
    a block, a branch ends one; ``ret``, ``exit`` and ``trap`` end a block with no successor."""
    blocks: list[list[str]] = [[]]
    labels = {}
    for line in entry_lines(ptx):
        if m := _LABEL.match(line):
            labels[m.group(1)] = len(blocks)
            blocks.append([])
        else:
            blocks[-1].append(line)
            if re.search(r"\bbrx?\.|\bbra\b", line) or re.match(r"\s*(ret|exit|trap);", line):
                blocks.append([])
    succ = []
    for i, block in enumerate(blocks):
        out, falls_through = set(), True
        for line in block:
            if re.search(r"\bbrx?\.|\bbra\b", line):
                branch = _BRANCH.match(line)
                assert branch, f"branch form this CFG does not know: {line!r}"
                out.add(labels[branch.group(2)])
                falls_through = falls_through and bool(branch.group(1))
            elif re.match(r"\s*(ret|exit|trap);", line):
                falls_through = False
        if falls_through and i + 1 < len(blocks):
            out.add(i + 1)
        succ.append(out)
    return blocks, succ


def in_cycle(block: int, succ: list[set[int]]) -> bool:
    """Whether control can come back to ``block`` after leaving it."""
    seen, todo = set(), list(succ[block])
    while todo:
        b = todo.pop()
        if b == block:
            return True
        if b not in seen:
            seen.add(b)
            todo.extend(succ[b])
    return False


def entry_param(ptx: str, index: int) -> str:
    """The PTX name of the kernel's ``index``-th parameter (Triton's non-constexpr arguments, in order)."""
    header = ptx[ptx.index(".entry") : ptx.index(")", ptx.index(".entry"))]
    return re.findall(r"\.param\s[^,]*?\s([$\w]+)\s*(?:,|$)", header)[index]


def _derivations(lines: list[str]) -> dict[str, set[str]]:
    """Register -> the kernel parameters (PTX names) and special registers (``%globaltimer``) its value
    is computed from, over every path (a fixpoint over the instructions, loops included)."""
    roots: dict[str, set[str]] = {}
    changed = True
    while changed:
        changed = False
        for line in lines:
            m = _INSTRUCTION.match(line)
            if not m or m.group(1).split(".")[0] in ("st", "bra", "call", "ret", "trap", "red", "atom"):
                continue
            first, _, rest = m.group(2).partition(",")
            found = {r for reg in _REGISTER.findall(rest) for r in roots.get(reg, {reg})}
            found |= set(re.findall(r"\[([$\w]+_param_\d+)\]", rest)) | set(re.findall(r"%globaltimer", rest))
            for dst in _REGISTER.findall(first):
                if not found <= roots.setdefault(dst, set()):
                    roots[dst] |= found
                    changed = True
    return roots


def assert_no_trap_before_the_report(ptx: str) -> None:
    """A thread whose wait expired cannot end the kernel before the report is written: on every path
    from a claim of the report (an atomic on the header's report state) to a ``trap``, the thread
    stores that state (the one that claimed it: written) or reads it (any other: it waits for the
    writer). A trap on another path would end the kernel, the writer's stores to host memory with it."""
    blocks, succ = entry_cfg(ptx)
    claims = [(b, i) for b, block in enumerate(blocks) for i, ln in enumerate(block)
              if re.match(r"\s*(@!?%\w+\s+)?atom\.", ln) and _REPORT_STATE.search(ln)]  # fmt: skip
    assert claims, "no thread claims the report with an atomic on the report state"
    for block, line in claims:
        seen: set[int] = set()
        todo = [(block, line + 1)]
        while todo:
            b, first = todo.pop()
            for ln in blocks[b][first:]:
                if _REPORT_STATE.search(ln) and re.match(r"\s*(@!?%\w+\s+)?(ld|st)\.", ln):
                    break
                assert not re.match(r"\s*trap;", ln), f"an expired wait traps before the report is written (block {b})"
            else:
                todo.extend((s, 0) for s in succ[b] - seen)
                seen |= succ[b]


def assert_bounded_wait(ptx: str, timeout: str | int) -> None:
    """The kernel waits through ``<triton_raw/bounded_wait.h>``: its .entry function compares a
    %globaltimer difference with the bound derived from ``timeout`` (the PTX name of the kernel's
    timeout parameter, or a constant number of milliseconds); a path leads from the entry to ``ret``
    without reading the clock or trapping (the flags already up); the wait makes no call (a call makes
    ptxas serialise wgmma; only NVSHMEM's own proxy paths may call); the expired path reads
    ``triton_raw_wait_record_ptr``, writes the record with a system-scope fence before its ``ready``
    word, and traps, no thread before the report is written (:func:`assert_no_trap_before_the_report`)."""
    lines = entry_lines(ptx)
    roots = _derivations(lines)
    bound = {f"{timeout}"} if isinstance(timeout, str) else {str(timeout * 1_000_000), str(timeout * 1_000_000 + 1)}
    compared = []
    for line in lines:
        m = _INSTRUCTION.match(line)
        if m and m.group(1).startswith("setp."):
            operands = [o.strip() for o in m.group(2).split(",")[1:]]
            sources = [roots.get(o, set()) | {o} for o in operands]
            if any("%globaltimer" in s for s in sources) and any(s & bound for s in sources):
                compared.append(line.strip())
    assert compared, f"no comparison of a %globaltimer difference with the bound from {timeout}"
    calls = [ln for ln in lines if re.match(r"\s*(@!?%\w+\s+)?call", ln)]
    assert all("nvshmem" in ln for ln in calls), f"the wait or its report makes a call: {calls}"
    blocks, succ = entry_cfg(ptx)
    slow = [i for i, b in enumerate(blocks) if any(re.search(r"%globaltimer|\btrap;", ln) for ln in b)]
    reach, todo = set(), [0]
    while todo:
        b = todo.pop()
        if b not in reach and b not in slow:
            reach.add(b)
            todo.extend(succ[b])
    assert any(re.match(r"\s*ret;", ln) for b in reach for ln in blocks[b]), "every path reads the clock or traps"
    body = "\n".join(lines)
    assert re.search(rf"ld\.global(\.\w+)*\.b64\s+%rd\d+, \[{RECORD_POINTER}\]", body), "the record is not read"
    assert re.search(r"fence\.sc\.sys|membar\.sys", body) and re.search(r"^\s*trap;", body, re.MULTILINE)
    assert re.search(rf"^\.visible \.global \.align 8 \.u64 {RECORD_POINTER};", ptx, re.MULTILINE), \
        "the record pointer is not defined for cuModuleGetGlobal"
    assert_no_trap_before_the_report(ptx)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_RUN_CACHES, ignore_errors=True)


FAKE_SMI = """#!/bin/sh
case "$*" in
  *--list-gpus*) i=0; while [ $i -lt {gpus} ]; do echo "GPU $i: NVIDIA H200 (UUID: GPU-$i)"; i=$((i+1)); done ;;
  *) i=0; while [ $i -lt {gpus} ]; do echo "NVIDIA H200, 580.159.04"; i=$((i+1)); done ;;
esac
"""
# Records every call (arguments and what came on stdin) in $FAKE_MPS_LOG.
FAKE_MPS = """#!/bin/sh
echo "mps $* $(cat 2>/dev/null | tr -d '\\n')" >>"$FAKE_MPS_LOG"
"""


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | 0o100)


def fake_gpu_host(tmp_path: Path, gpus: int, fake_python: str | None = None) -> Path:
    """A bin folder to put first on PATH so that ``scripts.gpu.suite --no-setup`` runs on CPU: a fake
    ``nvidia-smi`` listing ``gpus`` H200s, a fake ``nvidia-cuda-mps-control`` that records its calls in
    ``$FAKE_MPS_LOG``, and, if given, ``fake_python`` (formatted with ``real``, this interpreter) as
    ``python3``."""
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "nvidia-smi", FAKE_SMI.format(gpus=gpus))
    _executable(bin_dir / "nvidia-cuda-mps-control", FAKE_MPS)
    if fake_python is not None:
        _executable(bin_dir / "python3", fake_python.format(real=sys.executable))
    return bin_dir


def run_suite(args: list[str], bin_dir: Path | None = None, timeout: float = 120, **env: str):
    """Run ``python -m scripts.gpu.suite ARGS[0] --no-setup ARGS[1:]`` from the repository root with
    ``bin_dir`` first on PATH and ``env`` added; returns the CompletedProcess (stdout and stderr as text)."""
    import subprocess
    import sys

    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}" if bin_dir else os.environ["PATH"]
    return subprocess.run([sys.executable, "-m", "scripts.gpu.suite", args[0], "--no-setup", *args[1:]], cwd=ROOT,
                          env=child_env(PATH=path, **env), capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def cubin_symbols(cubin: bytes) -> dict[str, bool]:
    """The named symbols of an ELF cubin's symbol tables, each with whether it is defined (its section
    index is not 0). Raises AssertionError unless ``cubin`` is an executable 64-bit ELF."""
    import struct

    assert cubin[:4] == ELF_MAGIC and cubin[4] == 2, "not a 64-bit ELF"
    assert struct.unpack_from("<H", cubin, 0x10)[0] == 2, "not an executable ELF (ET_EXEC): the link did not run"
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    symbols: dict[str, bool] = {}
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        strings = sections[link][4]
        for at in range(offset, offset + size, entsize):
            name_at, _, _, shndx = struct.unpack_from("<IBBH", cubin, at)
            name = cubin[strings + name_at : cubin.index(b"\0", strings + name_at)].decode()
            if name:
                symbols[name] = symbols.get(name, False) or shndx != 0
    return symbols


DRIVER_SYMBOLS = ("__assertfail", "vprintf")  # left undefined by ptxas; the driver provides them at load


def assert_nvshmem_linked(compiled) -> None:
    """The kernel's cubin is executable, defines NVSHMEM's device state and every collective that was linked
    as a precompiled object, and leaves nothing undefined but what the driver provides (its reserved
    shared-memory symbols, ``__assertfail``, ``vprintf``)."""
    symbols = cubin_symbols(compiled.asm["cubin"])
    undefined = [name for name, defined in symbols.items()
                 if not defined and not name.startswith(".nv.reserved") and name not in DRIVER_SYMBOLS]
    assert not undefined, f"unresolved symbols in the cubin: {undefined}"
    assert symbols.get("nvshmemi_device_state_d"), "NVSHMEM's device state must be defined in the cubin"
    objects = compiled.metadata.raw_nvshmem_objects
    assert all(symbols.get(name) for name in objects), f"collectives missing from the cubin: {objects}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a test's own process group)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_gloo(rank: int, world: int, port: int) -> None:
    """Join a CPU (gloo) process group of ``world`` ranks rendezvousing on ``port`` of 127.0.0.1."""
    import datetime

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))  # fmt: skip


# The plugin's packages (``passes`` and ``runtime`` installed into it) and the repository's own
REPOSITORY_PACKAGES = ("triton_raw_ext", "triton_raw_ext.passes", "triton_raw_ext.runtime", "tutorials", "scripts",
                       "examples", "bench")  # fmt: skip


def repository_modules() -> dict[str, Path]:
    """Every module of :data:`REPOSITORY_PACKAGES`, by dotted name, at the folders the install maps them from."""
    found: dict[str, Path] = {}
    for package in REPOSITORY_PACKAGES:
        (folder,) = importlib.util.find_spec(package).submodule_search_locations
        for path in sorted(Path(folder).rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if not all((Path(folder, *parts[:i]) / "__init__.py").is_file() for i in range(len(parts))):
                continue  # a folder that is not a package (data, headers)
            name = ".".join((package, *parts))
            found[name.removesuffix(".__init__")] = path
    return found
