/* Empty on purpose: clang's CUDA runtime wrapper includes this curand header, which device-only
   compiles of raw functions never need and pip/CUDA-13 layouts may lack. */
