"""load_host: real nvcc builds, the build cache under concurrency, prebuilt libraries, build errors."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from triton_raw_ext.runtime import build, hostlib, load_host

from triton_raw_ext.errors import RawRuntimeError
from triton_raw_ext.nvshmem_install import find_nvshmem

pytestmark = [
    pytest.mark.skipif(
        shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").is_file(),
        reason="needs nvcc (CUDA toolkit)",
    ),
    pytest.mark.skipif(find_nvshmem(required=False) is None, reason="needs NVSHMEM (pip install nvidia-nvshmem-cu13)"),
]

ANSWER_CU = 'extern "C" int answer(int x) { return x + 41; }\n'


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private build cache and no prebuilt libraries."""
    monkeypatch.setenv("TRITON_RAW_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRITON_RAW_PREBUILT_DIR", str(tmp_path / "no-prebuilt"))
    monkeypatch.setattr(build, "prebuilt_dirs", lambda: [tmp_path / "no-prebuilt"])
    return tmp_path / "cache"


@pytest.fixture
def counting_nvcc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TRITON_RAW_NVCC = a wrapper that logs every compile (not --version) and runs the real nvcc."""
    real = build.find_nvcc()
    log = tmp_path / "nvcc.log"
    wrapper = tmp_path / "nvcc"
    wrapper.write_text(f'#!/bin/sh\n[ "$1" = --version ] || echo "$$" >> {log}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("TRITON_RAW_NVCC", str(wrapper))
    return log


def test_builds_and_loads_a_host_helper(tmp_path: Path, cache: Path, counting_nvcc: Path) -> None:
    src = tmp_path / "answer.cu"
    src.write_text(ANSWER_CU)
    lib = load_host(src)
    assert lib.answer(1) == 42
    assert Path(lib._name).name == "libanswer.so" and Path(lib._name).is_relative_to(cache)
    assert load_host(src)._name == lib._name  # cached
    assert len(counting_nvcc.read_text().split()) == 1
    assert load_host(src, "renamed")._name.endswith("librenamed.so")


def test_extra_flags_as_one_string_are_split_like_a_shell(tmp_path: Path, cache: Path) -> None:
    src = tmp_path / "answer.cu"
    src.write_text(ANSWER_CU)
    lib = load_host(src, extra_flags="-O3 -lineinfo")
    assert lib.answer(1) == 42
    assert build.build_host(src, extra_flags=("-O3", "-lineinfo")) == Path(lib._name)  # the same build


def test_key_covers_source_flags_and_neighbour_headers(tmp_path: Path, cache: Path) -> None:
    src = tmp_path / "k.cu"
    src.write_text(ANSWER_CU)
    base = build.describe_build(src, None, False, None, ()).key()
    assert build.describe_build(src, None, False, None, ("-DX=1",)).key() != base
    (tmp_path / "k.h").write_text("#define Y 1\n")
    with_header = build.describe_build(src, None, False, None, ()).key()
    assert with_header != base
    src.write_text(ANSWER_CU + "// changed\n")
    assert build.describe_build(src, None, False, None, ()).key() != with_header


def test_link_flags_use_the_versioned_host_library_and_rdc_only_on_request(tmp_path: Path) -> None:
    src = tmp_path / "f.cu"
    src.write_text(ANSWER_CU)
    install = find_nvshmem()
    plain = build.describe_build(src, None, False, None, ()).flags
    assert "-l:libnvshmem_host.so.3" in plain and f"-rpath,{install.lib_dir}" in plain
    assert "-rdc=true" not in plain and "-lnvshmem_device" not in plain
    rdc = build.describe_build(src, None, True, None, ()).flags
    assert {"-rdc=true", "-lnvshmem_device", f"-arch={build.DEFAULT_RDC_ARCH}"} <= set(rdc)


def test_bad_source_raises_with_nvcc_output(tmp_path: Path, cache: Path) -> None:
    src = tmp_path / "bad.cu"
    src.write_text('extern "C" int broken(void) { return undeclared_thing; }\n')
    with pytest.raises(RawRuntimeError) as err:
        load_host(src)
    message = str(err.value)
    assert "nvcc failed to build host helper" in message
    assert "undeclared_thing" in message and "bad.cu" in message
    assert not list(cache.rglob("*.so"))  # nothing half-built was published


def test_missing_source(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(RawRuntimeError, match="does not exist; pass the path of a .cu file"):
        load_host(tmp_path / "nope.cu")


def test_missing_nvcc(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_RAW_NVCC", str(tmp_path / "no-nvcc"))
    src = tmp_path / "a.cu"
    src.write_text(ANSWER_CU)
    with pytest.raises(RawRuntimeError, match="TRITON_RAW_NVCC=.* does not exist"):
        load_host(src)


def test_nvcc_not_found_anywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_RAW_NVCC", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CUDA_HOME", "/nonexistent")
    monkeypatch.setattr(build, "DEFAULT_CUDA_HOME", "/nonexistent")
    with pytest.raises(RawRuntimeError, match="nvcc was not found"):
        build.find_nvcc()


def test_unloadable_library_names_the_fix(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "libjunk.so"
    fake.write_text("not an ELF file")
    monkeypatch.setattr(build, "build_host", lambda *a, **k: fake)
    with pytest.raises(RawRuntimeError, match="could not load it .*delete it to force a rebuild"):
        load_host(tmp_path / "whatever.cu")


_CONCURRENT_BUILDER = textwrap.dedent(
    """
    import sys
    from triton_raw_ext.runtime import load_host
    lib = load_host(sys.argv[1])
    assert lib.answer(1) == 42
    print(lib._name)
    """
)


def test_eight_concurrent_builders_build_once(tmp_path: Path, cache: Path, counting_nvcc: Path) -> None:
    src = tmp_path / "shared.cu"
    src.write_text(ANSWER_CU)
    env = dict(os.environ)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CONCURRENT_BUILDER, str(src)],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(8)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in results]
    assert len({out.strip() for out, _ in results}) == 1
    assert len(counting_nvcc.read_text().split()) == 1
    assert not [p for p in cache.rglob("*.tmp")]


def _write_prebuilt(folder: Path, source: Path, **overrides: str) -> Path:
    b = build.describe_build(source, None, False, None, ())
    fields = {
        "source_sha256": hashlib.sha256(source.read_bytes()).hexdigest(),
        "nvshmem_version": b.nvshmem_version,
        "nvcc_version": build.nvcc_release(b.nvcc_version),
        "rdc": "0",
        **overrides,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / b.library_name).write_bytes(b"")
    (folder / f"{b.library_name}.manifest").write_text("".join(f"{k}={v}\n" for k, v in fields.items()))
    return folder / b.library_name


def test_prebuilt_library_used_only_when_up_to_date(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "pre.cu"
    src.write_text(ANSWER_CU)
    folder = tmp_path / "prebuilt"
    monkeypatch.setenv("TRITON_RAW_PREBUILT_DIR", str(folder))
    lib = _write_prebuilt(folder, src)
    assert build.find_prebuilt(build.describe_build(src, None, False, None, ())) == lib
    for stale in ({"source_sha256": "0" * 64}, {"nvshmem_version": "0.0.1"}, {"nvcc_version": "1.0.0"}):
        _write_prebuilt(folder, src, **stale)
        assert build.find_prebuilt(build.describe_build(src, None, False, None, ())) is None
    _write_prebuilt(folder, src)
    assert build.find_prebuilt(build.describe_build(src, None, True, None, ())) is None  # rdc differs


@pytest.fixture(scope="module")
def helper_prebuilt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runtime's helper built once for this module: by CMake when available, else by load_host."""
    out = tmp_path_factory.mktemp("build")
    if shutil.which("cmake") is None:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("TRITON_RAW_CACHE_DIR", str(out))
            lib = build.build_host(hostlib.HELPER_SOURCE, hostlib.HELPER_NAME)
        (lib.parent / f"{lib.name}.manifest").write_text(
            _manifest_text(build.describe_build(hostlib.HELPER_SOURCE, hostlib.HELPER_NAME, False, None, ()))
        )
        return lib.parent
    root = Path(__file__).resolve().parents[1]
    configure = ["cmake", "-S", str(root), "-B", str(out), f"-DNVSHMEM_HOME={find_nvshmem().root}"]
    for cmd in (configure, ["cmake", "--build", str(out)]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def _manifest_text(b: build.HostBuild) -> str:
    return (
        f"source_sha256={hashlib.sha256(b.source.read_bytes()).hexdigest()}\n"
        f"nvshmem_version={b.nvshmem_version}\nnvcc_version={build.nvcc_release(b.nvcc_version)}\nrdc=0\n"
    )


def test_cmake_prebuild_matches_load_host(helper_prebuilt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_RAW_PREBUILT_DIR", str(helper_prebuilt))
    found = build.find_prebuilt(build.describe_build(hostlib.HELPER_SOURCE, hostlib.HELPER_NAME, False, None, ()))
    assert found == helper_prebuilt / "libtriton_raw_nvshmem_host.so"


@pytest.fixture
def helper(helper_prebuilt: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """host_library() resolves to the module's prebuilt helper; its lru_cache is reset around the test."""
    monkeypatch.setattr(build, "prebuilt_dirs", lambda: [helper_prebuilt])
    hostlib.host_library.cache_clear()
    yield
    hostlib.host_library.cache_clear()


def test_runtime_helper_loads_and_matches_nvshmem_version(helper: None, cache: Path) -> None:
    lib = hostlib.host_library()
    assert not list(cache.rglob("*.so"))  # the prebuilt library was used
    assert lib.trx_init_status() == 0  # nothing initialised NVSHMEM here
    assert lib.trx_unique_id_size() == hostlib.UNIQUE_ID_BYTES
    assert hostlib._version(lib, "trx_host_version") == find_nvshmem().version
    assert hostlib._version(lib, "trx_header_version") == find_nvshmem().version
    assert lib.trx_host_library_path().decode().endswith("libnvshmem_host.so.3")


def test_host_library_already_loaded_by_torch(helper: None, cache: Path) -> None:
    """torch's symmetric memory loads NVSHMEM's host library before the runtime does (torch 2.15 with its
    pinned NVSHMEM 3.7.2): the helper binds to that copy and the version check passes."""
    install = find_nvshmem()
    ctypes.CDLL(str(install.host_library), mode=ctypes.RTLD_GLOBAL)
    lib = hostlib.host_library()
    assert Path(lib.trx_host_library_path().decode()).resolve() == install.host_library.resolve()
    assert hostlib._version(lib, "trx_host_version") == install.version


def test_version_mismatch_is_a_clear_error() -> None:
    with pytest.raises(RawRuntimeError) as err:
        hostlib.check_versions((3, 8, 0), (3, 4, 5), "/x/libnvshmem_host.so.3", Path("/y"))
    message = str(err.value)
    assert "3.8.0" in message and "3.4.5" in message and "/x/libnvshmem_host.so.3" in message
    assert "Use one NVSHMEM installation" in message
    hostlib.check_versions((3, 4, 5), (3, 4, 5), "", Path("/y"))


def test_stale_helper_abi_is_refused(helper: None, monkeypatch: pytest.MonkeyPatch) -> None:
    real = build.load_host

    def load_and_break(*args: object, **kwargs: object) -> ctypes.CDLL:
        lib = real(*args, **kwargs)
        lib.trx_abi_version = lambda: 999  # type: ignore[method-assign]
        return lib

    monkeypatch.setattr(hostlib, "load_host", load_and_break)
    with pytest.raises(RawRuntimeError, match="helper ABI 999.*stale prebuilt library"):
        hostlib.host_library()
