// max: *out = the largest element of x[0:n], in the element type.
#include "iron_kernel.h"

#define IRON_MAX(T)                                                                                    \
  extern "C" void max_##T(const iron::stored_t<iron::T>* x, iron::stored_t<iron::T>* out, int32_t n) { \
    *out = x[iron::first_maximum<iron::T>(x, n)];                                                      \
  }

IRON_FLOAT_TYPES(IRON_MAX)
