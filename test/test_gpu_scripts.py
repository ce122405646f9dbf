"""scripts.gpu.suite on CPU, with real processes: limits and stacks, exit statuses, the environment of
every step, MPS for the steps whose PEs share a GPU, bundles, and that every suite names files and modules
that exist.

GPU commands are replaced by a fake ``python3`` (and fake ``nvidia-smi`` / ``nvidia-cuda-mps-control``);
what the GPU runs measure is not tested here.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tarfile

import pytest
from conftest import ROOT, fake_gpu_host, run_suite

from scripts.gpu import suites
from tutorials import TUTORIALS


def test_a_hung_worker_prints_its_python_stack_and_the_step_times_out(tmp_path):
    hung = f"{sys.executable} -c 'import time\ndef stuck_in_here():\n    time.sleep(120)\nstuck_in_here()'"
    # a launcher with a child, like torchrun and its workers: the leaf gets the signal
    done = run_suite(["exec", "--out", str(tmp_path), "--max-step-s", "8", "--", "bash", "-c", f"{hung}; echo end"])
    log = (tmp_path / "command.log").read_text()
    assert "SIGABRT to every leaf process" in log and "stuck_in_here" in log, log  # faulthandler's traceback
    (step,) = json.loads((tmp_path / "exec.json").read_text())["steps"]
    assert step["result"] == "TIMEOUT(8s)" and step["seconds"] < 30, step
    assert done.returncode == 1 and "TIMEOUT(8s)" in done.stdout


def test_a_command_that_ends_keeps_its_exit_status_and_the_json_it_wrote(tmp_path):
    done = run_suite(["exec", "--out", str(tmp_path), "--", "bash", "-c", "echo working; exit 3"])
    assert done.returncode == 1 and "working" in done.stdout and "FAIL(rc=3)" in done.stdout, done.stdout
    script = "import json, os, pathlib, sys; pathlib.Path(sys.argv[1]).write_text(json.dumps(dict(os.environ)))"
    done = run_suite(["exec", "--out", str(tmp_path / "env"), "--", "python3", "-c", script, "{dir}/env.json"])
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((tmp_path / "env" / "exec.json").read_text())
    step_env = summary["steps"][0]["files"]["env.json"]  # the JSON the step wrote, inside the summary
    for name, value in {"NVSHMEM_DISABLE_NVLS": "1", "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                        "PYTHONFAULTHANDLER": "1"}.items():  # fmt: skip
        assert step_env[name] == value and summary["env"][name] == value
    assert "TRITON_RAW_SHARED_GPU" not in step_env
    assert summary["versions"]["triton"] and summary["command"].startswith("python3 -m scripts.gpu.suite exec")


def test_a_triton_bundle_comes_before_the_installed_triton(tmp_path):
    rest = tmp_path / "src" / "triton"
    rest.mkdir(parents=True)
    (rest / "__init__.py").write_text("__version__ = '9.9.9-bundle'\n")
    bundle = tmp_path / "triton-9.9.9"
    bundle.mkdir()
    with tarfile.open(bundle / "triton-rest.tar.xz", "w:xz") as tar:
        tar.add(rest, arcname="triton")
    version = "import triton; print(triton.__version__)"
    done = run_suite(["exec", "--out", str(tmp_path / "out"), "--triton-bundle", str(bundle), "--bundle-root",
                      str(tmp_path / "unpacked"), "--", "python3", "-c", version])  # fmt: skip
    assert done.returncode == 0 and "9.9.9-bundle" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize(("packed", "variable"), [("ptxas", "TRITON_PTXAS_BLACKWELL_PATH"),
                                                 ("ptxas-blackwell", "TRITON_PTXAS_PATH")])  # fmt: skip
def test_a_triton_bundle_points_the_ptxas_it_left_out_at_the_one_it_holds(tmp_path, packed, variable):
    """A bundle holds the ptxas its Triton assembles sm_90 with (3.6-3.8: ptxas, 3.9: ptxas-blackwell); the other
    name, which Triton resolves too, points at it, and an explicit setting is kept."""
    from scripts.gpu.suite import bundle_env

    bin_dir = tmp_path / "src" / "triton" / "backends" / "nvidia" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / packed).write_text("#!/bin/sh\n")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    with tarfile.open(bundle / "triton-rest.tar.xz", "w:xz") as tar:
        tar.add(tmp_path / "src" / "triton", arcname="triton")
    env = bundle_env({}, bundle, None, tmp_path / "unpacked")
    unpacked = tmp_path / "unpacked" / "triton-bundle" / "triton" / "backends" / "nvidia" / "bin" / packed
    assert env[variable] == str(unpacked) and unpacked.is_file()
    other = {"TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH"} - {variable}
    assert not other & env.keys(), "the ptxas the bundle holds keeps Triton's own lookup"
    assert bundle_env({variable: "/opt/ptxas"}, bundle, None, tmp_path / "unpacked")[variable] == "/opt/ptxas"


def test_every_suite_names_scripts_that_exist():
    names = {"core", "runtime", "t1", "t1_sweep", "t2", "t3", "t3_tune", "t3_persistent", "t3_trace", "t3_experts",
             "t3_gluon", "faults", "nvshmem", "multi_gpu", "serving", "launch_paths", "all", "tutorials"}  # fmt: skip
    assert set(suites.SUITES) == names
    env = {"VARIANTS": "stores:2 puts:2"}
    for gpus in (1, 2, 8):
        for name, build in suites.SUITES.items():
            if name == "multi_gpu" and gpus == 1:
                with pytest.raises(SystemExit, match="run on a host with >= 2 GPUs or set WORLDS"):
                    build(gpus)
                continue
            with pytest.MonkeyPatch.context() as patch:
                for key, value in env.items():
                    patch.setenv(key, value)
                suite = build(gpus)
            steps = [s for part, _ in suite.parts for s in part.steps] + suite.steps
            assert steps, name
            for step in steps:
                for arg, after in zip(step.command, step.command[1:], strict=False):
                    if arg == "-m":  # python3 -m MODULE, torchrun ... -m MODULE
                        assert importlib.util.find_spec(after), f"{name}/{step.name}: no module {after}"
                for arg in step.command:
                    if arg.endswith((".py", ".sh")) and "/" in arg:
                        assert (ROOT / arg).is_file(), f"{name}/{step.name}: {arg}"


def test_t3_persistent_reports_the_graph_rows_and_the_goal(tmp_path):
    bench = {"precision": "fp8", "shape": {"skewed": False}, "goal": {"goal_us": 200.0, "us": 185.0, "met": True},
             "times_ms": {"megamoe_graph_ms": 0.341, "persistent_graph_ms": 0.185, "dense_gemms_ms": 0.1},
             "of_dense_ceiling": {"persistent_graph": 0.54}}  # fmt: skip
    (tmp_path / "benchmark_fp8").mkdir()
    (tmp_path / "benchmark_fp8" / "t.json").write_text(json.dumps(bench))
    balanced = {**bench, "shape": {"skewed": False, "routing": "balanced"}, "goal": None}
    (tmp_path / "benchmark_fp8" / "u.json").write_text(json.dumps(balanced))
    suite = suites.t3_persistent(1)
    assert [s.name for s in suite.steps][:4] == ["w1_bf16", "w1_fp8", "benchmark_bf16", "benchmark_fp8"]
    assert sum(s.timeout_s for s in suite.steps) <= suite.budget_s <= 540
    lines, extra = suite.report(tmp_path, {})
    assert lines[1] == ("T3 fp8 random: megamoe_graph 341.0 us, persistent_graph 185.0 us (54% of dense); "
                        "goal <= 200 us: MET")  # fmt: skip
    assert extra["rows"][0]["graph_us"] == {"megamoe_graph": 341.0, "persistent_graph": 185.0}
    assert lines[2].startswith("T3 fp8 balanced: megamoe_graph 341.0 us") and "goal" not in lines[2]
    bench["of_dense_block_scaled"] = {"persistent_graph": 0.81}
    (tmp_path / "benchmark_fp8" / "t.json").write_text(json.dumps(bench))
    lines, extra = suite.report(tmp_path, {})
    assert "persistent_graph 185.0 us (54% of dense, 81% of block-scaled dense)" in lines[1]
    assert extra["rows"][0]["of_dense_block_scaled"] == {"persistent_graph": 0.81}


def test_t3_persistent_times_variants_beside_the_defaults(monkeypatch):
    monkeypatch.setenv("T3_VARIANTS_FP8", "rows2:combine_rows=2 d8:dispatch_rows=8")
    steps = {s.name: s for s in suites.t3_persistent(1).steps}
    fp8, bf16 = steps["benchmark_fp8"], steps["benchmark_bf16"]
    assert fp8.command[-6:] == ("--variant", "rows2:combine_rows=2", "--variant", "d8:dispatch_rows=8", "--rounds",
                                "3")  # fmt: skip
    assert "--variant" not in bf16.command and "--rounds" not in bf16.command
    assert fp8.timeout_s == 60 + 2 * 25 and bf16.timeout_s == 55


def test_every_tutorial_runs_its_suite_through_the_runner():
    run_gpus = [ROOT / "tutorials" / tutorial / "run_gpu.sh" for tutorial in TUTORIALS]
    assert sorted(ROOT.glob("tutorials/*/run_gpu.sh")) == sorted(run_gpus)
    for number, run_gpu in enumerate(run_gpus, start=1):
        assert f"exec python3 -m scripts.gpu.suite t{number} " in run_gpu.read_text(), run_gpu
    scripts = sorted([*ROOT.glob("scripts/**/*.sh"), *ROOT.glob("tutorials/*/*.sh")])
    for script in scripts:
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, f"{script.relative_to(ROOT)}: {done.stderr}"


RECORDING_PYTHON = """#!{real}
# Fake python3: every step records how it was called; the runner's versions (run_metadata) run for real.
import json, os, sys
args = sys.argv[1:]
if args[:2] == ["-m", "tutorials.common.run_metadata"]:
    os.execv({real!r}, [{real!r}, *args])
