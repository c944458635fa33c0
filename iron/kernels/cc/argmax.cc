// argmax: *out = the index of the first maximum of x[0:n] (0 when n <= 1).
#include "iron_kernel.h"

#define IRON_ARGMAX(T)                                                                   \
  extern "C" void argmax_##T(const iron::stored_t<iron::T>* x, int32_t* out, int32_t n) { \
    *out = iron::first_maximum<iron::T>(x, n);                                           \
  }

IRON_ALL_TYPES(IRON_ARGMAX)
