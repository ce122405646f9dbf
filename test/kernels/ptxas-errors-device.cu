// Raw code that clang compiles but that cannot become a kernel: calls of functions defined nowhere
// (C and C++ names), and inline PTX that ptxas rejects.
extern "C" __device__ int helper(int);
__device__ int cxx_helper(int);

extern "C" __device__ int uses_helper(int x) {
  int tripled = x * 3;
  return helper(tripled) + 1;
}

extern "C" __device__ int uses_cxx_helper(int x) { return cxx_helper(x); }

extern "C" __device__ float bad_asm(float x) {
  asm volatile("not.an.instruction;");
  return x * 2.0f;
}

extern "C" __device__ float twice(float x) { return x * 2.0f; }
