// matvec: out[i] = sum_j w[i * k + j] * x[j] for i < m, with w an m x k row-major matrix.
// Integers accumulate exactly (mod 2**64) and wrap to the output type; floats accumulate in
// float. matvec_<in>_<out> gives the wider output of IRON_WIDER_DOTS (int8 -> int32),
// matvec_<w>_<x>_<out> a product of IRON_MIXED_DOTS (uint8 x int8 -> int32).
#include "iron_kernel.h"

namespace {

template <typename In, typename Out, typename B = In>
void matvec(const iron::stored_t<In>* w, const iron::stored_t<B>* x, iron::stored_t<Out>* out,
            int32_t m, int32_t k) {
  for (int32_t i = 0; i < m; ++i) {
    out[i] = iron::dot<In, Out, B>(w + i * k, x, 1, k);
  }
}

}  // namespace

#define IRON_MATVEC_TO(In, B, Out, symbol)                                               \
  extern "C" void symbol(const iron::stored_t<iron::In>* w,                              \
                         const iron::stored_t<iron::B>* x,                               \
                         iron::stored_t<iron::Out>* out, int32_t m, int32_t k) {         \
    matvec<iron::In, iron::Out, iron::B>(w, x, out, m, k);                               \
  }
#define IRON_MATVEC(T) IRON_MATVEC_TO(T, T, T, matvec_##T)
#define IRON_MATVEC_WIDER(In, Out) IRON_MATVEC_TO(In, In, Out, matvec_##In##_##Out)
#define IRON_MATVEC_MIXED(W, X, Out) IRON_MATVEC_TO(W, X, Out, matvec_##W##_##X##_##Out)

IRON_ALL_TYPES(IRON_MATVEC)
IRON_WIDER_DOTS(IRON_MATVEC_WIDER)
IRON_MIXED_DOTS(IRON_MATVEC_MIXED)
