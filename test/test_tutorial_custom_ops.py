"""The tutorials' ops as torch custom ops (``triton_raw_ext::allreduce_rmsnorm``, ``::allgather_gemm``,
``::megamoe``) and their nn.Module wrappers.

On CPU: the schemas say what is written in place, the fake implementations give the outputs' shapes
and dtypes, and ``torch.compile(fullgraph=True)`` traces each module, on meta tensors, into one graph
that calls the op (``torch._dynamo.explain``: one graph, no break). The operators need a GPU to be
constructed, and tracing uses only their handle and world: the CPU tests register a namespace with
those two under a real handle. On a GPU: each compiled module returns what the eager op returns, at
world 1.
"""

from __future__ import annotations

import types

import pytest
from conftest import requires_gpu, requires_nvshmem

torch = pytest.importorskip("torch")

from tutorials.allgather_gemm.torch_op import AllGatherGEMMModule  # noqa: E402
from tutorials.allreduce_rmsnorm.torch_op import AllReduceRMSNormModule  # noqa: E402
from tutorials.common import op_registry  # noqa: E402
from tutorials.megamoe.torch_op import MegaMoEModule  # noqa: E402

BF16 = torch.bfloat16
WORLD = 4


@pytest.fixture
def traced_op():
    """The handle and world of an operator, registered as one is, for tracing without a GPU."""
    op = types.SimpleNamespace(world=WORLD)
    op.handle = op_registry.register(op)
    torch._dynamo.reset()
    yield op
    op_registry.unregister(op.handle)
    torch._dynamo.reset()


