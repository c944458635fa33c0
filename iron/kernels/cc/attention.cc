// attention: for each query q[h][r] of q (heads x s x d: s queries per head), out[h][r] =
// softmax(K q[h][r] / sqrt(d)) V over rows 0..length-1 of key/value head h / (heads / kv_heads)
// of keys and values (kv_heads x n x d each), all row-major, in float (bf16 rounds once, as it stores). The softmax
// is online: one cache row at a time, the running maximum m, the running sum l of exp(s - m) and
// the running output o rescaled by exp(m_old - m_new) as m grows; out = o / l. o stays on the
// core's stack (1 KiB by default, docs/platform.md section 2) CHUNK elements at a time: a head
// wider than CHUNK runs the recurrence once per chunk of its output, recomputing the same scores,
// so every chunk sees the same m and l. The caller guarantees 1 <= length <= n and heads a
// multiple of kv_heads.
#include <cmath>

#include "iron_kernel.h"

namespace {

constexpr int32_t CHUNK = 64;  // 256 bytes of running output

template <typename T>
void attention(const iron::stored_t<T>* q, const iron::stored_t<T>* keys,
               const iron::stored_t<T>* values, iron::stored_t<T>* out, int32_t heads,
               int32_t s, int32_t kv_heads, int32_t n, int32_t d, int32_t length) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int32_t group = heads / kv_heads;
  float o[CHUNK];
  for (int32_t row = 0; row < heads * s; ++row) {
    const iron::stored_t<T>* query = q + row * d;
    const int32_t kv = row / s / group;
    for (int32_t first = 0; first < d; first += CHUNK) {
      const int32_t width = d - first < CHUNK ? d - first : CHUNK;
      float top = -__builtin_inff(), total = 0.0f;
      for (int32_t c = 0; c < width; ++c) {
        o[c] = 0.0f;
      }
      for (int32_t j = 0; j < length; ++j) {
        const iron::stored_t<T>* key = keys + (kv * n + j) * d;
        const iron::stored_t<T>* value = values + (kv * n + j) * d + first;
        float dot = 0.0f;
        for (int32_t c = 0; c < d; ++c) {
          dot += T::load(query[c]) * T::load(key[c]);
        }
        const float score = dot * scale;
        const float grown = score > top ? score : top;
        const float rescale = std::exp(top - grown), weight = std::exp(score - grown);
        total = total * rescale + weight;
        for (int32_t c = 0; c < width; ++c) {
          o[c] = o[c] * rescale + weight * T::load(value[c]);
        }
        top = grown;
      }
      for (int32_t c = 0; c < width; ++c) {
        out[row * d + first + c] = T::store(o[c] / total);
      }
    }
  }
}

}  // namespace
#define IRON_ATTENTION(T)                                                                  \
  extern "C" void attention_##T(const iron::stored_t<iron::T>* q,                           \
                                const iron::stored_t<iron::T>* keys,                        \
                                const iron::stored_t<iron::T>* values,                      \
                                iron::stored_t<iron::T>* out, int32_t heads, int32_t s,     \
                                int32_t kv_heads, int32_t n, int32_t d, int32_t length) {   \
    attention<iron::T>(q, keys, values, out, heads, s, kv_heads, n, d, length);              \
  }

IRON_FLOAT_TYPES(IRON_ATTENTION)
