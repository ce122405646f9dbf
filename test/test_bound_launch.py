"""tutorials.common.bound_launch: the argument list of a bound launch is the one Triton's binder makes
for the same call, and a value that would pick another kernel is refused (CPU: meta tensors, sm_90)."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from conftest import requires_gpu  # noqa: E402
from triton.compiler import make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from tutorials.common.aot import SM90  # noqa: E402
from tutorials.common.bound_launch import BoundArguments  # noqa: E402

BACKEND = make_backend(SM90)


@triton.jit(do_not_specialize=["n"])
def _kernel(x, desc, n, m, BLOCK: tl.constexpr):
    pass


def meta(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def binder_values(fn, *args, **kwargs) -> tuple[list, list]:
    bound, specialization, _ = create_function_from_signature(fn.signature, fn.params, BACKEND)(*args, **kwargs)
    return list(bound.values()), specialization


def test_new_values_give_the_binders_arguments_and_specialisation():
    desc = TensorDescriptor.from_tensor(meta(64, 128), [64, 64])
    bound = BoundArguments(_kernel, (meta(256), desc, 5, 32), {"BLOCK": 4}, ("x", "desc", "n"), BACKEND)
    x, other_desc = meta(512), TensorDescriptor.from_tensor(meta(128, 128), [64, 64])
    got = bound.arguments(x, other_desc, 70000)
    want, _ = binder_values(_kernel, x, other_desc, 70000, 32, BLOCK=4)
    assert got == want and got[0] is x and got[1] is other_desc
    assert bound.arguments(meta(256), desc, 5)[3] == 32  # the fixed argument stays


def test_values_that_would_pick_another_kernel_are_refused_naming_the_parameter():
    desc = TensorDescriptor.from_tensor(meta(64, 128), [64, 64])
    bound = BoundArguments(_kernel, (meta(256), desc, 5, 32), {"BLOCK": 4}, ("x", "desc", "n"), BACKEND)
    with pytest.raises(ValueError, match=r"BoundLaunch\(_kernel\): x specialises as"):
        bound.arguments(meta(256)[1:], desc, 5)  # 2-byte offset: not 16-byte aligned
    with pytest.raises(ValueError, match=r"x specialises as"):
        bound.arguments(meta(256, dtype=torch.float16), desc, 5)
    with pytest.raises(ValueError, match=r"desc specialises as"):
        bound.arguments(meta(256), TensorDescriptor.from_tensor(meta(64, 128), [32, 64]), 5)
    with pytest.raises(ValueError, match=r"n specialises as"):
        bound.arguments(meta(256), desc, 2**40)  # int64, bound as int32
    with pytest.raises(ValueError, match="3 values expected, got 2"):
        bound.arguments(meta(256), desc)


def test_parameters_that_cannot_vary_are_refused_at_binding():
    args, kwargs = (meta(256), None, 5, 32), {"BLOCK": 4}
    with pytest.raises(ValueError, match="integer parameter m varies, but the kernel specialises on it"):
        BoundArguments(_kernel, args, kwargs, ("m",), BACKEND)
    with pytest.raises(ValueError, match="BLOCK is constexpr"):
        BoundArguments(_kernel, args, kwargs, ("BLOCK",), BACKEND)
    with pytest.raises(ValueError, match="has no parameter 'y'"):
        BoundArguments(_kernel, args, kwargs, ("y",), BACKEND)


def test_every_megamoe_launch_binds_with_its_per_call_arguments_varying():
    """What MegaMoE._launch binds: each kernel of both impls, bf16 and fp8, world 1 and 2, with x, logits,
    y and T varying; a call with other tensors and another T gives the binder's arguments."""
    from tutorials.megamoe import aot
    from tutorials.megamoe.megamoe import PER_CALL_KEYS

    for cfg, launch in aot.all_launches():
        kwargs = {**launch.constexprs, "num_warps": launch.num_warps, "num_stages": launch.num_stages}
        names = [name for name, key in launch.params if key in PER_CALL_KEYS]
        first = aot.launch_bindings(launch, cfg)
        bound = BoundArguments(launch.fn, launch.arguments(first), kwargs, names, BACKEND)
        call = {**first, "x": meta(*first["x"].shape), "y": meta(*first["y"].shape),
                "logits": meta(*first["logits"].shape, dtype=torch.float32), "T": 17}  # fmt: skip
        got = bound.arguments(*(call[key] for _, key in launch.params if key in PER_CALL_KEYS))
        want, _ = binder_values(launch.fn, *launch.arguments(call), **kwargs)
        assert got == want, launch.name


