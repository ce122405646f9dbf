"""Helpers the three tutorials share (``from ..common.timing import ...`` inside a tutorial)."""
