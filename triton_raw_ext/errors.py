"""The exceptions the plugin raises. Every message names the cause and the fix."""


class RawCompileError(RuntimeError):
    """A raw CUDA function could not be compiled, linked or called from a kernel.

    Raised for a bad `.cu` file (with clang's own ``file:line`` diagnostics), a missing or too old
    toolchain, a call with the wrong arity or types, and a missing NVSHMEM installation.
    """


class RawRuntimeError(RuntimeError):
    """The NVSHMEM host runtime was used wrongly or failed (bootstrap, memory, teardown)."""
