// matmul_accumulate: acc += a @ b with a m x k, b k x n and acc m x n, all row-major: how a tiled
// matrix call adds each further k-block's product to its block's sum. Each dot product sums as
// matmul's does; an integer one wraps to acc's type in the add (as matmul then accumulate), a
// float one is added in float and the sum stored once. matmul_accumulate_<in>_<out> gives the
// wider acc of IRON_WIDER_DOTS (int8 -> int32, bf16 -> f32).
#include "iron_kernel.h"

namespace {

template <typename In, typename Out>
void matmul_accumulate(const iron::stored_t<In>* a, const iron::stored_t<In>* b,
                       iron::stored_t<Out>* acc, int32_t m, int32_t k, int32_t n) {
  using accumulator = typename In::accumulator;
  for (int32_t i = 0; i < m; ++i) {
    for (int32_t c = 0; c < n; ++c) {
      accumulator sum = 0;
      for (int32_t j = 0; j < k; ++j) {
        sum += static_cast<accumulator>(In::load(a[i * k + j]) * In::load(b[j * n + c]));
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
IRON_WIDER_DOTS(IRON_MATMUL_ACCUMULATE_WIDER)
