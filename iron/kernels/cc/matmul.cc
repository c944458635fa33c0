// matmul: out = a @ b with a m x k, b k x n and out m x n, all row-major. Integers accumulate
// exactly (mod 2**64) and wrap to the output type; floats accumulate in float.
// matmul_<in>_<out> gives the wider output of IRON_WIDER_DOTS (int8 -> int32), matmul_<a>_<b>_<out>
// a product of two types of IRON_MIXED_DOTS (uint8 x int8 -> int32).
#include "iron_kernel.h"

namespace {

template <typename In, typename Out, typename B>
void matmul(const iron::stored_t<In>* a, const iron::stored_t<B>* b, iron::stored_t<Out>* out,
            int32_t m, int32_t k, int32_t n) {
  for (int32_t i = 0; i < m; ++i) {
    for (int32_t c = 0; c < n; ++c) {
      out[i * n + c] = iron::dot<In, Out, B>(a + i * k, b + c, n, k);
    }
  }
}

}  // namespace

#define IRON_MATMUL(T) IRON_MATRIX_KERNEL(matmul, T, T, matmul_##T)
#define IRON_MATMUL_WIDER(In, Out) IRON_MATRIX_KERNEL(matmul, In, Out, matmul_##In##_##Out)

IRON_ALL_TYPES(IRON_MATMUL)
#define IRON_MATMUL_MIXED(A, B, Out) IRON_MIXED_MATRIX_KERNEL(matmul, A, B, Out, matmul_##A##_##B##_##Out)

IRON_WIDER_DOTS(IRON_MATMUL_WIDER)
IRON_MIXED_DOTS(IRON_MATMUL_MIXED)
