extern "C" __device__ int broken(int x) {
  return x +;  // syntax error on line 2
}
