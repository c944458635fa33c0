// softmax: for each of `rows` rows of n elements, out[0:length] = exp(x - max) / sum(exp(x - max))
// over x[0:length], in float (bf16 rounds to nearest even); out[length:n] = 0. The caller
// guarantees 1 <= length <= n; one length holds for every row.
#include <cmath>

#include "iron_kernel.h"

namespace {

template <typename T>
void softmax_row(const iron::stored_t<T>* x, iron::stored_t<T>* out, int32_t n, int32_t length) {
  float largest = T::load(x[0]);
  for (int32_t i = 1; i < length; ++i) {
    const float v = T::load(x[i]);
    largest = v > largest ? v : largest;
  }
  float total = 0.0f;
  for (int32_t i = 0; i < length; ++i) {
    total += std::exp(T::load(x[i]) - largest);
  }
  for (int32_t i = 0; i < length; ++i) {
    out[i] = T::store(std::exp(T::load(x[i]) - largest) / total);
  }
  for (int32_t i = length; i < n; ++i) {
    out[i] = T::store(0.0f);
  }
}

}  // namespace

#define IRON_SOFTMAX(T)                                                                  \
  extern "C" void softmax_##T(const iron::stored_t<iron::T>* x,                          \
                              iron::stored_t<iron::T>* out, int32_t rows, int32_t n,     \
                              int32_t length) {                                          \
    for (int32_t r = 0; r < rows; ++r) {                                                 \
      softmax_row<iron::T>(x + r * n, out + r * n, n, length);                           \
    }                                                                                    \
  }

IRON_FLOAT_TYPES(IRON_SOFTMAX)
