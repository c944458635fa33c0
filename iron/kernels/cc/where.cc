// where: out[i] = a[i] where cond[i] is not 0 (a NaN is not 0), else b[i], for i < n.
#include "iron_kernel.h"

#define IRON_WHERE(T)                                                                    \
  extern "C" void where_##T(const iron::stored_t<iron::T>* cond,                        \
                            const iron::stored_t<iron::T>* a,                           \
                            const iron::stored_t<iron::T>* b,                           \
                            iron::stored_t<iron::T>* out, int32_t n) {                  \
    for (int32_t i = 0; i < n; ++i) {                                                   \
      out[i] = iron::T::load(cond[i]) != 0 ? a[i] : b[i];                               \
    }                                                                                   \
  }

IRON_ALL_TYPES(IRON_WHERE)
