"""bench.host_cost: the goal verdicts from its rows, and a clean skip without a GPU; the CPU host-cost benches run."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from bench.host_cost import goals, main  # noqa: E402


def row(op: str, path: str, host_us: float, wall_us: float) -> dict:
    return {"op": op, "path": path, "host_us": host_us, "wall_us": wall_us, "gpu_us": 1.0,
            "host_rounds_us": [host_us], "wall_rounds_us": [wall_us]}  # fmt: skip


def test_goals_compare_eager_with_the_ops_first_row():
    rows = [
        row("allgather_gemm", "torch.matmul", 10.0, 12.0),
        row("allgather_gemm", "eager", 14.0, 16.0),
        row("allgather_gemm", "torch.ops", 40.0, 40.0),  # not what the goals judge
        row("megamoe", "torch._grouped_mm", 10.0, 10.0),
        row("megamoe", "eager", 16.0, 16.0),
        row("megamoe", "torch.ops", 17.0, 17.0),
        row("megamoe", "eager persistent", 14.0, 14.0),
    ]
    verdicts = goals(rows)
    assert verdicts["allgather_gemm"]["host_ratio"] == pytest.approx(1.4) and verdicts["allgather_gemm"]["host_met"]
    assert verdicts["allgather_gemm"]["speed_vs_matmul"] == pytest.approx(0.75)
    assert not verdicts["allgather_gemm"]["speed_met"]
    assert verdicts["megamoe"]["host_ratios"] == pytest.approx({"eager": 1.6, "eager persistent": 1.4})
    assert verdicts["megamoe"]["path"] == "eager persistent" and verdicts["megamoe"]["host_met"]  # the better impl
    assert "speed_vs_matmul" not in verdicts["megamoe"]
    rows[-1]["host_rounds_us"] = [15.5]
    assert not goals(rows)["megamoe"]["host_met"]


def test_ratios_are_taken_round_by_round():
    """A host that slows down during the run slows both paths of a round: the paired ratio stays, while the
    ratio of the medians would follow the drift."""
    baseline, eager = row("allgather_gemm", "torch.matmul", 0, 0), row("allgather_gemm", "eager", 0, 0)
    baseline["host_rounds_us"], eager["host_rounds_us"] = [10.0, 20.0, 30.0], [30.0, 13.0, 20.0]
    baseline["wall_rounds_us"], eager["wall_rounds_us"] = [10.0, 20.0, 30.0], [12.5, 25.0, 37.5]
    verdict = goals([baseline, eager])["allgather_gemm"]
    assert verdict["host_ratio"] == pytest.approx(20.0 / 30.0)  # rounds: 3.0, 0.65, 0.667
    assert verdict["speed_vs_matmul"] == pytest.approx(0.8) and verdict["speed_met"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the run without a GPU")
def test_without_gpu_it_says_so_and_writes_nothing(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "out")]) == 0
    assert "no CUDA GPU visible; nothing measured" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_op_dispatch_cost_times_both_registrations_of_the_same_op(tmp_path):
    import json

    from bench.op_dispatch_cost import main as dispatch_main

    assert dispatch_main(["--calls", "200", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "op_dispatch_cost.json").read_text())
    assert set(result["median_us"]) == {"python function", "custom_op", "Library"}
    assert all(len(r) == 5 and min(r) > 0 for r in result["rounds_us"].values())
    assert "date" in result and "versions" in result


def test_launch_binding_cost_covers_every_tutorial_launch(tmp_path):
    import json

    from bench.launch_binding_cost import main as binding_main

    assert binding_main(["--calls", "5", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "launch_binding_cost.json").read_text())["rows"]
    names = {r["kernel"].split(" ")[0] for r in rows}
    assert {"moe_persistent", "moe_persistent_fp8", "moe_route", "ag_gemm_kernel", "ag_gemm_sm_push_kernel"} <= names
    assert all(r["triton_us"] > 0 and r["bound_us"] > 0 and 0 <= r["varying"] < r["parameters"] for r in rows)
    assert all(r["varying"] > 0 for r in rows if r["kernel"].startswith(("moe_persistent", "ag_gemm")))