with open(os.environ["FAKE_CALLS"], "a") as calls:
    calls.write(json.dumps({{"args": args, "shared": os.environ.get("TRITON_RAW_SHARED_GPU"),
                             "symmetric": os.environ.get("NVSHMEM_SYMMETRIC_SIZE")}}) + "\\n")
"""


def test_steps_whose_pes_share_the_gpu_run_under_mps_started_and_stopped_once(tmp_path):
    bin_dir = fake_gpu_host(tmp_path, gpus=1, fake_python=RECORDING_PYTHON)
    calls, mps = tmp_path / "calls.jsonl", tmp_path / "mps.log"
    done = run_suite(["t2", "--out", str(tmp_path / "out")], bin_dir, FAKE_CALLS=str(calls), FAKE_MPS_LOG=str(mps))
    assert done.returncode == 0, done.stdout + done.stderr
    steps = [json.loads(line) for line in calls.read_text().splitlines()]
    assert [s["shared"] for s in steps] == [None, None, None] + ["1"] * 8
    assert [s["symmetric"] for s in steps[3:]] == ["3G"] * 8
    assert "--nproc_per_node=4" in steps[4]["args"] and steps[4]["args"][-1].endswith("/w4_shared/correct.json")
    assert steps[2]["args"][-1] == "--graph" and steps[-1]["args"][-1] == "--graph-sequence"
    assert mps.read_text().split("\n")[:2] == ["mps -d ", "mps  quit"]  # on before w2_shared, off at the end
    summary = json.loads((tmp_path / "out" / "t2.json").read_text())
    assert [(s["step"], s["result"]) for s in summary["steps"]] == [
        ("w1_correct", "PASS"), ("bench_w1", "PASS"), ("w1_sm_graph", "PASS"), ("w2_shared", "PASS"),
        ("w4_shared", "PASS"), *((f"w{w}_sm_{mode}", "PASS") for w in (2, 4) for mode in ("eager", "graph",
                                                                                          "graph_sequence"))]
    assert summary["gpus"] == ["NVIDIA H200, 580.159.04"]


def test_a_step_without_budget_left_is_skipped_and_fails_the_suite(tmp_path):
    bin_dir = fake_gpu_host(tmp_path, gpus=1, fake_python=RECORDING_PYTHON)
    done = run_suite(["t3_tune", "--out", str(tmp_path / "out"), "--budget", "35"], bin_dir,
                     FAKE_CALLS=str(tmp_path / "calls.jsonl"), FAKE_MPS_LOG=str(tmp_path / "mps.log"))  # fmt: skip
    summary = json.loads((tmp_path / "out" / "t3_tune.json").read_text())
    assert [s["result"] for s in summary["steps"]] == ["SKIP(budget)", "SKIP(budget)"]
    assert done.returncode == 1 and "tune_bf16: skipped" in done.stdout


def test_all_runs_every_one_gpu_suite_as_parts(tmp_path):
    bin_dir = fake_gpu_host(tmp_path, gpus=1, fake_python=RECORDING_PYTHON)
    all_steps = [f"{part.name}/{s.name}" for part, _ in suites.SUITES["all"](1).parts for s in part.steps]
    done = run_suite(["all", "--out", str(tmp_path / "out")], bin_dir,
                     FAKE_CALLS=str(tmp_path / "calls.jsonl"), FAKE_MPS_LOG=str(tmp_path / "mps.log"))  # fmt: skip
    summary = json.loads((tmp_path / "out" / "all.json").read_text())
    results = {s["step"]: s["result"] for s in summary["steps"]}
    assert list(results) == all_steps, done.stdout
    assert all(results[s] == "PASS" for s in all_steps if s != "core/doctor"), results  # doctor: the real one
    calls = [json.loads(line)["args"] for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    runtime = next(args for args in calls if args[:2] == ["-m", "scripts.gpu.runtime_suite"])
    assert runtime[-1].endswith("/runtime/checks")  # one GPU: every stage in one step, MPS on
    assert (tmp_path / "out" / "t1" / "bench_w1.log").is_file()


def test_serving_suite_runs_the_op_checks_then_the_example_at_world_1_2_4_within_its_budget():
    suite = suites.SUITES["serving"](1)
    steps = suite.steps
    assert [s.name for s in steps] == ["custom_ops", "host_cost", "w1", "w2_shared", "w4_shared"]
    assert sum(s.timeout_s for s in steps) <= suite.budget_s <= 540
    assert [s.shared_gpu for s in steps] == [False, False, False, True, True]
    assert all("examples.serving_blocks" in s.command for s in steps[2:])
    assert "test/test_tutorial_custom_ops.py" in steps[0].command and "--profile" in steps[1].command
    assert "--nproc_per_node=4" in steps[4].command
