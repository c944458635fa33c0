// relu: out[i] = max(x[i], 0) for i < n (the identity on u8; NaN stays NaN).
#include "iron_kernel.h"

#define IRON_RELU(T)                                                                    \
  extern "C" void relu_##T(const iron::stored_t<iron::T>* x, iron::stored_t<iron::T>* out, \
                           int32_t n) {                                                   \
    iron::map<iron::T>(x, out, n, [](auto v) { return v < 0 ? 0 : v; });                 \
  }

IRON_ALL_TYPES(IRON_RELU)
