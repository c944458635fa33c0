// axpy: out[i] = alpha * x[i] + y[i] for i < n, in float (bf16 rounds to nearest even).
#include "iron_kernel.h"

#define IRON_AXPY(T)                                                                     \
  extern "C" void axpy_##T(const iron::stored_t<iron::T>* x, const iron::stored_t<iron::T>* y, \
                           iron::stored_t<iron::T>* out, int32_t n, float alpha) {      \
    iron::zip<iron::T>(x, y, out, n, [alpha](float a, float b) { return alpha * a + b; });  \
  }

IRON_FLOAT_TYPES(IRON_AXPY)
