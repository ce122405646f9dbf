"""torch.compile with kernels that call raw functions.

On CPU: the module inductor writes for a user kernel (``define_user_defined_triton_kernel``)
re-creates the kernel's raw functions by import, and one of inductor's compile workers builds the
kernel from it for sm_90 without the module that defined them; an edit of the `.cu` changes that
module and the FX graph cache key; torch's mutation analysis sees what raw functions may write. On a
GPU: compiled functions (direct launches and ``triton_op`` + ``wrap_triton``, ``fullgraph=True``)
match eager, and an edit of the `.cu` reaches a process that finds everything else in the on-disk
caches.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import aot, requires_gpu

torch = pytest.importorskip("torch")

PTX_CALL = re.compile(r"^\s*call(\.uni)?\s", re.MULTILINE)  # a call instruction (DWARF comments say DW_AT_call_*)
TWICE_CU = """\
extern "C" __device__ float twice_plus(float x) {{ return 2.0f * x + {bias}; }}
extern "C" __device__ float read_at(const float *base, int i) {{ return base[i]; }}
"""
TWICE_PY = """\
import triton
import triton.language as tl

from triton_raw_ext import dialect
from triton_raw_ext.language import call


@dialect(name="cuda", file="twice-device.cu")
def twice_plus(x): ...


@dialect(name="cuda", file="twice-device.cu")
def read_at(base, i): ...


@triton.jit
def twice_plus_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # y = twice_plus(twice_plus(x)) = 4x + 3 bias, through both call forms
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, twice_plus(call(twice_plus, [x])), mask=mask)


