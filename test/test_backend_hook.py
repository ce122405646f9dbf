"""The backend hook chains with a hook installed before it (stages and cache key) and installs only once."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import child_env

SCRIPT = textwrap.dedent('''
    from triton import knobs
    calls = []

    def earlier_hook(*args):
        if not args:  # Triton >= 3.7 asks every hook for its cache key
            return "earlier-pipeline", "earlier-hash"
        backend, stages, options, language, capability = args
        calls.append(sorted(stages))
        make_ptx = stages["ptx"]
        stages["ptx"] = lambda src, metadata: make_ptx(src, metadata) + "// seen by the earlier hook\\n"

    knobs.runtime.add_stages_inspection_hook = earlier_hook
    import triton_raw_ext
    from triton_raw_ext.backend_hook import install
    install()  # a second install must not wrap twice
    hook = knobs.runtime.add_stages_inspection_hook
    from conftest import aot
    from examples.kernels import raw_kernels as k
    c = aot(k.elementwise_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
            {"BLOCK": 256})
    assert calls and "llir" in calls[0], calls
    assert c.asm["ptx"].endswith("// seen by the earlier hook\\n")
    import re
    assert not re.search(r"call[^@\\n]*@rawext_", c.asm["llir"]), "raw call left in llir"
    assert knobs.runtime.add_stages_inspection_hook is hook
    key, key_hash = hook()
    assert key.startswith("earlier-pipeline") and "triton_raw_ext-" in key and len(key_hash) == 64, key
    print("ok", len(calls))
''')


def test_chains_with_an_earlier_hook(tmp_path: Path):
    script = tmp_path / "chain.py"
    script.write_text(SCRIPT)
    # A Triton cache of its own: the earlier hook changes the PTX, and stage hooks are not part of
    # Triton's cache key, so a shared cache would hand the changed PTX to other tests.
    env = child_env(TRITON_CACHE_DIR=str(tmp_path / "triton"))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok 1"


def test_stage_hook_cache_key_tracks_the_plugin_code():
    from triton_raw_ext.triton_version import stage_hook

    seen = []
    hook = stage_hook(lambda *args: seen.append(args), "plugin-a", None)
    assert hook() == hook() and hook()[0] == "plugin-a"
    assert stage_hook(lambda *args: None, "plugin-b", None)()[1] != hook()[1]
    hook("backend", {}, "options", "language", 90)
    assert seen == [("backend", {}, "options", "language", 90)]
