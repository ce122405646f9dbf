"""tutorials/common: the benchmark summaries the three tutorials share."""

from __future__ import annotations

import pytest
from conftest import TUTORIALS, load_module

timing = load_module(TUTORIALS / "common" / "timing.py", "tutorials_common_timing")
percentile, rank_max, summarize = timing.percentile, timing.rank_max, timing.summarize


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
