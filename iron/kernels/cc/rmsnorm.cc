// rmsnorm: for each of `rows` rows of n elements, out[i] = x[i] * (1 / sqrt(mean(x**2) + eps)) *
// w[i] for i < length, the mean over x[0:length], in float (bf16 rounds to nearest even);
// out[length:n] = 0. w is shared by every row. The caller guarantees 1 <= length <= n.
#include <cmath>

#include "iron_kernel.h"

namespace {

template <typename T>
void rmsnorm_row(const iron::stored_t<T>* x, const iron::stored_t<T>* w, iron::stored_t<T>* out,
                 int32_t n, float eps, int32_t length) {
  float sum_of_squares = 0.0f;
  for (int32_t i = 0; i < length; ++i) {
    const float v = T::load(x[i]);
    sum_of_squares += v * v;
  }
  const float inverse_rms = 1.0f / std::sqrt(sum_of_squares / static_cast<float>(length) + eps);
  for (int32_t i = 0; i < length; ++i) {
    out[i] = T::store(T::load(x[i]) * inverse_rms * T::load(w[i]));
  }
  for (int32_t i = length; i < n; ++i) {
    out[i] = T::store(0.0f);
  }
}

}  // namespace

#define IRON_RMSNORM(T)                                                                  \
  extern "C" void rmsnorm_##T(const iron::stored_t<iron::T>* x,                          \
                              const iron::stored_t<iron::T>* w,                          \
                              iron::stored_t<iron::T>* out, int32_t rows, int32_t n,     \
                              float eps, int32_t length) {                               \
    for (int32_t r = 0; r < rows; ++r) {                                                 \
      rmsnorm_row<iron::T>(x + r * n, w, out + r * n, n, eps, length);                   \
    }                                                                                    \
  }

IRON_FLOAT_TYPES(IRON_RMSNORM)
