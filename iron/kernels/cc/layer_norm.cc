// layer_norm: for each of `rows` rows of n elements, over x[0:length]: mean = sum(x) / length,
// var = sum((x - mean)**2) / length (sums added in order, in float), out[i] = (x[i] - mean) *
// (1 / sqrt(var + eps)) for i < length, then, when w and b are given, * w[i] + b[i] (w and b shared
// by every row: layer_norm_affine, defined here too); out[length:n] = 0. bf16 rounds to nearest even. The caller
// guarantees 1 <= length <= n.
#include <cmath>

#include "iron_kernel.h"

namespace {

template <typename T>
void layer_norm_row(const iron::stored_t<T>* x, const iron::stored_t<T>* w, const iron::stored_t<T>* b,
                    iron::stored_t<T>* out,
                    int32_t n, float eps, int32_t length) {
  float total = 0.0f;
  for (int32_t i = 0; i < length; ++i) {
    total += T::load(x[i]);
  }
  const float mean = total / static_cast<float>(length);
  float squares = 0.0f;
  for (int32_t i = 0; i < length; ++i) {
    const float d = T::load(x[i]) - mean;
    squares += d * d;
  }
  const float inverse = 1.0f / std::sqrt(squares / static_cast<float>(length) + eps);
  for (int32_t i = 0; i < length; ++i) {
    const float v = (T::load(x[i]) - mean) * inverse;
    out[i] = T::store(w == nullptr ? v : v * T::load(w[i]) + T::load(b[i]));
  }
  for (int32_t i = length; i < n; ++i) {
    out[i] = T::store(0.0f);
  }
}

}  // namespace

#define IRON_LAYER_NORM(T)                                                               \
  extern "C" void layer_norm_##T(const iron::stored_t<iron::T>* x, iron::stored_t<iron::T>* out, \
                                 int32_t rows, int32_t n, float eps, int32_t length) {   \
    for (int32_t r = 0; r < rows; ++r) {                                                 \
      layer_norm_row<iron::T>(x + r * n, nullptr, nullptr, out + r * n, n, eps, length); \
    }                                                                                    \
  }

#define IRON_LAYER_NORM_AFFINE(T)                                                         \
  extern "C" void layer_norm_affine_##T(const iron::stored_t<iron::T>* x,                \
                                        const iron::stored_t<iron::T>* w,                \
                                        const iron::stored_t<iron::T>* b,                \
                                        iron::stored_t<iron::T>* out, int32_t rows,      \
                                        int32_t n, float eps, int32_t length) {          \
    for (int32_t r = 0; r < rows; ++r) {                                                 \
      layer_norm_row<iron::T>(x + r * n, w, b, out + r * n, n, eps, length);       \
    }                                                                                    \
  }

IRON_FLOAT_TYPES(IRON_LAYER_NORM)
IRON_FLOAT_TYPES(IRON_LAYER_NORM_AFFINE)