@triton.jit
def gather_kernel(x_ptr: tl.const, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, read_at(x_ptr, offs))
"""


def write_twice(folder: Path, bias: str = "1.0f") -> None:
    """``twice-device.cu`` (``twice_plus(x) = 2x + bias``) and ``twice_kernels.py`` in ``folder``."""
    folder.mkdir(exist_ok=True)
    (folder / "twice-device.cu").write_text(TWICE_CU.format(bias=bias))
    (folder / "twice_kernels.py").write_text(TWICE_PY)


def import_unreachable(folder: Path):
    """Import ``folder/twice_kernels.py`` under a name no other process can import."""
    name = f"twice_kernels_{abs(hash(folder))}"
    spec = importlib.util.spec_from_file_location(name, folder / "twice_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Sm90Driver:
    """Answers the two questions inductor and torch's kernel analysis ask Triton's driver, for an
    H200, where there is no GPU driver to ask."""

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def get_current_device(self) -> int:
        return 0


@pytest.fixture
def sm90(monkeypatch):
    """Triton's driver and inductor's device properties as for an H200."""
    from torch._inductor.runtime.hints import DeviceProperties
    from triton.runtime import driver

    h200 = DeviceProperties(type="cuda", index=0, multi_processor_count=132, cc=90, major=9,
                            regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048,
                            max_threads_per_block=1024, warp_size=32)
    monkeypatch.setattr(driver, "_active", Sm90Driver())
    monkeypatch.setattr(DeviceProperties, "create", lambda device: h200)


def inductor_kernel_module(kernel, args: dict) -> tuple[str, str]:
    """(kernel name, module source) that inductor's wrapper codegen writes for launching ``kernel``
    with ``args``, where a ``(dtype, numel)`` value stands for a CUDA buffer of that dtype and size."""
    from torch._inductor import ir
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._inductor.graph import GraphLowering
    from torch._inductor.virtualized import V

    cuda = torch.device("cuda", 0)
    args = dict(args)
    graph = GraphLowering(torch.fx.symbolic_trace(lambda x: x))
    graph.current_device = cuda
    for arg, value in args.items():
        if isinstance(value, tuple):
            dtype, numel = value
            args[arg] = ir.Buffer(name=f"buf_{arg}", layout=ir.FixedLayout(cuda, dtype, [numel], [1]))
            graph.name_to_buffer[args[arg].name] = args[arg]
    wrapper = PythonWrapperCodegen.__new__(PythonWrapperCodegen)  # only the user-kernel part is used
    wrapper.user_defined_kernel_cache = {}
    defined = {}
    wrapper.define_kernel = lambda name, code, *rest, **kwargs: defined.setdefault(name, code)
    define = wrapper.define_user_defined_triton_kernel
    optional = {"epilogue_fusion": None} if "epilogue_fusion" in inspect.signature(define).parameters else {}
    with V.set_graph_handler(graph):  # torch 2.13 added epilogue_fusion
        name, *_ = define(kernel, [], args, [], [], [[1, 1, 1]], **optional)

    captured = {}

    class AsyncCompile:  # what the generated wrapper module calls with the kernel's module source
        def triton(self, kernel_name, source, device_str):
            captured.update(name=kernel_name, source=source)

    exec(defined[name], {"async_compile": AsyncCompile()})
    return captured["name"], captured["source"]


def load_in_worker(kernel_name: str, source: str, absent_module: str):
    """Run in inductor's compile worker before its own compile: check that ``absent_module`` was
    never imported there, then load the kernel module with the sm_90 driver."""
    from torch._inductor.codecache import _load_triton_kernel_from_source
    from torch._inductor.runtime import triton_helpers
    from triton.runtime import driver

    assert absent_module not in sys.modules
    driver.set_active(Sm90Driver())
    triton_helpers.set_driver_to_gpu = lambda: None  # there is no GPU driver to switch to
    return _load_triton_kernel_from_source(kernel_name, source)


def test_name_imports_an_equal_function(tmp_path):
    from triton_raw_ext import dialect

    write_twice(tmp_path)
    (tmp_path / "inc").mkdir()

    @dialect(name="cuda", file=str(tmp_path / "twice-device.cu"), extern_func_name="twice_plus",
             clang_flags=["-ffast-math"], include_dirs=[str(tmp_path / "inc")], defines=["BIAS=1"])
    def twice(x): ...

    assert twice.__name__.isidentifier() and twice.__module__ == "triton_raw_ext.dialect"
    scope = {}
    exec(f"from triton_raw_ext.dialect import {twice.__name__} as again", scope)
    again = scope["again"]
    assert (again.extern_func_name, again.spec, again.__qualname__) == ("twice_plus", twice.spec, "twice")
    assert again.cache_key == twice.cache_key and again.__name__ == twice.__name__
    assert not hasattr(sys.modules["triton_raw_ext.dialect"], "twice")


def test_compile_worker_builds_the_kernel(tmp_path, sm90):
    """Inductor's module for the kernel, loaded and compiled by ``_worker_compile_triton`` in a
    ``SubprocPool`` worker, where the module defining the raw function cannot be imported."""
    from torch._inductor.compile_worker.subproc_pool import SubprocPool
    from torch._inductor.runtime.compile_tasks import _worker_compile_triton

    write_twice(tmp_path)
    module = import_unreachable(tmp_path)
    args = {"x_ptr": (torch.float32, 1000), "y_ptr": (torch.float32, 1000), "n": 1000, "BLOCK": 128}
    name, source = inductor_kernel_module(module.twice_plus_kernel, args)
    assert f"from triton_raw_ext.dialect import {module.twice_plus.__name__} as twice_plus" in source
    assert "from triton_raw_ext.language import call as call" in source

    pool = SubprocPool(1)
    try:
        load = functools.partial(load_in_worker, name, source, module.__name__)
        kernel, _ = pool.submit(_worker_compile_triton, load, {}, {}).result(timeout=300)
    finally:
        pool.shutdown()
    ptx = kernel.compile_results[0].kernel.asm["ptx"]
    assert ".target sm_90" in ptx and not PTX_CALL.search(ptx)
    assert "0f40000000" in ptx and "0f3F800000" in ptx  # 2.0f and 1.0f of twice_plus, inlined


def test_gpu_tests_kernels_compile_from_inductor_modules(sm90, monkeypatch):
    """The kernels the GPU tests below launch in compiled functions, built in this process from
    inductor's modules the way a compile worker builds them."""
    from torch._inductor.codecache import _load_triton_kernel_from_source
    from torch._inductor.runtime import triton_helpers

    from examples.kernels.raw_kernels import elementwise_direct_kernel, rotate_direct_kernel

    monkeypatch.setattr(triton_helpers, "set_driver_to_gpu", lambda: None)  # there is no GPU driver
    launches = [
        (elementwise_direct_kernel, {"x_ptr": (torch.float32, 4103), "y_ptr": (torch.float32, 4103), "n": 4103,
                                     "BLOCK": 1024}),
        (rotate_direct_kernel, {"data_ptr": (torch.int32, 64 * 128), "N": 128}),
    ]
    for kernel, args in launches:
        compiled = _load_triton_kernel_from_source(*inductor_kernel_module(kernel, args))
        compiled.precompile(warm_cache_only=True)
        ptx = compiled.compile_results[0].kernel.asm["ptx"]
        assert ".target sm_90" in ptx and not PTX_CALL.search(ptx)


