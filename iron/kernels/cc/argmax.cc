// argmax: *out = the index of the first maximum of x[0:n] (0 when n <= 1).
#include "iron_kernel.h"

namespace {

template <typename T>
void argmax(const iron::stored_t<T>* x, int32_t* out, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (T::load(x[i]) > T::load(x[best])) {
      best = i;
    }
  }
  *out = best;
}

}  // namespace

#define IRON_ARGMAX(T)                                                                   \
  extern "C" void argmax_##T(const iron::stored_t<iron::T>* x, int32_t* out, int32_t n) { \
    argmax<iron::T>(x, out, n);                                                          \
  }

IRON_ALL_TYPES(IRON_ARGMAX)
