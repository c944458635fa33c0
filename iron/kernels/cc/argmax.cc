// argmax: out[r] = the index of the first maximum of row r of `rows` rows of n elements (0
// when n <= 1).
#include "iron_kernel.h"

namespace {

template <typename T>
int32_t argmax_row(const iron::stored_t<T>* x, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (T::load(x[i]) > T::load(x[best])) {
      best = i;
    }
  }
  return best;
}

}  // namespace

#define IRON_ARGMAX(T)                                                                   \
  extern "C" void argmax_##T(const iron::stored_t<iron::T>* x, int32_t* out, int32_t rows, \
                             int32_t n) {                                                \
    for (int32_t r = 0; r < rows; ++r) {                                                 \
      out[r] = argmax_row<iron::T>(x + r * n, n);                                        \
    }                                                                                    \
  }

IRON_ALL_TYPES(IRON_ARGMAX)
