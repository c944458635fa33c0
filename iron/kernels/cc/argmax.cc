// argmax: out[r] = the index of the first maximum of the first `length` elements of row r of
// `rows` rows of n elements (0 when length <= 1). The caller guarantees 1 <= length <= n.
#include "iron_kernel.h"

#define IRON_ARGMAX(T)                                                                   \
  extern "C" void argmax_##T(const iron::stored_t<iron::T>* x, int32_t* out, int32_t rows, \
                             int32_t n, int32_t length) {                                \
    for (int32_t r = 0; r < rows; ++r) {                                                 \
      out[r] = iron::first_maximum<iron::T>(x + r * n, length);                          \
    }                                                                                    \
  }

IRON_ALL_TYPES(IRON_ARGMAX)
