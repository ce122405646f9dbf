"""The main job's AOT contract: every tutorial's aot.py names its kernels and their launch options.

scripts/main_job.py compiles ``kernels()`` with ``options_for(name)``; a kernel compiled without its
launch options (warps, stages) is not the kernel that runs on the GPU.
"""

from __future__ import annotations

import pytest
from conftest import TUTORIALS, load_tutorial_aot

FOLDERS = sorted(p.name for p in TUTORIALS.iterdir() if (p / "aot.py").exists())


def test_every_tutorial_has_an_aot_module():
    assert FOLDERS == ["01-allreduce-rmsnorm", "02-allgather-gemm", "03-megamoe"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_options_for_every_kernel(folder):
    aot = load_tutorial_aot(folder)
    names = [name for name, _ in aot.kernels()]
    assert names and len(set(names)) == len(names), names
    for name in names:
        options = aot.options_for(name)
        assert options.get("num_warps") in (1, 2, 4, 8, 16, 32), (name, options)


def test_options_for_an_unknown_kernel_names_the_listing():
    aot = load_tutorial_aot("03-megamoe")
    with pytest.raises(KeyError, match="'moe_nope' is not a Tutorial 3 kernel; kernels\\(\\) lists them"):
        aot.options_for("moe_nope")
