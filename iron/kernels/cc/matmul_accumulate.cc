// matmul_accumulate: acc += a @ b with a m x k, b k x n and acc m x n, all row-major: how a tiled
// matrix call adds each further k-block's product to its block's sum. Each dot product sums as
// matmul's does; an integer one wraps to acc's type in the add (as matmul then accumulate), a
// float one is added in float and the sum stored once. matmul_accumulate_<in>_<out> gives the
// wider acc of IRON_WIDER_DOTS (int8 -> int32, bf16 -> f32), matmul_accumulate_<a>_<b>_<out> a
// product of IRON_MIXED_DOTS (uint8 x int8 -> int32).
#include "iron_kernel.h"

namespace {

template <typename In, typename Out, typename B>
void matmul_accumulate(const iron::stored_t<In>* a, const iron::stored_t<B>* b,
                       iron::stored_t<Out>* acc, int32_t m, int32_t k, int32_t n) {
  using accumulator = typename In::accumulator;
  for (int32_t i = 0; i < m; ++i) {
    for (int32_t c = 0; c < n; ++c) {
      accumulator sum = 0;
      for (int32_t j = 0; j < k; ++j) {
        sum += static_cast<accumulator>(In::load(a[i * k + j]) * B::load(b[j * n + c]));
      }
      iron::stored_t<Out>& total = acc[i * n + c];
      total = Out::store(Out::load(total) + static_cast<typename Out::value>(sum));
    }
  }
}

}  // namespace

#define IRON_MATMUL_ACCUMULATE(T) IRON_MATRIX_KERNEL(matmul_accumulate, T, T, matmul_accumulate_##T)
#define IRON_MATMUL_ACCUMULATE_WIDER(In, Out) \
  IRON_MATRIX_KERNEL(matmul_accumulate, In, Out, matmul_accumulate_##In##_##Out)

IRON_ALL_TYPES(IRON_MATMUL_ACCUMULATE)
#define IRON_MATMUL_ACCUMULATE_MIXED(A, B, Out) \
  IRON_MIXED_MATRIX_KERNEL(matmul_accumulate, A, B, Out, matmul_accumulate_##A##_##B##_##Out)

IRON_WIDER_DOTS(IRON_MATMUL_ACCUMULATE_WIDER)
IRON_MIXED_DOTS(IRON_MATMUL_ACCUMULATE_MIXED)
