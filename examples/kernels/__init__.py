"""Sample raw functions and the Triton kernels that call them (``raw_kernels``), one ``.cu`` beside them per
feature: an elementwise function, pointers and shared memory, C types, two sources defining the same helper,
NVSHMEM."""
