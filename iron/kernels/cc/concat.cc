// concat: per output row o < outer, the na elements of row o of a, then the nb of row o of b
// (a and b joined along one axis, seen as rows), bit for bit.
#include "iron_kernel.h"

#define IRON_CONCAT(T)                                                                     \
  extern "C" void concat_##T(const iron::stored_t<iron::T>* a,                             \
                             const iron::stored_t<iron::T>* b, iron::stored_t<iron::T>* out, \
                             int32_t outer, int32_t na, int32_t nb) {                      \
    for (int32_t o = 0; o < outer; ++o) {                                                  \
      for (int32_t i = 0; i < na; ++i) out[o * (na + nb) + i] = a[o * na + i];             \
      for (int32_t i = 0; i < nb; ++i) out[o * (na + nb) + na + i] = b[o * nb + i];        \
    }                                                                                      \
  }

IRON_ALL_TYPES(IRON_CONCAT)
