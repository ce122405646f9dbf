"""The project's own scripts (not part of the plugin); the Python ones run from the repository root as
modules: ``python3 -m scripts.main_job``, ``python3 -m scripts.gpu.suite t1``."""
