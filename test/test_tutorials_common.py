"""tutorials/: one package tree whose tutorials import side by side, and the helpers in
tutorials/common that they share."""

from __future__ import annotations

import datetime
import importlib
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from conftest import ROOT, child_env

import triton_raw_ext
import tutorials
from tutorials.common import run_metadata
from tutorials.common.aot import SM90, launch_source
from tutorials.common.ranks import every_rank
from tutorials.common.timing import percentile, rank_max, summarize


def test_every_tutorial_has_the_same_shape():
    """The files a reader finds in every tutorial (tutorials/README.md), the op named after its package."""
    root = Path(tutorials.__file__).parent
    assert sorted(p.name for p in root.iterdir() if (p / "__init__.py").is_file()) == sorted([*tutorials.TUTORIALS,
                                                                                             "common"])
    for name in tutorials.TUTORIALS:
        files = {p.name for p in (root / name).iterdir()}
        shape = {"__init__.py", f"{name}.py", "kernels.py", "reference.py", "benchmark.py", "aot.py", "run_gpu.sh",
                 "README.md"}  # fmt: skip
        assert shape <= files, (name, shape - files)
        assert [f for f in files if f.endswith("-device.cu")], name
    listed = (root / "README.md").read_text()
    assert [listed.index(f"`{name}/`") for name in tutorials.TUTORIALS] == sorted(
        listed.index(f"`{name}/`") for name in tutorials.TUTORIALS), "tutorials/README.md lists them in order"


def test_the_three_tutorials_kernels_import_in_one_process():
    """Each tutorial's ``kernels`` module is its own (the same file name in every tutorial), and its
    raw functions resolve their ``.cu`` beside it."""
    modules = [importlib.import_module(f"tutorials.{name}.kernels") for name in tutorials.TUTORIALS]
    assert [m.__name__ for m in modules] == [
        "tutorials.allreduce_rmsnorm.kernels", "tutorials.allgather_gemm.kernels", "tutorials.megamoe.kernels"]
    assert len({m.__file__ for m in modules}) == 3
    first, second, third = modules
    kernels = [first.fused_allreduce_rmsnorm_kernel, second.ag_gemm_kernel, third.moe_route]
    assert [k.fn.__module__ for k in kernels] == [m.__name__ for m in modules]
    sources = [first.put_row.spec.source, second.ag_wait_ready.spec.source, third.moe_pull.spec.source]
    assert sources == [Path(m.__file__).with_name(name) for m, name in
                       zip(modules, ("allreduce-device.cu", "ag_gemm-device.cu", "moe-device.cu"), strict=True)]


def test_percentile_interpolates_between_order_statistics():
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([3.0], 90) == 3.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_summarize_and_rank_max():
    s = summarize([1.0, 2.0, 3.0, 4.0])
    assert (s["p50"], s["min"], s["mean"], s["n"]) == (2.5, 1.0, 2.5, 4)
    assert rank_max([[1.0, 5.0], [2.0, 3.0]]) == [2.0, 5.0]
    with pytest.raises(ValueError):
        rank_max([[1.0], [1.0, 2.0]])


def test_run_metadata_says_when_where_and_how_this_process_ran():
    meta = run_metadata.run_metadata()
    assert datetime.datetime.fromisoformat(meta["date"]).tzinfo == datetime.timezone.utc
    assert meta["command"] == shlex.join(sys.orig_argv)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert meta["git_head"] == (head.stdout.strip() if head.returncode == 0 else None)
    versions = meta["versions"]
    assert (versions["torch"], versions["triton"], versions["triton_raw_ext"]) == (
        torch.__version__, triton.__version__, triton_raw_ext.__version__)
    assert versions["python"] == platform.python_version() and "error" not in versions
    assert meta["host"]["cores"] == os.cpu_count() and isinstance(meta["gpus"], list)
    given = run_metadata.run_metadata(["python3", "-m", "scripts.gpu.suite", "t1"], {"triton": "9.9"})
    assert given["command"] == "python3 -m scripts.gpu.suite t1" and given["versions"] == {"triton": "9.9"}


def test_run_metadata_prints_the_versions_as_a_module():
    done = subprocess.run([sys.executable, "-m", "tutorials.common.run_metadata"], cwd=ROOT, env=child_env(),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == run_metadata.versions()


def _gather(rank: int, world: int, port: int, out: dict) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        out[rank] = every_rank({"rank": rank, "square": rank * rank})
    finally:
        dist.destroy_process_group()


def test_every_rank_gathers_in_rank_order_on_every_rank():
    assert every_rank(("alone", 1)) == [("alone", 1)]  # no torch.distributed: this process's value
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import torch.multiprocessing as mp

    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_gather, args=(3, port, out), nprocs=3, join=True)
        gathered = dict(out)
    expected = [{"rank": r, "square": r * r} for r in range(3)]
    assert gathered == {0: expected, 1: expected, 2: expected}


@triton.jit(do_not_specialize=["step"])
def _scaled_copy(src, dst, n, step, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask) * scale + step, mask=mask)


def test_launch_source_specialises_as_a_launch():
    src, dst = torch.empty(4096, dtype=torch.float16, device="meta"), torch.empty(4096, device="meta")
    source, options = launch_source(_scaled_copy, src, dst, 4096, 1, 1.5, BLOCK=128, num_warps=2)
    assert source.signature == {"src": "*fp16", "dst": "*fp32", "n": "i32", "step": "i32", "scale": "fp32",
                                "BLOCK": "constexpr"}  # fmt: skip
    assert source.constants == {(5,): 128} and options == {"num_warps": 2}
    assert {k for k, v in source.attrs.items() if v == [["tt.divisibility", 16]]} == {(0,), (1,), (2,)}
    one, _ = launch_source(_scaled_copy, src, dst, 1, 1, 1.5, BLOCK=128)  # n == 1: a constexpr; step is not
    assert one.signature["n"] == "constexpr" and one.constants[(2,)] == 1 and one.signature["step"] == "i32"


def test_launch_source_compiles_the_kernel_the_jit_launch_compiles(monkeypatch):
    """Triton's JIT (``warmup``: a launch without running it, on an sm_90 device as the driver reports it)
    and ``triton.compile`` of :func:`launch_source` build the same kernel."""
    from triton.runtime import driver

    class Sm90:
        def get_current_target(self):
            return SM90

        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

    monkeypatch.setattr(driver, "_active", Sm90())
    src, dst = torch.empty(4096, dtype=torch.float16, device="meta"), torch.empty(4096, device="meta")
    launched = _scaled_copy.warmup(src, dst, 4096, 7, 1.5, BLOCK=256, num_warps=2, grid=(16,))
    source, options = launch_source(_scaled_copy, src, dst, 4096, 7, 1.5, BLOCK=256, num_warps=2)
    compiled = triton.compile(source, target=SM90, options=options)
    # The same code, not the same cache key: Triton 3.7+'s JIT adds an empty attribute entry to its key.
    assert compiled.asm["ptx"] == launched.asm["ptx"] and compiled.asm["cubin"] == launched.asm["cubin"]
    assert compiled.metadata._asdict() | {"hash": None} == launched.metadata._asdict() | {"hash": None}
