"""``triton-raw doctor``, run as a real command in a subprocess.

Every run gets its own Triton and plugin cache folders, so the tests never touch the user's caches.
Expected versions come from the plugin's own discovery in this process: the doctor must print what
the compile path would use (on the reference box: clang 22, NVSHMEM 3.4.5).
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from triton_raw_ext.nvshmem_install import find_nvshmem
from triton_raw_ext.toolchain import CLANG_INSTALL_HINT, find_clang

CLI = "import sys; from triton_raw_ext.doctor import main; sys.exit(main(sys.argv[1:]))"


def run_doctor(
    tmp_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    flags: tuple[str, ...] = (),
    code: str = CLI,
) -> subprocess.CompletedProcess[str]:
    """Run ``python [flags] -c code args`` with fresh cache folders under ``tmp_path``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_RAW_", "NVSHMEM_HOME"))}
    environ |= {"TRITON_CACHE_DIR": str(tmp_path / "triton"), "TRITON_RAW_CACHE_DIR": str(tmp_path / "raw")}
    environ |= env or {}
    return subprocess.run(
        [sys.executable, *flags, "-c", code, *args], capture_output=True, text=True, env=environ, timeout=300
    )


def test_console_script_help() -> None:
    script = shutil.which("triton-raw")
    if script is None:
        pytest.skip("the triton-raw console script is not on PATH (run `pip install -e .`)")
    top = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=120)
    sub = subprocess.run([script, "doctor", "--help"], capture_output=True, text=True, timeout=120)
    assert top.returncode == 0 and "doctor" in top.stdout
    assert sub.returncode == 0 and "--json" in sub.stdout and "--check" in sub.stdout


def test_doctor_reports_the_toolchain(tmp_path: Path) -> None:
    proc = run_doctor(tmp_path, "doctor")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    clang = find_clang()
    assert f"version: {'.'.join(map(str, clang.version))}" in proc.stdout
    assert clang.command[0] in proc.stdout
    nvshmem = find_nvshmem(required=False)
    if nvshmem is not None:
        assert f"version: {nvshmem.version_str}" in proc.stdout
        assert str(nvshmem.host_library) in proc.stdout
    assert str(tmp_path / "raw") in proc.stdout
    assert "compile path: usable" in proc.stdout


def test_doctor_json(tmp_path: Path) -> None:
    proc = run_doctor(tmp_path, "doctor", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["compile_path_usable"] is True
    parts = report["components"]
    assert parts["clang"]["facts"]["version"].split(".")[0] == str(find_clang().version[0])
    assert {"triton", "cuda_headers", "llvmlite", "llvm_link", "nvlink", "nvshmem", "plugin_cache", "backend_hook",
            "gpu"} <= set(parts)
    assert parts["backend_hook"]["ok"] is True
    assert parts["triton"]["facts"]["llvm"].startswith(tuple("0123456789"))


def test_doctor_check_compiles(tmp_path: Path) -> None:
    proc = run_doctor(tmp_path, "doctor", "--check", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check = json.loads(proc.stdout)["components"]["check"]
    assert check["ok"] is True and check["facts"]["cubin_bytes"] > 0
    assert check["facts"]["raw_function_inlined"] is True


def test_missing_clang_exits_1_with_the_fix(tmp_path: Path) -> None:
    proc = run_doctor(tmp_path, "doctor", env={"TRITON_RAW_CLANG": "/nonexistent"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "TRITON_RAW_CLANG=/nonexistent does not run as clang" in proc.stdout
    assert f"fix: {CLANG_INSTALL_HINT}" in proc.stdout
    assert "apt-get install clang-22" in proc.stdout
    assert "compile path: NOT usable" in proc.stdout


def _site_without_nvshmem(farm: Path) -> Path | None:
    """A copy of the site-packages folder holding the NVSHMEM wheel, as symlinks, without that wheel."""
    nvshmem = find_nvshmem(required=False)
    if nvshmem is None:
        return None
    site_dir = nvshmem.root.parent.parent
    if site_dir.name not in ("site-packages", "dist-packages"):
        return None  # NVSHMEM is not a wheel here (e.g. NVSHMEM_HOME); nothing this test can hide
    farm.mkdir()
    for entry in site_dir.iterdir():
        if entry.name.lower().startswith("nvidia_nvshmem"):
            continue  # the wheel's dist-info
        if entry.name == "nvidia":
            (farm / "nvidia").mkdir()
            for sub in entry.iterdir():
                if sub.name != "nvshmem":
                    (farm / "nvidia" / sub.name).symlink_to(sub)
        else:
            (farm / entry.name).symlink_to(entry)
    return site_dir


def test_missing_nvshmem_is_reported_with_the_fix(tmp_path: Path) -> None:
    """The same interpreter and packages, but the NVSHMEM wheel's files left out of the site folder.

    ``python -S`` skips the normal site setup; the symlinked copy of site-packages (without
    ``nvidia/nvshmem``) is added with :func:`site.addsitedir`, which also runs the editable install's
    ``.pth`` hook. Other site folders (user site, system dist-packages) are left out as well.
    """
    site_dir = _site_without_nvshmem(tmp_path / "site")
    if site_dir is None:
        pytest.skip("the NVSHMEM wheel is not installed in a site-packages folder; nothing to hide")
    others = [p for p in site.getsitepackages() if Path(p).resolve() != site_dir.resolve()]
    if any((Path(p) / "nvidia" / "nvshmem").is_dir() for p in others):
        pytest.skip("NVSHMEM is installed in more than one site folder")
    boot = f"import site; site.addsitedir({str(tmp_path / 'site')!r}); {CLI}"
    proc = run_doctor(tmp_path, "doctor", flags=("-S",), code=boot)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "nvshmem: not available (optional)" in proc.stdout
    assert "pip install nvidia-nvshmem-cu13" in proc.stdout
    assert "compile path: usable" in proc.stdout
