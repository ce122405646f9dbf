"""Run a GPU suite: its steps in order under one budget, a PASS/FAIL table, one JSON.

Usage, from the repository root of the GPU machine (carry .debs/ when it has no clang)::

    python3 -m scripts.gpu.suite SUITE [--out DIR] [--budget S] [--max-step-s S]
    python3 -m scripts.gpu.suite exec [--shared-gpu] [--triton-bundle DIR] [--nvshmem-bundle DIR] -- COMMAND ...

SUITE is one of ``suites.SUITES`` (core, runtime, t1, t1_sweep, t2, t3, t3_tune, t3_persistent, t3_trace,
t3_experts, t3_gluon, faults, nvshmem, multi_gpu, serving, launch_paths, all, tutorials); ``exec`` runs one command
as a one-step suite (``--shared-gpu``: its PEs share GPU 0, as a suite's steps can). Before the steps,
``scripts/gpu/setup.sh`` installs the plugin into /tmp/site and provides clang (``--no-setup``: use this environment
as it is). Every step gets the NVLink-multicast-off variables (``MULTICAST_OFF``: they are set nowhere else), Python
fault handlers, its suite's variables and its own; steps whose PEs share GPU 0 run with MPS on, started and stopped
here. A step runs under min(its limit, the budget's time left - 10 s, ``--max-step-s``); one that would start with
under 40 s of the budget left is skipped. A step still running 5 s before its limit gets SIGABRT on every leaf
process (the torchrun workers), so that each prints its Python stacks into the step's log (native ones first when
``.debs/py-spy`` is carried), and is then killed. ``--triton-bundle`` / ``--nvshmem-bundle`` put a release packed by
``pack_bundle.sh`` in front of the installed one for every step.

Results go to ``--out`` (default ``$OUT``, else ``bench/results/<date>-<N>x<GPU>-<suite>/``): one
``<step>.log`` and one ``<step>/`` folder (the files the step wrote) per step, and ``<suite>.json``:
the run's metadata (``tutorials.common.run_metadata``: date, command, GPUs, the versions the steps
see), budget, every step's result, seconds, limit and the JSON it wrote, and what the suite's report
read back. Exit status 0 when every required step passed
(GOAL_MISSED counts as passed: the benchmark ran).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from tutorials.common import run_metadata

from .suites import SUITES, Step, Suite

ROOT = Path(__file__).resolve().parents[2]
MULTICAST_OFF = {"NVSHMEM_DISABLE_NVLS": "1", "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
# Unbuffered output keeps a log in order; a SIGABRT'ed Python prints every thread's stack.
STEP_ENV = {**MULTICAST_OFF, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
MIN_STEP_S = 30  # a step that would get less is skipped
STACKS_LEAD_S = 5  # SIGABRT this long before the limit
TIMEOUT_EXIT = 124


def setup_env() -> dict[str, str]:
    """The environment ``scripts/gpu/setup.sh`` leaves (its output goes to stderr)."""
    done = subprocess.run(["bash", "-c", 'source scripts/gpu/setup.sh >&2 && env -0'], cwd=ROOT, stdout=subprocess.PIPE,
                          check=True)  # fmt: skip
    return dict(item.split("=", 1) for item in done.stdout.decode().split("\0") if "=" in item)


def _unpack(bundle: Path, dest: Path) -> None:
    """Unpack a bundle of ``pack_bundle.sh`` (``*.tar.xz``, Triton's ``*.zst`` libraries) into ``dest``,
    once per bundle content (a warm machine keeps /tmp)."""
    digest = hashlib.sha1()
    for part in sorted(bundle.iterdir()):
        digest.update(part.read_bytes())
    stamp = dest / ".bundle"
    if stamp.is_file() and stamp.read_text() == digest.hexdigest():
        return
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for archive in sorted(bundle.glob("*.tar.xz")):
        with tarfile.open(archive) as tar:
            tar.extractall(dest)  # noqa: S202 - our own bundle
    zstd = shutil.which("zstd") or str(bundle / "zstd")  # the Triton bundle brings one
    for packed in sorted(bundle.glob("*.zst")):
        subprocess.run([zstd, "-q", "-d", str(packed), "-o", str(dest / "triton" / "_C" / packed.stem)], check=True)
    stamp.write_text(digest.hexdigest())


def bundle_env(env: dict[str, str], triton: Path | None, nvshmem: Path | None, root: Path) -> dict[str, str]:
    """``env`` with a carried Triton release in front of the installed one and/or a carried NVSHMEM as
    NVSHMEM_HOME, its host library preloaded (torch links its own; the host library is backward
    compatible within major 3, so the whole process then uses the bundle's, as when torch pins it)."""
    env = dict(env)
    if triton is not None:
        _unpack(triton, root / "triton-bundle")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root / "triton-bundle"), env.get("PYTHONPATH")]))
        # The bundle holds only the ptxas its Triton assembles sm_90 with (3.6-3.8: ptxas, 3.9: ptxas-blackwell);
        # Triton resolves both names, so the missing one points at it.
        bin_dir = root / "triton-bundle" / "triton" / "backends" / "nvidia" / "bin"
        for missing, present, variable in (("ptxas-blackwell", "ptxas", "TRITON_PTXAS_BLACKWELL_PATH"),
                                           ("ptxas", "ptxas-blackwell", "TRITON_PTXAS_PATH")):  # fmt: skip
            if not (bin_dir / missing).exists() and (bin_dir / present).exists():
                env.setdefault(variable, str(bin_dir / present))
    if nvshmem is not None:
        home = root / "nvshmem-bundle"
        _unpack(nvshmem, home)
        env["NVSHMEM_HOME"] = str(home)
        env["LD_PRELOAD"] = os.pathsep.join(filter(None, [str(home / "lib" / "libnvshmem_host.so.3"),
                                                          env.get("LD_PRELOAD")]))  # fmt: skip
    return env


