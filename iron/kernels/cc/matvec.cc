// matvec: out[i] = sum_j w[i * k + j] * x[j] for i < m, with w an m x k row-major matrix.
// Integers accumulate exactly (mod 2**64) and wrap to the element type; floats accumulate in
// float.
#include "iron_kernel.h"

#define IRON_MATVEC(T)                                                                   \
  extern "C" void matvec_##T(const iron::stored_t<iron::T>* w,                           \
                             const iron::stored_t<iron::T>* x,                           \
                             iron::stored_t<iron::T>* out, int32_t m, int32_t k) {       \
    for (int32_t i = 0; i < m; ++i) {                                                    \
      out[i] = iron::dot<iron::T>(w + i * k, x, 1, k);                                   \
    }                                                                                    \
  }

IRON_ALL_TYPES(IRON_MATVEC)
