// scale: out[i] = x[i] * factor for i < n: floats in float (bf16 rounds to nearest even);
// integers in double, rounded to nearest (ties to even) and clamped to the element's range.
#include "iron_kernel.h"

#define IRON_SCALE(T)                                                                    \
  extern "C" void scale_##T(const iron::stored_t<iron::T>* x, iron::stored_t<iron::T>* out, \
                            int32_t n, float factor) {                                     \
    for (int32_t i = 0; i < n; ++i) {                                                      \
      if constexpr (iron::T::is_integer) {                                                 \
        out[i] = iron::store_rounded<iron::T>(double(iron::T::load(x[i])) * double(factor)); \
      } else {                                                                             \
        out[i] = iron::T::store(iron::T::load(x[i]) * factor);                             \
      }                                                                                    \
    }                                                                                      \
  }

IRON_ALL_TYPES(IRON_SCALE)