class Mps:
    """The MPS daemon for steps whose PEs share one GPU (so that their spinning kernels run at once):
    started before the first such step, stopped before a step without it, after a step that timed out
    (the next starts clean) and at the end. A daemon that was already running is left alone."""

    def __init__(self) -> None:
        self.state = "off"

    def _control(self, *args: str, text: str | None = None) -> str:
        try:
            done = subprocess.run(["nvidia-cuda-mps-control", *args], input=text, capture_output=True, text=True,
                                  timeout=30)  # fmt: skip
        except (OSError, subprocess.SubprocessError) as exc:
            return f"unavailable: {exc}"
        return "ok" if done.returncode == 0 else f"failed: {done.stderr.strip()}"

    def want(self, on: bool) -> None:
        if on and self.state == "off":
            running = subprocess.run(["pgrep", "-x", "nvidia-cuda-mps"], capture_output=True).returncode == 0
            self.state = "theirs" if running else ("on" if self._control("-d") == "ok" else "off")
            print(f"== MPS: {'already running' if running else self.state}", flush=True)
        elif not on and self.state == "on":
            self._control(text="quit\n")
            self.state = "off"


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(stat.parent.name))
    return kids


def leaf_processes(pid: int) -> list[int]:
    """The processes under ``pid`` with no children of their own (a torchrun job's workers), or ``pid``."""
    kids, leaves, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        if kids.get(p):
            todo.extend(kids[p])
        else:
            leaves.append(p)
    return leaves


def run_bounded(command: list[str], env: dict[str, str], limit_s: float, log: Path) -> int:
    """Run ``command`` with its output in ``log``; the exit status, or 124 when it was still running
    ``STACKS_LEAD_S`` before ``limit_s``: then every leaf process got SIGABRT (its Python stacks go to
    the log) and, 10 s later, the whole process group SIGKILL."""
    with log.open("ab") as out:
        try:
            proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip
        except OSError as exc:  # not found, not executable: the step fails, the suite goes on
            out.write(f"cannot start {command[0]}: {exc}\n".encode())
            return 127
        try:
            return proc.wait(timeout=max(limit_s - STACKS_LEAD_S, 1))
        except subprocess.TimeoutExpired:
            pass
        out.write(f"=== still running after {limit_s - STACKS_LEAD_S:.0f}s: SIGABRT to every leaf process "
                  "for its stacks\n".encode())  # fmt: skip
        out.flush()
        for leaf in leaf_processes(proc.pid):
            if os.access(ROOT / ".debs" / "py-spy", os.X_OK):  # native frames too (CUDA driver, NVSHMEM)
                dump = subprocess.run([str(ROOT / ".debs" / "py-spy"), "dump", "--native", "--pid", str(leaf)],
                                      capture_output=True, text=True, timeout=20)  # fmt: skip
                out.write(f"=== py-spy dump --native --pid {leaf}\n{dump.stdout[-12000:]}".encode())
                out.flush()
            try:
                os.kill(leaf, signal.SIGABRT)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        return TIMEOUT_EXIT


