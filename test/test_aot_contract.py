"""The main job's AOT contract: every tutorial's aot module names its kernels and their launch options.

scripts.main_job compiles ``kernels()`` with ``options_for(name)``; a kernel compiled without its
launch options (warps, stages) is not the kernel that runs on the GPU.
"""

from __future__ import annotations

import importlib

import pytest

from tutorials import TUTORIALS
from tutorials.megamoe import aot as megamoe_aot


@pytest.mark.parametrize("tutorial", TUTORIALS)
def test_options_for_every_kernel(tutorial):
    aot = importlib.import_module(f"tutorials.{tutorial}.aot")
    names = [name for name, _ in aot.kernels()]
    assert names and len(set(names)) == len(names), names
    for name in names:
        options = aot.options_for(name)
        assert options.get("num_warps") in (1, 2, 4, 8, 16, 32), (name, options)


def test_options_for_an_unknown_kernel_names_the_listing():
    with pytest.raises(KeyError, match="'moe_nope' is not a Tutorial 3 kernel; kernels\\(\\) lists them"):
        megamoe_aot.options_for("moe_nope")