def test_allgather_gemm_launches_bind_with_their_per_call_arguments_varying():
    """What AllGatherGEMM._bound_launch binds: its GEMM (with and without waits) and its SM-push GEMM, with
    the per-call descriptors, A and epoch varying; a second call's values give the binder's arguments."""
    from tutorials.allgather_gemm.allgather_gemm import (
        GEMM_PER_CALL,
        SM_PUSH_PER_CALL,
        gemm_launch,
        sm_push_launch,
    )
    from tutorials.allgather_gemm.kernels import ag_gemm_kernel, ag_gemm_sm_push_kernel
    from tutorials.allgather_gemm.schedule import DEFAULT_CONFIG as cfg

    m, n, k, world = 256, 512, 1024, 2
    ready, state, workspace = meta(world, dtype=torch.int32), meta(8, dtype=torch.int32), meta(2, world * m, k)
    buffers = TensorDescriptor.from_tensor(workspace.view(-1, k), [cfg.block_m, cfg.block_k])

    def call(epoch: int) -> dict:
        a, b, out = meta(m, k), meta(k, n), meta(world * m, n)
        local = TensorDescriptor.from_tensor(a, [cfg.block_m, cfg.block_k])
        gemm = gemm_launch(cfg, local, buffers, b, out, ready, epoch=epoch, rank=1, world=world, wait_ms=100,
                           num_sms=132, wait=True)  # fmt: skip
        push = sm_push_launch(cfg, local, buffers, b, out, a, workspace, ready, state, rank=1, world=world,
                              wait_ms=100, num_sms=132)  # fmt: skip
        return {ag_gemm_kernel: (gemm, GEMM_PER_CALL), ag_gemm_sm_push_kernel: (push, SM_PUSH_PER_CALL)}

    first, second = call(1), call(2)
    for fn, ((_, args, kwargs), varying) in first.items():
        bound = BoundArguments(fn, args, kwargs, varying, BACKEND)
        (_, new_args, _), _ = second[fn]
        assert bound.positions == tuple(fn.arg_names.index(name) for name in varying)
        got = bound.arguments(*(new_args[i] for i in bound.positions))  # the values at the varying positions
        want, _ = binder_values(fn, *new_args, **kwargs)
        assert got == want, fn.__name__


def test_a_descriptor_parameter_takes_a_tensor_of_the_bound_descriptors_shape():
    """A varying descriptor given as its tensor (the bound descriptor over it): same dtype, shape and strides,
    not in host memory."""
    desc = TensorDescriptor.from_tensor(meta(64, 128), [64, 64])
    bound = BoundArguments(_kernel, (meta(256), desc, 5, 32), {"BLOCK": 4}, ("x", "desc", "n"), BACKEND)
    t = meta(64, 128)
    assert bound.arguments(meta(256), t, 5)[1] is t and bound.descriptors == {1: desc}
    on_host = torch.empty(64, 128, dtype=torch.bfloat16)
    for wrong in (meta(128, 128), meta(64, 128, dtype=torch.float16), meta(128, 64).t(), on_host):
        with pytest.raises(ValueError, match=r"the tensor given for descriptor desc is .* the bound descriptor needs "
                                             r"torch.bfloat16 \(64, 128\) with strides \(128, 1\)"):  # fmt: skip
            bound.arguments(meta(256), wrong, 5)


