// scale: out[i] = x[i] * factor for i < n, in float (bf16 rounds to nearest even).
#include "iron_kernel.h"

#define IRON_SCALE(T)                                                                    \
  extern "C" void scale_##T(const iron::stored_t<iron::T>* x, iron::stored_t<iron::T>* out, \
                            int32_t n, float factor) {                                     \
    iron::map<iron::T>(x, out, n, [factor](float v) { return v * factor; });              \
  }

IRON_FLOAT_TYPES(IRON_SCALE)
