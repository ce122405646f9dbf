// Not a test: a .cu file clang rejects, for bad-input.ll.
extern "C" __device__ int oops(int x) { return x + undeclared_name; }
