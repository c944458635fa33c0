// argmax_blocks: a row's argmax from its blocks: *out = indices[b] (an exact integer held as a
// float) for b the first maximum of values[0:n], where values[b] is block b's maximum and
// indices[b] the row index of its first maximum.
#include "iron_kernel.h"

#define IRON_ARGMAX_BLOCKS(T)                                                                \
  extern "C" void argmax_blocks_##T(const iron::stored_t<iron::T>* values,                   \
                                    const iron::stored_t<iron::T>* indices, int32_t* out,    \
                                    int32_t n) {                                             \
    *out = static_cast<int32_t>(iron::T::load(indices[iron::first_maximum<iron::T>(values, n)])); \
  }

IRON_FLOAT_TYPES(IRON_ARGMAX_BLOCKS)
