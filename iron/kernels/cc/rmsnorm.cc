// rmsnorm: for each of `rows` rows of n elements, out[i] = x[i] * (1 / sqrt(mean(x**2) + eps)) *
// w[i] for i < n, in float (bf16 rounds to nearest even); w is shared by every row.
#include <cmath>

#include "iron_kernel.h"

namespace {

template <typename T>
void rmsnorm_row(const iron::stored_t<T>* x, const iron::stored_t<T>* w, iron::stored_t<T>* out,
                 int32_t n, float eps) {
  float sum_of_squares = 0.0f;
  for (int32_t i = 0; i < n; ++i) {
    const float v = T::load(x[i]);
    sum_of_squares += v * v;
  }
  const float inverse_rms = 1.0f / std::sqrt(sum_of_squares / static_cast<float>(n) + eps);
  for (int32_t i = 0; i < n; ++i) {
    out[i] = T::store(T::load(x[i]) * inverse_rms * T::load(w[i]));
  }
}

}  // namespace

#define IRON_RMSNORM(T)                                                                  \
  extern "C" void rmsnorm_##T(const iron::stored_t<iron::T>* x,                          \
                              const iron::stored_t<iron::T>* w,                          \
                              iron::stored_t<iron::T>* out, int32_t rows, int32_t n,     \
                              float eps) {                                               \
    for (int32_t r = 0; r < rows; ++r) {                                                 \
      rmsnorm_row<iron::T>(x + r * n, w, out + r * n, n, eps);                           \
    }                                                                                    \
  }

IRON_FLOAT_TYPES(IRON_RMSNORM)
