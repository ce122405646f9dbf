"""tutorials/: one package tree whose tutorials import side by side, and the helpers in
tutorials/common that they share."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import tutorials
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
