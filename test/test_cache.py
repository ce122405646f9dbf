"""Cache keys and on-disk caches across processes: invalidation, concurrency, interruption."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import pkgutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import EXAMPLE_KERNELS, child_env, requires_nvshmem

from triton_raw_ext import nvshmem_install, version
from triton_raw_ext.dialect import dialect
from triton_raw_ext.toolchain import usable_nvlink

KERNEL_PY = textwrap.dedent('''
    import json, sys
    import triton, triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton_raw_ext import dialect

    @dialect(name="cuda", file="k-device.cu", defines=sys.argv[1:])
    def bump(x): ...

    @triton.jit
    def kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, bump(tl.load(x_ptr + offs)))

    src = ASTSource(kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": "constexpr"},
                    constexprs={"BLOCK": 128})
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32))
    print(json.dumps({"hash": c.hash, "ptx": c.asm["ptx"]}))
''')

RING_PY = textwrap.dedent('''
    from conftest import aot
    from examples.kernels import raw_kernels as k
    sig = {"buf": "*i32", "slot": "*i32", "sig": "*u64", "out": "*i32", "step": "i64", "BLOCK": "constexpr"}
    c = aot(k.ring_kernel, sig, {"BLOCK": 128})
    print(c.hash)
''')


def _env(tmp: Path) -> dict[str, str]:
    return child_env(TRITON_CACHE_DIR=str(tmp / "triton"), TRITON_RAW_CACHE_DIR=str(tmp / "raw"))


def _compile(workdir: Path, *defines: str) -> dict:
    out = subprocess.run([sys.executable, "k.py", *defines], cwd=workdir, env=_env(workdir), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "k.py").write_text(KERNEL_PY)
    (tmp_path / "k-device.cu").write_text(
        '#ifndef STEP\n#define STEP 1.0f\n#endif\nextern "C" __device__ float bump(float x) { return x + STEP; }\n'
    )
    return tmp_path


def test_editing_the_cu_or_a_flag_changes_the_kernel_across_processes(workdir: Path):
    first = _compile(workdir)
    again = _compile(workdir)
    assert again["hash"] == first["hash"]
    assert "0f3F800000" in first["ptx"]  # + 1.0f

    source = workdir / "k-device.cu"
    source.write_text(source.read_text().replace("1.0f", "3.0f"))
    edited = _compile(workdir)
    assert edited["hash"] != first["hash"]
    assert "0f40400000" in edited["ptx"] and "0f3F800000" not in edited["ptx"]  # + 3.0f

    flagged = _compile(workdir, "STEP=5.0f")
    assert flagged["hash"] not in (first["hash"], edited["hash"])
    assert "0f40A00000" in flagged["ptx"]  # + 5.0f


def test_local_include_is_part_of_the_key(tmp_path: Path):
    (tmp_path / "step.h").write_text("#define STEP 1.0f\n")
    source = '#include "step.h"\nextern "C" __device__ float f(float x) { return x + STEP; }\n'
    (tmp_path / "x-device.cu").write_text(source)
    fn = dialect(name="cuda", file=str(tmp_path / "x-device.cu"))(lambda x: None)
    before = fn.cache_key
    (tmp_path / "step.h").write_text("#define STEP 2.0f\n")
    assert fn.cache_key != before


def test_plugin_version_is_part_of_the_key(monkeypatch):
    fn = dialect(name="cuda", file=str(EXAMPLE_KERNELS / "add-device.cu"))(lambda x: None)
    before = fn.cache_key
    monkeypatch.setattr(version, "__version__", "999.0")
    version.code_digest.cache_clear()
    try:
        assert fn.cache_key != before
    finally:
        monkeypatch.undo()
        version.code_digest.cache_clear()


def test_the_code_digest_reads_every_module_and_header_of_the_plugin():
    digested = {path.resolve() for _, path in version.code_files()}
    for package in version.PACKAGES:
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
            spec = info.module_finder.find_spec(info.name)
            module_file = Path(spec.origin).resolve()
            assert module_file in digested, f"{package}.{info.name} is not part of the code digest"
    headers = Path(importlib.import_module("triton_raw_ext").__file__).parent / "include"
    assert {h.resolve() for h in headers.rglob("*.h")} <= digested
    names = {name for name, _ in version.code_files()}
    assert {"triton_raw_ext/language.py", "triton_raw_ext/dialect.py", "triton_raw_ext/backend_hook.py",
            "triton_raw_ext.passes/abi_wrappers.py"} <= names  # fmt: skip


def test_an_edit_of_a_digested_file_changes_the_digest(monkeypatch, tmp_path: Path):
    module = tmp_path / "module.py"
    module.write_text("X = 1\n")
    monkeypatch.setattr(version, "code_files", lambda: [("triton_raw_ext/module.py", module)])
    version.code_digest.cache_clear()
    try:
        before = version.code_digest()
        module.write_text("X = 2\n")
        version.code_digest.cache_clear()
        assert version.code_digest() != before
    finally:
        monkeypatch.undo()
        version.code_digest.cache_clear()


@requires_nvshmem
def test_nvshmem_library_change_changes_identity(tmp_path: Path):
    real = nvshmem_install.find_nvshmem()
    fake_root = tmp_path / "nvshmem"
    (fake_root / "lib").mkdir(parents=True)
    (fake_root / "include").symlink_to(real.include_dir)
    bc = fake_root / "lib" / "libnvshmem_device.bc"
    bc.write_bytes(b"version one")
    fake = nvshmem_install.NvshmemInstall(fake_root)
    before = nvshmem_install.identity(fake)
    time.sleep(0.01)
    bc.write_bytes(b"version two")
    assert nvshmem_install.identity(fake) != before


def test_damaged_file_digest_memo_is_computed_again(tmp_path: Path, monkeypatch):
    """The memo of a large file's digest (NVSHMEM's bitcode) is a cache entry too: a truncated one is
    not taken for the digest."""
    monkeypatch.setenv("TRITON_RAW_CACHE_DIR", str(tmp_path / "raw"))
    data = tmp_path / "device.bc"
    data.write_bytes(b"bitcode")
    right = nvshmem_install.file_digest(data)
    (memo,) = (tmp_path / "raw" / "file_digests").iterdir()
    memo.write_text(right[:20])
    nvshmem_install._file_digest.cache_clear()  # as in a new process
    assert nvshmem_install.file_digest(data) == right == hashlib.sha256(b"bitcode").hexdigest()


def test_eight_processes_compiling_at_once_make_one_entry(workdir: Path):
    procs = [subprocess.Popen([sys.executable, "k.py"], cwd=workdir, env=_env(workdir), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(8)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert len({r["hash"] for r in results}) == 1
    entries = [e for e in (workdir / "raw" / "raw_lib").iterdir() if e.is_dir()]
    assert len(entries) == 1
    assert sorted(p.name for p in entries[0].iterdir()) == ["digests.json", "lib.ll", "signature.json"]


@requires_nvshmem
def test_killed_compile_leaves_nothing_that_breaks_the_next(tmp_path: Path):
    script = tmp_path / "ring.py"
    script.write_text(RING_PY)
    env = _env(tmp_path)
    victim = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 120
    subset = tmp_path / "raw" / "nvshmem_subset"
    while time.time() < deadline and not subset.exists() and victim.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)  # now inside the NVSHMEM subset build (parsing the library)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    entries = [e for e in subset.iterdir() if e.is_dir()]
    # the kernel's cut and, with nvlink, the cut of its barrier for the barrier's object
    assert len(entries) == (2 if usable_nvlink(90) else 1) and all((e / "subset.ll").is_file() for e in entries)
