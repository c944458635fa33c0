// matmul: out = a @ b with a m x k, b k x n and out m x n, all row-major. Integers accumulate
// exactly (mod 2**64) and wrap to the element type; floats accumulate in float.
#include "iron_kernel.h"

#define IRON_MATMUL(T)                                                                   \
  extern "C" void matmul_##T(const iron::stored_t<iron::T>* a,                           \
                             const iron::stored_t<iron::T>* b,                           \
                             iron::stored_t<iron::T>* out, int32_t m, int32_t k,         \
                             int32_t n) {                                                \
    for (int32_t i = 0; i < m; ++i) {                                                    \
      for (int32_t c = 0; c < n; ++c) {                                                  \
        out[i * n + c] = iron::dot<iron::T>(a + i * k, b + c, n, k);                     \
      }                                                                                  \
    }                                                                                    \
  }

IRON_ALL_TYPES(IRON_MATMUL)
