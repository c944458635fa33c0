// argmax_blocks: a row's argmax from its blocks: *out = indices[b] (an exact integer held as a
// float) for b the first maximum of values[0:n], where values[b] is block b's maximum and
// indices[b] the row index of its first maximum.
#include "iron_kernel.h"

namespace {

template <typename T>
void argmax_blocks(const iron::stored_t<T>* values, const iron::stored_t<T>* indices, int32_t* out,
                   int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (T::load(values[i]) > T::load(values[best])) {
      best = i;
    }
  }
  *out = static_cast<int32_t>(T::load(indices[best]));
}

}  // namespace

#define IRON_ARGMAX_BLOCKS(T)                                                                \
  extern "C" void argmax_blocks_##T(const iron::stored_t<iron::T>* values,                   \
                                    const iron::stored_t<iron::T>* indices, int32_t* out,    \
                                    int32_t n) {                                             \
    argmax_blocks<iron::T>(values, indices, out, n);                                         \
  }

IRON_FLOAT_TYPES(IRON_ARGMAX_BLOCKS)
