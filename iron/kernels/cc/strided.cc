// strided: out[k] = x[offset + i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3] for i_d < n_d, k counting
// (i0, i1, i2, i3) row-major (k < n_out), each index read only inside x's n_in elements: a view
// gathered by the core, bit for bit.
// strided_rows applies it to each row (below).
// scatter, its inverse: out[offset + i0 * s0 + ...] = x[k] (k < n_in), each index written only
// inside out's n_out elements; out holds its destination's words already and keeps every
// element x does not reach: a write into a view of a state placed by the core.
#include "iron_kernel.h"

#define IRON_PATTERN(NAME, T, K_LIMIT, BODY)                                                    \
  extern "C" void NAME##_##T(const iron::stored_t<iron::T>* x, iron::stored_t<iron::T>* out,   \
                             int32_t n_in, int32_t n_out, int32_t offset, int32_t n0,           \
                             int32_t n1, int32_t n2, int32_t n3, int32_t s0, int32_t s1,        \
                             int32_t s2, int32_t s3) {                                          \
    int32_t k = 0;                                                                              \
    for (int32_t i0 = 0; i0 < n0; ++i0)                                                         \
      for (int32_t i1 = 0; i1 < n1; ++i1)                                                       \
        for (int32_t i2 = 0; i2 < n2; ++i2)                                                     \
          for (int32_t i3 = 0; i3 < n3 && k < K_LIMIT; ++i3, ++k) {                             \
            int32_t at = offset + i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3;                        \
            BODY;                                                                               \
          }                                                                                     \
  }

#define IRON_STRIDED(T) IRON_PATTERN(strided, T, n_out, out[k] = at < n_in ? x[at] : x[0])
#define IRON_SCATTER(T) IRON_PATTERN(scatter, T, n_in, if (at < n_out) out[at] = x[k])

// strided_rows: strided's pattern over each of `rows` rows of x (`width` elements) into the same
// row of out (`count` elements): a step slice or a transpose of words, block of rows by block.
#define IRON_STRIDED_ROWS(T)                                                                    \
  extern "C" void strided_rows_##T(const iron::stored_t<iron::T>* x, iron::stored_t<iron::T>* out, \
                                   int32_t rows, int32_t width, int32_t count, int32_t offset,  \
                                   int32_t n0, int32_t n1, int32_t n2, int32_t n3, int32_t s0,  \
                                   int32_t s1, int32_t s2, int32_t s3) {                        \
    for (int32_t r = 0; r < rows; ++r)                                                          \
      strided_##T(x + r * width, out + r * count, width, count, offset, n0, n1, n2, n3, s0, s1, \
                  s2, s3);                                                                      \
  }

IRON_ALL_TYPES(IRON_STRIDED)
IRON_ALL_TYPES(IRON_STRIDED_ROWS)
IRON_ALL_TYPES(IRON_SCATTER)
