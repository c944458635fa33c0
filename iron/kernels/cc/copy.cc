// copy: out[i] = x[i] for i < n, bit for bit (bf16 NaN payloads included).
#include "iron_kernel.h"

#define IRON_COPY(T)                                                                    \
  extern "C" void copy_##T(const iron::stored_t<iron::T>* x, iron::stored_t<iron::T>* out, \
                           int32_t n) {                                                   \
    for (int32_t i = 0; i < n; ++i) {                                                     \
      out[i] = x[i];                                                                      \
    }                                                                                     \
  }

IRON_ALL_TYPES(IRON_COPY)
