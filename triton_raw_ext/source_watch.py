"""Edits of a `.cu` file (or its includes or ``libs=``) in a running process reach the next launch.

Triton computes a kernel's hash once per process and keeps compiled kernels per ``JITFunction``, so
without this a notebook that edits a `.cu` would keep launching the old code, and store code built
from the new source under the old source's hash in the on-disk cache.

Contract: every :class:`~triton_raw_ext.dialect.RawFunction` records the stat (``mtime_ns``, size,
inode) of each file its cache key read. ``knobs.runtime.jit_cache_hook``, which Triton calls before
it compiles a kernel for a new specialisation, gives each kernel that reaches raw functions
(through its globals and the JIT functions they hold) a pre-run hook. At every launch of such a
kernel the hook stats those files, each once (a few microseconds each: ``bench/source_watch.py``); when one
changed, every JIT function in the process forgets its hash and compiled kernels, so the launch
rehashes, finds the new key and compiles the new code. A hook installed before is called first.

A cache hook makes Triton serialise each new specialisation to JSON, constexpr values included;
raw functions (and ``triton_raw_ext.nvshmem`` calls) passed as constexpr arguments are not JSON, so
the serialisation is given their ``repr`` instead of raising.
"""

from __future__ import annotations

import gc
import json
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import triton.runtime.jit as triton_jit
from triton import knobs
from triton.runtime.jit import JITFunction

from .dialect import RawFunction, stamp

_MARK = "_triton_raw_ext_watch"
_watched: weakref.WeakSet[JITFunction] = weakref.WeakSet()


def changed(raw_functions: list) -> bool:
    """Whether a file that one of ``raw_functions`` was built from changed (each file stat'ed once)."""
    checked: set[Path] = set()
    for raw in raw_functions:
        for path, seen in raw.source_stamps.items():
            if path not in checked:
                checked.add(path)
                if stamp(path) != seen:
                    return True
    return False


def raw_functions_of(fn: JITFunction) -> list:
    """The raw functions ``fn`` can reach: in its globals, and in those of the JIT functions there."""
    found, seen, todo = [], set(), [fn]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for value in list(getattr(current, "__globals__", {}).values()):
            if isinstance(value, RawFunction):
                found.append(value)
            elif isinstance(value, JITFunction):
                todo.append(value)
    return found


def _jit_functions() -> Iterator[JITFunction]:
    # type(), not isinstance(): isinstance reads __class__, which some module proxies answer with a warning
    return (obj for obj in gc.get_objects() if issubclass(type(obj), JITFunction))


def forget_compiled_kernels() -> None:
    """Every JIT function recomputes its hash and looks its kernels up again at its next launch."""
    for fn in _jit_functions():
        fn.hash = None
        fn.device_caches.clear()


def _pre_run(raw_functions: list) -> Callable[..., None]:
    def check(*args, **kwargs) -> None:
        if changed(raw_functions):
            forget_compiled_kernels()

    return check


def watch(fn: JITFunction) -> None:
    """Give ``fn`` the pre-run check if it reaches raw functions (once per function)."""
    if fn in _watched:
        return
    _watched.add(fn)
    raw_functions = raw_functions_of(fn)
    if raw_functions:
        fn.add_pre_run_hook(_pre_run(raw_functions))


def _jsonable(value):
    """``value`` with what JSON cannot hold (a raw function given as a constexpr) replaced by its repr."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_jsonable(v) for v in value)
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def _serialise_any_constexpr(serialise: Callable) -> Callable:
    # (name, signature, constants, attrs, options, key[, target from Triton 3.8])
    def serialise_specialisation(*args):
        try:
            return serialise(*args)
        except TypeError:
            name, signature, constants, attrs, options, key, *rest = args
            return serialise(name, signature, _jsonable(constants), attrs, options, _jsonable(key), *rest)

    setattr(serialise_specialisation, _MARK, True)
    return serialise_specialisation


def install() -> None:
    """Chain :func:`watch` into ``knobs.runtime.jit_cache_hook``; safe to call more than once."""
    if not getattr(triton_jit.serialize_specialization_data, _MARK, False):
        triton_jit.serialize_specialization_data = _serialise_any_constexpr(triton_jit.serialize_specialization_data)
    previous = knobs.runtime.jit_cache_hook
    if getattr(previous, _MARK, False):
        return

    def hook(*, fn, **kwargs):
        watch(fn.jit_function)
        return previous(fn=fn, **kwargs) if previous is not None else None

    setattr(hook, _MARK, True)
    knobs.runtime.jit_cache_hook = hook
