"""The FFMA yield pass on cubins (no GPU): what it changes in a block-scaled fp8 kernel's SASS, and what not."""

from __future__ import annotations

import re
import subprocess

import pytest
import triton

from triton_raw_ext.ffma_yield import (
    MIN_RUN,
    REUSE_FLAGS,
    STAY_HINT,
    ffma_runs,
    text_sections,
    yield_in_ffma_runs,
    yield_where_requested,
)


def _sass(cubin: bytes, tmp_path, name: str) -> str:
    path = tmp_path / name
    path.write_bytes(cubin)
    disasm = triton.knobs.nvidia.nvdisasm.path
    return subprocess.run([disasm, "-c", "-hex", str(path)], capture_output=True, text=True, check=True).stdout


def _instructions(sass: str) -> list[str]:
    """nvdisasm's lines without their encodings, reuse flags and column padding."""
    text = re.sub(r"/\* 0x[0-9a-f]+ \*/", "", sass).replace(".reuse", "")
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def promoted_tile() -> bytes:
    """``gluon_scaled_tiles``' warp-specialized fp8 tile, whose consumers promote each K block's products."""
    from test_tutorial_3_aot import _gluon_scaled_tiles

    return _gluon_scaled_tiles(scaled=True).asm["cubin"]


def test_promotion_runs_lose_their_reuse_flags_and_stay_hints_and_nothing_else(promoted_tile, tmp_path):
    """Each consumer's promotion (a run of at least MIN_RUN FFMAs per half) is found; in the patched cubin those
    FFMAs read no operand from the reuse cache and let the scheduler switch warps, every other instruction and
    every other byte of the file is as ptxas wrote it, and nvdisasm reads the same instructions."""
    patched, changed = yield_in_ffma_runs(promoted_tile, triton.knobs.nvidia.nvdisasm.path)
    before, after = _sass(promoted_tile, tmp_path, "a.cubin"), _sass(patched, tmp_path, "b.cubin")
    runs = ffma_runs(before)
    ((section, section_runs),) = runs.items()
    assert section == ".text.scaled_tiles"
    assert sum(map(len, section_runs)) >= 2 * 2 * 64, "two consumers, two 64-register halves each"
    assert all(len(run) >= MIN_RUN for run in section_runs)
    assert changed > 0 and len(patched) == len(promoted_tile)
    assert _instructions(before) == _instructions(after), "only hints change"
    base, _ = text_sections(promoted_tile)[section]
    in_runs = {base + offset + 8 for run in section_runs for offset in run}
    differing = [i for i, (a, b) in enumerate(zip(promoted_tile, patched, strict=True)) if a != b]
    assert differing and all(any(word <= i < word + 8 for word in in_runs) for i in differing)
    for word in in_runs:
        high = int.from_bytes(patched[word : word + 8], "little")
        old = int.from_bytes(promoted_tile[word : word + 8], "little")
        assert not high & REUSE_FLAGS
        assert high == (old & ~(REUSE_FLAGS | STAY_HINT) if old & REUSE_FLAGS else old)
    outside = [line for line in after.splitlines() if "FFMA" not in line and ".reuse" in line]
    assert outside == [line for line in before.splitlines() if "FFMA" not in line and ".reuse" in line]


def test_a_fraction_patches_the_head_of_each_run(promoted_tile):
    """With a fraction, only the first part of each run changes: half the runs' instructions change at most."""
    disasm = triton.knobs.nvidia.nvdisasm.path
    _, whole = yield_in_ffma_runs(promoted_tile, disasm)
    _, half = yield_in_ffma_runs(promoted_tile, disasm, 0.5)
    _, none = yield_in_ffma_runs(promoted_tile, disasm, 0.0)
    assert 0 == none < half < whole


def test_only_kernels_whose_ptx_asks_are_patched(promoted_tile):
    """``yield_where_requested`` leaves a cubin alone unless its PTX holds the request comment with a percent."""
    assert yield_where_requested("// no request here\n", promoted_tile) is promoted_tile
    assert yield_where_requested("// triton_raw_ext.ffma_yield\n", promoted_tile) is promoted_tile
    assert yield_where_requested("\t// triton_raw_ext.ffma_yield 100\n", promoted_tile) != promoted_tile


def test_text_sections_refuses_what_is_not_a_64_bit_elf():
    with pytest.raises(ValueError, match="64-bit ELF"):
        text_sections(b"not a cubin")