@pytest.mark.parametrize(("world", "push", "kernels"), [
    (1, "auto", ["ag_gemm_kernel"]), (2, "auto", ["ag_gemm_kernel", "ag_gemm_sm_push_kernel"]),
    (4, "sm", ["ag_gemm_kernel", "ag_gemm_sm_push_kernel"]), (2, "copy_engine", ["ag_gemm_kernel"]),
])  # fmt: skip
def test_allgather_gemm_preloads_the_kernels_its_calls_bind(monkeypatch, world, push, kernels):
    """AllGatherGEMM._preload (at construction: a module first loaded under graph capture fails it) loads
    each kernel a call of that world and push path binds, specialised as the call's arguments are."""
    import triton_raw_ext
    from tutorials.allgather_gemm.allgather_gemm import AllGatherGEMM, gemm_launch
    from tutorials.allgather_gemm.schedule import DEFAULT_CONFIG as cfg

    loaded = []
    monkeypatch.setattr(triton_raw_ext, "preload", lambda fn, *args, grid, **kw: loaded.append((fn, args, kw)))
    m, n, k = 256, 512, 1024
    op = types.SimpleNamespace(dtype=torch.bfloat16, config=cfg, m_per_rank=m, n=n, k=k, world=world, rank=world - 1,
                               wait_ms=100, num_sms=66, push=push)  # fmt: skip
    AllGatherGEMM._preload(op)
    assert [fn.__name__ for fn, _, _ in loaded] == kernels
    fn, args, kwargs = loaded[0]
    assert kwargs["WAIT"] is (world > 1)
    # what the first call binds (AllGatherGEMM._launch): descriptors over the call's tensors, a later epoch
    a, gathered = meta(m, k), meta(world * m, k)
    descs = [TensorDescriptor.from_tensor(t, [cfg.block_m, cfg.block_k]) for t in (a, a if world == 1 else gathered)]
    _, call_args, call_kwargs = gemm_launch(cfg, *descs, meta(k, n), meta(world * m, n), meta(world, dtype=torch.int32),
                                            epoch=7, rank=world - 1, world=world, wait_ms=100, num_sms=66,
                                            wait=world > 1)  # fmt: skip
    assert call_kwargs == kwargs
    assert binder_values(fn, *args, **kwargs)[1] == binder_values(fn, *call_args, **call_kwargs)[1]


@triton.jit(do_not_specialize=["scale"])
def _scaled_copy(src_desc, out, scale, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tile = src_desc.load([tl.program_id(0) * BLOCK, 0])
    tl.store(out + rows[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :], tile * scale)


@requires_gpu
def test_bound_launch_without_and_with_an_enter_hook_runs_what_triton_runs(monkeypatch):
    """Without an enter hook the flat list goes to the launcher as it is; with one the launch goes through
    Triton's launcher with its metadata. Both compute what ``kernel[grid]`` does, on new tensors each call."""
    from triton import knobs

    from tutorials.common.bound_launch import BoundLaunch

    block, rows = 32, 128
    src = [torch.randn(rows, block, device="cuda") for _ in range(2)]
    outs = [torch.empty(rows, block, device="cuda") for _ in range(2)]
    desc = TensorDescriptor.from_tensor(src[0], [block, block])
    bound = BoundLaunch(_scaled_copy, (rows // block,), (desc, outs[0], 2.0), {"BLOCK": block},
                        ("src_desc", "out", "scale"))  # fmt: skip
    assert bound.flat
    bound.launch(src[1], outs[1], 3.0)
    bound.launch(src[0], outs[0], -1.0)
    seen = []
    hook = knobs.runtime.launch_enter_hook
    if hasattr(hook, "calls"):  # a HookChain (Triton >= 3.6)
        monkeypatch.setattr(hook, "calls", [seen.append])
    else:
        monkeypatch.setattr(knobs.runtime, "launch_enter_hook", seen.append)
    hooked = torch.empty_like(outs[0])
    bound.launch(src[1], hooked, 0.5)
    monkeypatch.undo()
    want = torch.empty_like(hooked)
    _scaled_copy[(rows // block,)](TensorDescriptor.from_tensor(src[1], [block, block]), want, 0.5, BLOCK=block)
    torch.cuda.synchronize()
    assert torch.equal(outs[1], src[1] * 3.0) and torch.equal(outs[0], -src[0])
    assert torch.equal(hooked, want) and torch.equal(hooked, src[1] * 0.5)
    assert len(seen) == 1 and seen[0].get()["name"] == "_scaled_copy"  # Triton's LazyDict


def test_launch_hooks_count_as_set_only_when_they_call_something(monkeypatch):
    from triton import knobs

    from tutorials.common.bound_launch import launch_hooks_set

    for name in ("launch_enter_hook", "launch_exit_hook"):
        monkeypatch.setattr(knobs.runtime, name, None)
    assert not launch_hooks_set()
    chain = types.SimpleNamespace(calls=[])  # an empty HookChain, Triton's default from 3.6 on
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", chain)
    assert not launch_hooks_set()
    chain.calls.append(print)
    assert launch_hooks_set()
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", None)
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", print)
    assert launch_hooks_set()
