// rope: rotary position embedding of n / head_dim heads at position pos, rotating adjacent
// pairs (x[2i], x[2i+1]) of each head by pos * base^(-2i / head_dim). The angle is computed in
// double and its cos and sin rounded to float, as the numpy reference does; the rotation
// computes in float (bf16 rounds to nearest even).
#include <cmath>

#include "iron_kernel.h"

namespace {

template <typename T>
void rope(const iron::stored_t<T>* x, iron::stored_t<T>* out, int32_t n, int32_t pos, int32_t head_dim,
          float base) {
  const int32_t half = head_dim / 2;
  for (int32_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(pos) * std::pow(static_cast<double>(base),
                                                             -static_cast<double>(i) / half);
    const float c = static_cast<float>(std::cos(angle));
    const float s = static_cast<float>(std::sin(angle));
    for (int32_t head = 0; head < n; head += head_dim) {
      const float even = T::load(x[head + 2 * i]);
      const float odd = T::load(x[head + 2 * i + 1]);
      const float even_cos = even * c, odd_sin = odd * s, even_sin = even * s, odd_cos = odd * c;
      out[head + 2 * i] = T::store(even_cos - odd_sin);
      out[head + 2 * i + 1] = T::store(even_sin + odd_cos);
    }
  }
}

}  // namespace

#define IRON_ROPE(T)                                                                               \
  extern "C" void rope_##T(const iron::stored_t<iron::T>* x, iron::stored_t<iron::T>* out,         \
                           int32_t n, int32_t pos, int32_t head_dim, float base) {                  \
    rope<iron::T>(x, out, n, pos, head_dim, base);                                                 \
  }

IRON_FLOAT_TYPES(IRON_ROPE)
