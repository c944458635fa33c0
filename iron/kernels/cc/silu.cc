// silu: out[i] = x[i] / (1 + exp(-x[i])) for i < n, in float (bf16 rounds to nearest even).
#include <cmath>

#include "iron_kernel.h"

#define IRON_SILU(T)                                                                    \
  extern "C" void silu_##T(const iron::stored_t<iron::T>* x, iron::stored_t<iron::T>* out, \
                           int32_t n) {                                                   \
    iron::map<iron::T>(x, out, n, [](float v) { return v / (1.0f + std::exp(-v)); });    \
  }

IRON_FLOAT_TYPES(IRON_SILU)
