// max: *out = the largest element of x[0:n], in the element type.
#include "iron_kernel.h"

namespace {

template <typename T>
void max(const iron::stored_t<T>* x, iron::stored_t<T>* out, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (T::load(x[i]) > T::load(x[best])) {
      best = i;
    }
  }
  *out = x[best];
}

}  // namespace

#define IRON_MAX(T)                                                                              \
  extern "C" void max_##T(const iron::stored_t<iron::T>* x, iron::stored_t<iron::T>* out, int32_t n) { \
    max<iron::T>(x, out, n);                                                                     \
  }

IRON_FLOAT_TYPES(IRON_MAX)
