"""The project's benchmarks (not part of the plugin), run from the repository root as modules:
``python -m bench.compile_overhead``; recorded results in ``bench/results/``."""
