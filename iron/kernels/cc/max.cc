// max: out[r] = the largest element of row r of `rows` rows of n elements, in the element type.
#include "iron_kernel.h"

#define IRON_MAX(T)                                                                            \
  extern "C" void max_##T(const iron::stored_t<iron::T>* x, iron::stored_t<iron::T>* out,      \
                          int32_t rows, int32_t n) {                                           \
    for (int32_t r = 0; r < rows; ++r) {                                                       \
      out[r] = x[r * n + iron::first_maximum<iron::T>(x + r * n, n)];                          \
    }                                                                                          \
  }

IRON_FLOAT_TYPES(IRON_MAX)
