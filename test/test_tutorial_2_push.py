"""Tutorial 2 (AllGather-GEMM), the push paths on CPU: which path a call takes, the error under graph
capture, the device epoch's buffer parity, and the chunk tickets the SM push claims."""

from __future__ import annotations

import re

import pytest

from tutorials.allgather_gemm import push, schedule

SMALL = push.SM_PUSH_MAX_SHARD_BYTES
LARGE = 4096 * 8192 * schedule.ELEMENT_BYTES


@pytest.mark.parametrize(("requested", "capturing", "shard", "known", "path"), [
    ("auto", False, SMALL, True, "sm"), ("auto", False, LARGE, True, "copy_engine"),
    ("auto", True, LARGE, True, "sm"), ("auto", False, LARGE, False, "sm"),  # captured once: stays on sm
    ("sm", False, LARGE, True, "sm"), ("sm", True, SMALL, True, "sm"),
    ("copy_engine", False, SMALL, True, "copy_engine"),
])  # fmt: skip
def test_choose_push_by_request_capture_and_size(requested, capturing, shard, known, path):
    assert push.choose_push(requested, 4, capturing, shard, known) == path
    assert push.choose_push(requested, 1, capturing, shard, known) == "none"  # world 1: nothing is pushed


def test_eager_auto_takes_the_sm_push_for_small_shards_from_four_ranks_on():
    """The measured crossover: at 2 PEs the copy engine was faster at every shard size, at 4 the SM push
    up to 2 MiB."""
    assert push.choose_push("auto", 2, False, SMALL, True) == "copy_engine"
    assert push.choose_push("auto", 2, True, SMALL, True) == "sm"  # under capture whatever the world
    assert [push.choose_push("auto", w, False, SMALL, True) for w in (4, 8)] == ["sm", "sm"]
    assert push.choose_push("auto", 4, False, SMALL + 1, True) == "copy_engine"


def test_copy_engine_under_capture_raises_naming_the_op_and_the_fix():
    message = re.escape("AllGatherGEMM.__call__ with push='copy_engine' cannot be captured in a CUDA graph at "
                        "world > 1") + ".*stale flags.*push='sm' or push='auto'"
    with pytest.raises(RuntimeError, match=message):
        push.choose_push("copy_engine", 4, True, SMALL, True)
    with pytest.raises(ValueError, match="push must be one of auto, copy_engine, sm, got 'nvlink'"):
        push.choose_push("nvlink", 2, False, SMALL, True)


def test_consecutive_epochs_fill_alternate_buffers_in_the_one_matrix_view():
    world, m = 4, 256
    offsets = [push.buffer_row_offset(e, world, m) for e in range(1, 7)]
    assert offsets == [world * m, 0] * 3  # a peer one call ahead always writes the other buffer
    assert [push.buffer_of(e) for e in (1, 2, 3)] == [1, 0, 1]


@pytest.mark.parametrize("world", [2, 3, 4, 8])
@pytest.mark.parametrize("shard_bytes", [16, push.PUSH_CHUNK_BYTES, 3 * push.PUSH_CHUNK_BYTES + 48, 1 << 21])
def test_tickets_cover_every_byte_once_per_destination_in_push_order(world, shard_bytes):
    for rank in range(world):
        tickets = push.chunks_per_destination(shard_bytes) * (world - 1)
        chunks = [push.chunk_of_ticket(t, rank, world, shard_bytes) for t in range(tickets)]
        assert None not in chunks and push.chunk_of_ticket(tickets, rank, world, shard_bytes) is None
        order = list(dict.fromkeys(dst for dst, _, _ in chunks))
        assert order == schedule.push_order(rank, world)  # destinations served in order of need
        for dst in order:
            spans = sorted((first, n) for d, first, n in chunks if d == dst)
            assert all(n % 16 == 0 and n > 0 for _, n in spans)  # whole 16-byte vectors
            assert [first for first, _ in spans] == [sum(n for _, n in spans[:i]) for i in range(len(spans))]
            assert sum(n for _, n in spans) == shard_bytes


def test_state_words_and_device_constants_agree():
    """ag_push-device.cu repeats the state layout and the chunk size: both must match push.py's."""
    from pathlib import Path

    source = (Path(push.__file__).parent / "ag_push-device.cu").read_text()
    defined = dict(re.findall(r"#define AG_(\w+) (\d+)", source))
    assert int(defined["PUSH_CHUNK_BYTES"]) == push.PUSH_CHUNK_BYTES
    for name in ("EPOCH", "TICKETS", "EXITED", "DONE"):
        assert int(defined[f"STATE_{name}"]) == getattr(push, f"STATE_{name}")
    assert push.state_words(4) == push.STATE_DONE + 3 and push.state_words(1) == push.STATE_DONE


def test_benchmark_goal_compares_the_faster_push_path_with_its_gemm_alone():
    from tutorials.allgather_gemm import benchmark

    rows = [{"variant": "ag_gemm/copy_engine", "p50": 1.30, "speed_vs_torch": None},
            {"variant": "ag_gemm/sm", "p50": 1.04, "speed_vs_torch": None},
            {"variant": "gemm_alone", "p50": 1.00, "speed_vs_torch": None}]  # fmt: skip
    verdict = benchmark.goal(rows, world=2)
    assert verdict["best_variant"] == "ag_gemm/sm" and verdict["met"]
    assert abs(verdict["ratio_vs_gemm_alone"] - 1.04) < 1e-9
