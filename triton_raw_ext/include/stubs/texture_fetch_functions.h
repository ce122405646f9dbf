/* Empty on purpose: clang 19-20 wrappers include it; CUDA 13 no longer ships it. */
