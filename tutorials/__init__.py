"""The tutorials, each a package whose ``__init__`` exports its op (``from tutorials.megamoe import
MegaMoE``), and ``common``, the helpers they share. Not part of the plugin: run from the repository
root (``python -m tutorials.megamoe.benchmark``); ``tutorials/README.md`` introduces them."""

TUTORIALS = ("allreduce_rmsnorm", "allgather_gemm", "megamoe")  # reading order: Tutorials 1, 2, 3
