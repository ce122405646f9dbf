"""The kernels ``bench.compile_overhead`` compiles, one module per case family."""
