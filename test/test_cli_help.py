"""Every command-line entry point of the repository prints its help.

argparse formats a help string only when ``--help`` asks for it, so a stray ``%`` in one (it takes
``%%``) or a bad default crashes there and nowhere else. One subprocess runs every ``python -m`` module
that parses arguments, each as ``__main__`` with ``--help``, and reports those that did not print a
usage and exit 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import repository_modules

ROOT = Path(__file__).resolve().parents[1]

RUN_HELP = r"""
import contextlib, io, json, runpy, sys, warnings
warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module is already imported by its package
failed = {}
for module in sys.argv[1:]:
    sys.argv, out = [module, "--help"], io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        failed[module] = "returned without exiting"
    except SystemExit as exit_:
        if exit_.code not in (0, None) or "usage:" not in out.getvalue():
            failed[module] = f"exit {exit_.code!r}, printed {out.getvalue()[:200]!r}"
    except BaseException as error:  # any crash is the failure reported
        failed[module] = repr(error)[:400]
print(json.dumps(failed))
"""


def command_modules() -> list[str]:
    """Modules of the repository's packages that parse a command line when run as ``__main__``."""
    return [name for name, path in repository_modules().items()
            if "argparse" in (text := path.read_text(encoding="utf-8")) and 'if __name__ == "__main__"' in text]


def test_every_command_prints_its_help() -> None:
    modules = command_modules()
    assert "tutorials.megamoe.megamoe" in modules and "scripts.gpu.suite" in modules
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", RUN_HELP, *modules], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    failed = json.loads(done.stdout.strip().splitlines()[-1])
    assert failed == {}, failed
