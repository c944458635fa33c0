// accumulate: acc[i] += x[i] for i < n, in place; integers wrap around, bf16 rounds to
// nearest even.
#include "iron_kernel.h"

#define IRON_ACCUMULATE(T)                                                                \
  extern "C" void accumulate_##T(const iron::stored_t<iron::T>* x,                        \
                                 iron::stored_t<iron::T>* acc, int32_t n) {               \
    iron::zip<iron::T>(acc, x, acc, n, [](auto total, auto v) { return total + v; });     \
  }

IRON_ALL_TYPES(IRON_ACCUMULATE)
