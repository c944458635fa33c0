// min: out[r] = the smallest element of row r of `rows` rows of n elements, in the element type
// (the first NaN, as numpy's min).
#include "iron_kernel.h"

#define IRON_MIN(T)                                                                            \
  extern "C" void min_##T(const iron::stored_t<iron::T>* x, iron::stored_t<iron::T>* out,      \
                          int32_t rows, int32_t n) {                                           \
    iron::row_extremes<iron::T>(x, out, rows, n, [](auto v, auto top) { return v < top; });    \
  }

IRON_ALL_TYPES(IRON_MIN)