def meta(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def modules_and_inputs(op) -> dict[str, tuple[torch.nn.Module, tuple[torch.Tensor, ...], tuple[int, ...]]]:
    """op name: (its module, meta inputs of a call, the output's shape)."""
    return {
        "allreduce_rmsnorm": (AllReduceRMSNormModule(op, meta(256)), (meta(16, 256), meta(16, 256)), (16, 256)),
        "allgather_gemm": (AllGatherGEMMModule(op, meta(512, 128)), (meta(64, 512),), (WORLD * 64, 128)),
        "megamoe": (MegaMoEModule(op), (meta(16, 256), meta(16, 8, dtype=torch.float32)), (16, 256)),
    }


def written_arguments(name: str) -> list[str]:
    schema = getattr(torch.ops.triton_raw_ext, name).default._schema
    return [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]


def test_schemas_say_what_is_written_in_place():
    assert written_arguments("allreduce_rmsnorm") == ["residual"]
    assert written_arguments("allgather_gemm") == []
    assert written_arguments("megamoe") == []


@pytest.mark.parametrize("name", ["allreduce_rmsnorm", "allgather_gemm", "megamoe"])
def test_fake_implementation_gives_shape_and_dtype(traced_op, name):
    from torch._subclasses.fake_tensor import FakeTensorMode

    module, inputs, shape = modules_and_inputs(traced_op)[name]
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake_inputs = [mode.from_tensor(t) for t in inputs]
        out = module(*fake_inputs)
    assert tuple(out.shape) == shape and out.dtype == BF16


@pytest.mark.parametrize("name", ["allreduce_rmsnorm", "allgather_gemm", "megamoe"])
def test_module_compiles_to_one_graph_calling_the_op(traced_op, name):
    module, inputs, shape = modules_and_inputs(traced_op)[name]
    explained = torch._dynamo.explain(module)(*inputs)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons
    calls = [n.target for n in explained.graphs[0].graph.nodes if n.op == "call_function"]
    assert calls == [getattr(torch.ops.triton_raw_ext, name)]
    code = explained.graphs[0].code
    assert f"triton_raw_ext.{name}(" in code and f", {traced_op.handle})" in code  # the handle, a constant


@pytest.mark.parametrize("name", ["allreduce_rmsnorm", "allgather_gemm", "megamoe"])
def test_module_compiles_fullgraph_through_aot_autograd(traced_op, name):
    module, inputs, shape = modules_and_inputs(traced_op)[name]
    out = torch.compile(module, fullgraph=True, backend="aot_eager")(*inputs)
    assert tuple(out.shape) == shape and out.dtype == BF16


def test_cuda_only():
    with pytest.raises(NotImplementedError, match="triton_raw_ext::megamoe"):
        torch.ops.triton_raw_ext.megamoe(torch.empty(2, 8, dtype=BF16), torch.empty(2, 4), 1)


def test_closed_handle_is_refused():
    op = types.SimpleNamespace()
    handle = op_registry.register(op)
    assert op_registry.lookup(handle) is op
    op_registry.unregister(handle)
    op_registry.unregister(handle)
    with pytest.raises(RuntimeError, match=f"no operator is registered under handle {handle}: it was closed"):
        op_registry.lookup(handle)
    assert op_registry.register(op) > handle  # handles are never reused


class _CPUStandIns:
    """Operators that compute each op's result with torch on CPU tensors (world 1), registered under
    handles as the real ones are, so that the ops' own implementations run on CPU."""

    class AllReduceRMSNorm:
        def __call__(self, x, residual, weight, eps, out):
            norm_out, residual_out = out
            residual_out.add_(x)
            norm_out.copy_(torch.nn.functional.rms_norm(residual_out.float(), (x.shape[1],), weight.float(), eps))

    class AllGatherGEMM:
        world = 1

        def __call__(self, a, b):
            return a @ b

    class MegaMoE:
        def __call__(self, x, logits):
            return (x.float() * logits.float().softmax(-1).amax(-1, keepdim=True)).to(x.dtype)


@pytest.fixture
def ops_on_cpu():
    """The three ops' own implementations also registered for CPU tensors, over the stand-ins (removed
    afterwards: the ops are CUDA-only)."""
    from tutorials.allgather_gemm import torch_op as t2
    from tutorials.allreduce_rmsnorm import torch_op as t1
    from tutorials.megamoe import torch_op as t3

    lib = torch.library.Library("triton_raw_ext", "IMPL")
    lib.impl("allreduce_rmsnorm", t1._allreduce_rmsnorm, "CPU")
    lib.impl("allgather_gemm", t2._allgather_gemm, "CPU")
    lib.impl("megamoe", t3._megamoe, "CPU")
    ops = {"allreduce_rmsnorm": _CPUStandIns.AllReduceRMSNorm(), "allgather_gemm": _CPUStandIns.AllGatherGEMM(),
           "megamoe": _CPUStandIns.MegaMoE()}  # fmt: skip
    handles = {name: op_registry.register(op) for name, op in ops.items()}
    torch._dynamo.reset()
    yield handles
    for handle in handles.values():
        op_registry.unregister(handle)
    lib._destroy()
    torch._dynamo.reset()


def test_inductor_compiles_each_op_and_matches_eager_on_cpu(ops_on_cpu):
    """torch.compile(fullgraph=True) with inductor (the default backend) of each module, on CPU tensors
    through the stand-ins: the compiled module returns what the eager one does and writes the same
    residual in place (the op's schema marks it written, so inductor keeps the write)."""
    g = torch.Generator().manual_seed(0)
    x, residual = (torch.randn(16, 256, generator=g).to(BF16) for _ in range(2))
    weight = torch.randn(256, generator=g).to(BF16)
    handles = ops_on_cpu
    norm = AllReduceRMSNormModule(types.SimpleNamespace(handle=handles["allreduce_rmsnorm"]), weight, 1e-6)
    gemm = AllGatherGEMMModule(types.SimpleNamespace(handle=handles["allgather_gemm"], world=1),
                               torch.randn(256, 64, generator=g).to(BF16))  # fmt: skip
    moe = MegaMoEModule(types.SimpleNamespace(handle=handles["megamoe"]))
    logits = torch.randn(16, 8, generator=g)
    for module, inputs in ((norm, (x, residual)), (gemm, (x,)), (moe, (x, logits))):
        eager_inputs = [t.clone() for t in inputs]
        compiled_inputs = [t.clone() for t in inputs]
        want = module(*eager_inputs)
        got = torch.compile(module, fullgraph=True)(*compiled_inputs)
        assert torch.equal(got, want)
        for a, b in zip(compiled_inputs, eager_inputs, strict=True):
            assert torch.equal(a, b)
        if module is norm:
            assert not torch.equal(compiled_inputs[1], residual), "the compiled module wrote the residual"


def assert_compiled_matches_eager(module: torch.nn.Module, *inputs: torch.Tensor) -> None:
    """Eager module vs torch.compile(fullgraph=True) of it, bit for bit, on copies of the same inputs
    (copies: an op may write its inputs in place)."""
    torch._dynamo.reset()
    eager_inputs = [t.clone() for t in inputs]
    compiled_inputs = [t.clone() for t in inputs]
    want = module(*eager_inputs)
    got = torch.compile(module, fullgraph=True)(*compiled_inputs)
    torch.cuda.synchronize()
    assert torch.equal(got, want)
    for a, b in zip(compiled_inputs, eager_inputs, strict=True):
        assert torch.equal(a, b)  # the same in-place writes


@requires_gpu
def test_allreduce_rmsnorm_compiled_matches_eager_at_world_1():
    from tutorials.allreduce_rmsnorm import AllReduceRMSNorm
    from tutorials.allreduce_rmsnorm.reference import compare, make_inputs, reference

    torch.cuda.set_device(0)
    op = AllReduceRMSNorm(1024, BF16, 64)
    x, residual, weight = make_inputs(1, 0, 16, 1024, BF16, torch.device("cuda", 0))
    module = AllReduceRMSNormModule(op, weight, 1e-6)
    updated = residual.clone()
    norm = module(x, updated)
    want_norm, want_res = reference([x], residual, weight, 1e-6)
    assert compare(updated, want_res, BF16).ok  # residual_out, written in place
    assert compare(norm, want_norm, BF16).ok
    assert_compiled_matches_eager(module, x, residual)
    op.close()


@requires_gpu
def test_allgather_gemm_compiled_matches_eager_at_world_1():
    from tutorials.allgather_gemm import AllGatherGEMM

    torch.cuda.set_device(0)
    op = AllGatherGEMM(256, 256, 512, BF16)
    a = torch.randn(256, 512, dtype=BF16, device="cuda")
    b = torch.randn(512, 256, dtype=BF16, device="cuda")
    module = AllGatherGEMMModule(op, b)
    torch.testing.assert_close(module(a).float(), (a.float() @ b.float()), rtol=2e-2, atol=0.5)
    assert_compiled_matches_eager(module, a)
    op.close()


@requires_gpu
@requires_nvshmem
def test_megamoe_compiled_matches_eager_at_world_1():
    from triton_raw_ext import runtime
    from tutorials.megamoe import MegaMoE
    from tutorials.megamoe.megamoe import make_inputs, make_weights

    runtime.init()
    dev = torch.device("cuda", torch.cuda.current_device())
    w1, w2 = make_weights(256, 128, 8, 0, dev)
    with MegaMoE(256, 128, 8, 2, 64, w1, w2) as layer:
        x, logits = make_inputs(48, 256, 8, "random", 1, dev)
        assert_compiled_matches_eager(MegaMoEModule(layer), x, logits)
