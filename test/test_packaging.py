"""The layout the package is built from: ``triton_raw_ext/``, with ``passes/`` and ``runtime/`` mapped
into it by ``pyproject.toml``, and nothing else of the repository importable through it."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_goes_into_the_wheel():
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {}
    for package, folder in config["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            folders[".".join((package, *init.parent.relative_to(ROOT / folder).parts))] = init.parent
    assert set(config["packages"]) == set(folders), "list every package folder in [tool.setuptools] packages"


def test_the_repository_is_not_importable_through_the_package():
    for package in ("triton_raw_ext.passes", "triton_raw_ext.runtime"):  # mapped from passes/ and runtime/
        importlib.import_module(package)
    for name in ("triton_raw_ext.tutorials", "triton_raw_ext.scripts", "triton_raw_ext.test"):
        assert importlib.util.find_spec(name) is None, f"{name} must not be importable"
