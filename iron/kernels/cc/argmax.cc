// argmax: out[r] = the index of the first maximum of row r of `rows` rows of n elements (0
// when n <= 1).
#include "iron_kernel.h"

#define IRON_ARGMAX(T)                                                                   \
  extern "C" void argmax_##T(const iron::stored_t<iron::T>* x, int32_t* out, int32_t rows, \
                             int32_t n) {                                                \
    for (int32_t r = 0; r < rows; ++r) {                                                 \
      out[r] = iron::first_maximum<iron::T>(x + r * n, n);                               \
    }                                                                                    \
  }

IRON_ALL_TYPES(IRON_ARGMAX)
