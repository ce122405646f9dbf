"""tutorials.common.flat_launch: the flattened launch passes the launcher what Triton's own descriptor
wrapper (``wrap_handle_tensordesc`` of the installed Triton) passes it for the same arguments, and
encodes a descriptor once per tensor address (CPU: the backend's expansion is replaced by a recorder)."""

from __future__ import annotations

import functools
import types

import pytest

torch = pytest.importorskip("torch")
nvidia_driver = pytest.importorskip("triton.backends.nvidia.driver")
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from tutorials.common.flat_launch import flat_launch  # noqa: E402

# x, a descriptor that varies, an int, a constexpr, a fixed descriptor, a varying int
SIGNATURE = {"x": "*bf16", "a": "tensordesc<bf16[64, 64]>", "n": "i32", "BLOCK": "constexpr",
             "w": "tensordesc<bf16[64, 128]>", "t": "i32"}  # fmt: skip
VARYING = (0, 1, 5)


class Recorder:
    """The backend's expansion, recorded: a descriptor becomes a token of its address and block."""

    def __init__(self) -> None:
        self.encoded: list[int] = []

    def __call__(self, desc, meta, *_):
        if meta is None:
            return [desc.base, *desc.shape, *desc.strides, "decomposed"]
        self.encoded.append(desc.base.data_ptr())
        return [("map", desc.base.data_ptr(), tuple(meta["block"])), *desc.shape, *desc.strides]


def tensor(*shape: int) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.bfloat16)


def desc(t: torch.Tensor, block: list[int]) -> TensorDescriptor:
    return TensorDescriptor.from_tensor(t, block)


def wrappers(monkeypatch, metas):
    """Triton's wrapper and a FlatLaunch over the same recording launcher, and the expansion recorder."""
    recorder, calls = Recorder(), []
    monkeypatch.setattr(nvidia_driver, "make_tensordesc_arg", recorder)
    triton_launch = nvidia_driver.wrap_handle_tensordesc(lambda *args: calls.append(args), SIGNATURE, metas)
    return triton_launch, recorder, calls


def launch_args(flat, kernel_args: list) -> tuple:
    base = ("grid", "stream", "function")
    if flat._flat_base is None:
        return (*base, kernel_args)
    return (*base, *[None] * (flat._flat_base - len(base)), *kernel_args)


def flattened(args: tuple) -> list:
    """A launcher call's kernel arguments, flat, with tensors by identity."""
    return [("tensor", id(v)) if isinstance(v, torch.Tensor) else v for a in args for v in
            (a if isinstance(a, list) else [a])]  # fmt: skip


TMA_METAS = [{"block": [64, 64]}, {"block": [64, 128]}]


@pytest.mark.parametrize("metas", [TMA_METAS, [None, None]], ids=["tma", "decomposed"])
def test_flat_launch_passes_what_tritons_wrapper_passes(monkeypatch, metas):
    triton_launch, recorder, calls = wrappers(monkeypatch, metas)
    x, a, w = tensor(256), tensor(128, 64), tensor(64, 256)
    bound = [x, desc(a, [64, 64]), 7, 16, desc(w, [64, 128]), 3]
    flat = flat_launch(types.SimpleNamespace(launch=triton_launch), bound, VARYING)
    assert flat is not None
    for new in ([tensor(256), desc(tensor(128, 64), [64, 64]), 7, 16, bound[4], 9],
                [x, bound[1], 7, 16, bound[4], 3]):  # fmt: skip
        triton_launch(*launch_args(flat, new))
        flat(*launch_args(flat, new))
        assert flattened(calls[-1]) == flattened(calls[-2])


def test_a_descriptor_given_as_its_tensor_is_encoded_once_per_address(monkeypatch):
    triton_launch, recorder, calls = wrappers(monkeypatch, TMA_METAS)
    a, w = tensor(128, 64), tensor(64, 256)
    bound = [tensor(256), desc(a, [64, 64]), 7, 16, desc(w, [64, 128]), 3]
    flat = flat_launch(types.SimpleNamespace(launch=triton_launch), bound, VARYING)
    assert recorder.encoded == [a.data_ptr(), w.data_ptr()]  # both bound descriptors, once, at binding
    other = tensor(128, 64)
    for _ in range(3):
        for given in (a, other):
            new = [bound[0], given, 7, 16, bound[4], 3]
            flat(*launch_args(flat, new))
            triton_launch(*launch_args(flat, [*new[:1], desc(given, [64, 64]), *new[2:]]))
            assert flattened(calls[-2]) == flattened(calls[-1])
    # Triton's wrapper encodes both descriptors on each of its 6 launches; FlatLaunch a and other once each
    assert recorder.encoded.count(a.data_ptr()) == 1 + 1 + 3
    assert recorder.encoded.count(other.data_ptr()) == 1 + 3
    assert recorder.encoded.count(w.data_ptr()) == 1 + 6


class CudaLike(torch.Tensor):
    """A CPU tensor that says it is a CUDA tensor: what the launch passes as an address."""

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True


def test_cuda_tensors_go_to_tritons_c_launcher_as_addresses():
    """A kernel without descriptors: Triton's C launcher gets the same list with each CUDA tensor's
    address in its place (bound ones once, varying ones per call); a CPU tensor stays a tensor, for the
    launcher to refuse."""
    calls = []
    c_launcher = functools.partial(lambda *args: calls.append(args))  # no Python code of its own, as a C function
    fixed, varying = (torch.empty(8).as_subclass(CudaLike) for _ in range(2))
    flat = flat_launch(types.SimpleNamespace(launch=c_launcher), [fixed, varying, 5, "constexpr"], (1, 2))
    assert flat is not None and flat.template == [fixed.data_ptr(), varying.data_ptr(), 5, "constexpr"]
    other = torch.empty(8).as_subclass(CudaLike)
    flat(*launch_args(flat, [fixed, other, 6, "constexpr"]))
    assert flattened(calls[-1])[-4:] == [fixed.data_ptr(), other.data_ptr(), 6, "constexpr"]
    cpu = torch.empty(8)
    flat(*launch_args(flat, [fixed, cpu, 6, "constexpr"]))
    assert flattened(calls[-1])[-3] == ("tensor", id(cpu))


def test_a_python_launch_that_is_not_tritons_wrapper_is_left_as_it_is():
    def direct_launcher(*args):
        return args

    assert flat_launch(types.SimpleNamespace(launch=direct_launcher), [1, 2], (0,)) is None
    assert flat_launch(types.SimpleNamespace(), [1, 2], (0,)) is None
