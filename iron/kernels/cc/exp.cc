// exp: out[i] = e ** x[i] for i < n, in float (bf16 rounds to nearest even).
#include <cmath>

#include "iron_kernel.h"

#define IRON_EXP(T)                                                                     \
  extern "C" void exp_##T(const iron::stored_t<iron::T>* x, iron::stored_t<iron::T>* out, \
                          int32_t n) {                                                   \
    iron::map<iron::T>(x, out, n, [](float v) { return std::exp(v); });                 \
  }

IRON_FLOAT_TYPES(IRON_EXP)
