"""Helpers the tutorials share (not part of the plugin): ``tutorials/`` on ``sys.path``, then
``from common.timing import ...``."""