def only_goal_missed(log: str) -> bool:
    """torchrun exits 1 when a worker exits 2 ("ran, a goal was not met"): true when every failed worker
    in its report exited 2 and the others were only stopped by torchrun (-15)."""
    codes = re.findall(r"exitcode +: (-?\d+) ", log)
    return "2" in codes and all(c in ("2", "-15") for c in codes)


def verdict(step: Step, rc: int, limit_s: int, log: str) -> str:
    if rc == 0:
        return "PASS"
    if rc == TIMEOUT_EXIT:
        return f"TIMEOUT({limit_s}s)"
    if step.benchmark and (rc == 2 or only_goal_missed(log)):
        return "GOAL_MISSED"
    return f"FAIL(rc={rc})"


def _written_json(folder: Path) -> dict:
    found = {}
    for path in sorted(folder.rglob("*.json")):
        try:
            found[str(path.relative_to(folder))] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            found[str(path.relative_to(folder))] = {"unreadable": repr(exc)}
    return found


class Runner:
    """Runs steps into ``out`` with ``env`` until ``deadline`` (time.monotonic())."""

    def __init__(self, out: Path, env: dict[str, str], deadline: float, max_step_s: int | None) -> None:
        self.out, self.env, self.deadline, self.max_step_s = out, env, deadline, max_step_s
        self.mps = Mps()
        self.results: list[dict] = []

    def run(self, step: Step, suite_env: dict[str, str], deadline: float, prefix: str = "") -> dict:
        name = prefix + step.name
        left = int(min(deadline, self.deadline) - time.monotonic()) - 10
        limit = min(step.timeout_s, left, self.max_step_s or step.timeout_s)
        result = {"step": name, "result": "SKIP(budget)", "seconds": 0, "limit_s": max(limit, 0),
                  "required": step.required}  # fmt: skip
        if left < MIN_STEP_S:
            print(f"=== {name}: skipped, {left + 10}s of the budget left", flush=True)
            self.results.append(result)
            return result
        folder = self.out / name
        folder.mkdir(parents=True, exist_ok=True)
        command = [arg.replace("{dir}", str(folder)) for arg in step.command]
        env = {**self.env, **STEP_ENV, **suite_env, **step.env}
        if step.shared_gpu:
            env["TRITON_RAW_SHARED_GPU"] = "1"
        else:
            env.pop("TRITON_RAW_SHARED_GPU", None)
        self.mps.want(step.shared_gpu)
        print(f"=== {name} (limit {limit}s): {shlex.join(command)}", flush=True)
        log = self.out / f"{name}.log"
        log.write_text("")
        start = time.monotonic()
        rc = run_bounded(command, env, limit, log)
        text = log.read_text(errors="replace")
        print("\n".join(text.splitlines()[-15:]), flush=True)
        result.update(result=verdict(step, rc, limit, text), seconds=round(time.monotonic() - start),
                      log=log.name, files=_written_json(folder))  # fmt: skip
        if rc == TIMEOUT_EXIT:
            self.mps.want(False)
        self.results.append(result)
        return result

    def run_suite(self, suite: Suite, cap_s: float | None = None) -> None:
        deadline = self.deadline if cap_s is None else time.monotonic() + cap_s
        for part, part_cap in suite.parts:
            print(f"== {part.name} (at most {part_cap}s)", flush=True)
            self.run_suite(part, part_cap)
        prefix = f"{suite.name}/" if cap_s is not None else ""
        for step in suite.steps:
            self.run(step, suite.env, deadline, prefix)