def test_cu_edit_changes_inductor_cache_keys(tmp_path):
    """The FX graph cache key and the kernel source that AOTAutograd's cache keys on (and the code
    cache, through the module around it) change with the `.cu`, and only with it."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table, triton_kernel_wrapper_mutation
    from torch._inductor.codecache import compiled_fx_graph_hash
    from torch._inductor.codegen.wrapper import user_defined_triton_kernel_transitive_closure_source_code

    write_twice(tmp_path)
    kernel = import_unreachable(tmp_path).twice_plus_kernel

    def keys() -> tuple[str, str]:
        graph = torch.fx.Graph()
        x, y = graph.placeholder("x"), graph.placeholder("y")
        launch = {"kernel_idx": kernel_side_table.add_kernel(kernel),
                  "constant_args_idx": kernel_side_table.add_constant_args({"n": 8, "BLOCK": 8}),
                  "grid": [(1, 1, 1)], "tma_descriptor_metadata": {}, "kwargs": {"x_ptr": x, "y_ptr": y}}
        graph.call_function(triton_kernel_wrapper_mutation, (), launch)
        graph.output(None)
        fx_key, _ = compiled_fx_graph_hash(torch.fx.GraphModule({}, graph), [torch.zeros(8)] * 2, {}, [])
        return fx_key, user_defined_triton_kernel_transitive_closure_source_code(kernel)

    before = keys()
    assert keys() == before
    write_twice(tmp_path, bias="3.0f")
    after = keys()
    assert after[0] != before[0] and after[1] != before[1]


def test_torch_sees_what_raw_functions_may_write(tmp_path, sm90):
    """torch's analysis of a user kernel's TTIR counts writes through a raw function's pointer
    argument; the declarations are gone once Triton optimizes, and none is a store through a
    ``tl.const`` pointer (Triton refuses those)."""
    from torch._higher_order_ops.triton_kernel_wrap import get_mutated_tensors, kernel_side_table

    from examples.kernels.raw_kernels import rotate_kernel

    kernel, constants = kernel_side_table.add_kernel(rotate_kernel), kernel_side_table.add_constant_args({"N": 128})
    assert get_mutated_tensors(kernel, constants, {"data_ptr": torch.zeros(512, dtype=torch.int32)}, {}) == ["data_ptr"]
    ttir = aot(rotate_kernel, {"data_ptr": "*i32", "N": "constexpr"}, {"N": 128}).asm["ttir"]
    assert "tt.extern_elementwise" in ttir and "tt.load" not in ttir and "tt.store" not in ttir

    write_twice(tmp_path)
    gather = import_unreachable(tmp_path).gather_kernel
    aot(gather, {"x_ptr": "*kfp32", "y_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 64})


# ---- on a GPU ------------------------------------------------------------------------------------


@pytest.fixture
def compile_workers():
    """Inductor with two compile workers, started before the test, so kernels compile there."""
    from torch._inductor import config
    from torch._inductor.async_compile import AsyncCompile, shutdown_compile_workers

    torch._dynamo.reset()
    with config.patch(compile_threads=2, worker_start_method="subprocess"):
        AsyncCompile.wait_pool_ready()
        assert AsyncCompile.use_process_pool()
        yield
        shutdown_compile_workers()
    torch._dynamo.reset()


@requires_gpu
def test_compiled_launches_match_eager(compile_workers):
    """Direct launches inside a compiled function: an elementwise raw function, and a pointer one
    that mutates a graph input and an intermediate."""
    import triton

    from examples.kernels.raw_kernels import elementwise_direct_kernel, rotate_direct_kernel

    def plus_one_twice(x):
        y = torch.empty_like(x)
        n = x.numel()
        elementwise_direct_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y * 2

    def rotate_copy(data):
        copy = data.clone()
        rotate_direct_kernel[(data.shape[0],)](copy, N=data.shape[1], num_warps=4)
        return copy

    def rotate_in_place(data):
        rotate_direct_kernel[(data.shape[0],)](data, N=data.shape[1], num_warps=4)

    x = torch.randn(100_003, device="cuda")
    torch.testing.assert_close(torch.compile(plus_one_twice, fullgraph=True)(x), (x + 1.0) * 2, rtol=0, atol=0)

    data = torch.randint(-1000, 1000, (64, 128), device="cuda", dtype=torch.int32)
    expected = torch.roll(data, shifts=-1, dims=1) * 2
    torch.testing.assert_close(torch.compile(rotate_copy, fullgraph=True)(data), expected, rtol=0, atol=0)
    torch.compile(rotate_in_place, fullgraph=True)(data)
    torch.testing.assert_close(data, expected, rtol=0, atol=0)


@requires_gpu
def test_compiled_triton_op_matches_eager(compile_workers):
    import triton

    from examples.kernels.raw_kernels import elementwise_direct_kernel

    @torch.library.triton_op("triton_raw_tests::plus_one", mutates_args={})
    def plus_one(x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        n = x.numel()
        torch.library.wrap_triton(elementwise_direct_kernel)[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y

    def f(x):
        return plus_one(x * 3) - x

    x = torch.randn(4096 + 7, device="cuda")
    eager = f(x)
    torch.testing.assert_close(eager, x * 3 + 1.0 - x)
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(x), eager)


COMPILED_TWICE_PY = textwrap.dedent("""
    import json, sys
    import torch, triton
    from torch._dynamo.utils import counters
    from twice_kernels import twice_plus_kernel

    def f(x):
        y = torch.empty_like(x)
        twice_plus_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
        return y

    x = torch.arange(1000, device="cuda", dtype=torch.float32)
    y = torch.compile(f, fullgraph=True)(x)
    hits = counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"]
    print(json.dumps({"y - 4x": sorted(set((y - 4 * x).tolist())), "cache hits": hits}))
""")


@requires_gpu
def test_cu_edit_reaches_a_process_with_warm_caches(tmp_path):
    """Three processes share inductor's, Triton's and the plugin's caches: the second finds the first's
    compiled graph; the third runs after an edit of the `.cu` and gets the new function."""
    write_twice(tmp_path)
    (tmp_path / "compiled.py").write_text(COMPILED_TWICE_PY)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TRITON_CACHE_DIR": str(tmp_path / "triton"), "TRITON_RAW_CACHE_DIR": str(tmp_path / "raw"),
           "TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}

    def run() -> dict:
        out = subprocess.run([sys.executable, "compiled.py"], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-4000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first == {"y - 4x": [3.0], "cache hits": 0}
    assert second["y - 4x"] == [3.0] and second["cache hits"] > 0, "no cache was used: the test proves nothing"
    write_twice(tmp_path, bias="3.0f")
    assert run() == {"y - 4x": [9.0], "cache hits": 0}
