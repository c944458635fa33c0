// sum: out[r] = the sum of row r of `rows` rows of n elements, added in order from the first, in
// the input type's accumulator (integers: uint64_t, wrapping to the output's width as the exact
// sum would; floats: float), stored as Out. sum_<In>_<Out> gives a wider result (int8 -> int32,
// bf16 -> f32).
#include "iron_kernel.h"

namespace {

template <typename In, typename Out>
void sum_rows(const iron::stored_t<In>* x, iron::stored_t<Out>* out, int32_t rows, int32_t n) {
  using accumulator = typename In::accumulator;
  for (int32_t r = 0; r < rows; ++r) {
    // from the first element, not from 0: a row of -0.0 sums to -0.0, as numpy's does
    accumulator total = n > 0 ? static_cast<accumulator>(In::load(x[r * n])) : 0;
    for (int32_t i = 1; i < n; ++i) {
      total += static_cast<accumulator>(In::load(x[r * n + i]));
    }
    out[r] = Out::store(static_cast<typename Out::value>(total));
  }
}

}  // namespace

#define IRON_SUM_TO(In, Out, symbol)                                                      \
  extern "C" void symbol(const iron::stored_t<iron::In>* x, iron::stored_t<iron::Out>* out, \
                         int32_t rows, int32_t n) {                                       \
    sum_rows<iron::In, iron::Out>(x, out, rows, n);                                       \
  }
#define IRON_SUM(T) IRON_SUM_TO(T, T, sum_##T)
#define IRON_SUM_WIDER(In, Out) IRON_SUM_TO(In, Out, sum_##In##_##Out)

IRON_ALL_TYPES(IRON_SUM)
IRON_WIDER_DOTS(IRON_SUM_WIDER)