def _default_out(suite: str, gpus: list[str]) -> Path:
    model = gpus[0].split(",")[0].split()[-1] if gpus else "nogpu"  # "NVIDIA H200, 580..." -> H200
    base = ROOT / "bench" / "results" / f"{datetime.date.today()}-{len(gpus)}x{model}-{suite}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


def _reports(suite: Suite, out: Path, results: dict[str, dict]) -> tuple[list[str], dict]:
    lines, extra = suite.report(out, results) if suite.report else ([], {})
    for part, _ in suite.parts:
        more, more_extra = _reports(part, out / part.name, results)
        lines, extra = lines + more, {**extra, **more_extra}
    return lines, extra


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", choices=[*SUITES, "exec"])
    parser.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    parser.add_argument("--budget", type=int, help="seconds for the whole run, setup included (default: the suite's)")
    parser.add_argument("--max-step-s", type=int, help="no step runs longer (a short look at where a hang is)")
    parser.add_argument("--shared-gpu", action="store_true",
                        help="exec: the command's PEs share GPU 0 (MPS on, TRITON_RAW_SHARED_GPU=1)")
    parser.add_argument("--no-setup", action="store_true", help="use this environment as it is (plugin installed)")
    parser.add_argument("--triton-bundle", type=Path, help="a Triton release packed by pack_bundle.sh")
    parser.add_argument("--nvshmem-bundle", type=Path, help="an NVSHMEM release packed by pack_bundle.sh")
    parser.add_argument("--bundle-root", type=Path, default=Path("/tmp"), help="where bundles are unpacked")
    argv = sys.argv[1:] if argv is None else argv
    command = argv[argv.index("--") + 1 :] if "--" in argv else []  # exec's command
    args = parser.parse_args(argv[: len(argv) - len(command) - (1 if "--" in argv else 0)])
    started = time.monotonic()
    gpus = run_metadata.gpus()
    if args.suite == "exec":
        if not command:
            parser.error("exec needs a command after --")
        step = Step("command", tuple(command), args.budget or 540, shared_gpu=args.shared_gpu)
        suite = Suite("exec", [step], budget_s=args.budget or 540)
    else:
        suite = SUITES[args.suite](len(gpus))
    budget = args.budget or suite.budget_s
    out = (args.out or _default_out(suite.name, gpus)).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ) if args.no_setup else setup_env()
    env = bundle_env(env, args.triton_bundle, args.nvshmem_bundle, args.bundle_root)
    runner = Runner(out, env, started + budget, args.max_step_s)
    try:
        runner.run_suite(suite)
    finally:
        runner.mps.want(False)
    results = {r["step"]: r for r in runner.results}
    lines, extra = _reports(suite, out, results)
    stack = subprocess.run(["python3", "-m", "tutorials.common.run_metadata"], env={**env, **STEP_ENV},
                           capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    try:
        versions = json.loads(stack.stdout.splitlines()[-1])
    except (ValueError, IndexError):
        versions = {"error": stack.stderr[-2000:]}
    total = round(time.monotonic() - started)
    doc = {"suite": suite.name, **run_metadata.run_metadata(["python3", "-m", "scripts.gpu.suite", *argv], versions),
           "budget_s": budget, "total_s": total, "env": {**STEP_ENV, **suite.env},
           "bundles": {"triton": str(args.triton_bundle or ""), "nvshmem": str(args.nvshmem_bundle or "")},
           "steps": runner.results, **extra}  # fmt: skip
    (out / f"{suite.name}.json").write_text(json.dumps(doc, indent=1))
    print(f"\n{suite.name} suite ({len(gpus)} x {gpus[0] if gpus else 'no GPU'}), {total}s of {budget}s:")
    print(f"{'step':<34} {'result':<16} {'s':>4}")
    for r in runner.results:
        print(f"{r['step']:<34} {r['result']:<16} {r['seconds']:>4}" + ("" if r["required"] else "  (not required)"))
    if lines:
        print("\n" + "\n".join(lines))
    print(f"results in {out}")
    ok = all(r["result"] in ("PASS", "GOAL_MISSED") for r in runner.results if r["required"])
    return 0 if ok and runner.results else 1


if __name__ == "__main__":
    sys.exit(main())
