"""Short complete programs that use the plugin, and the sample kernels the benchmarks, the GPU scripts and
the tests share (``examples.kernels``). Run from the repository root: ``torchrun --nproc-per-node=2 -m
examples.ring_allgather``."""
