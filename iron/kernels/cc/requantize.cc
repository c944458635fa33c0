// requantize: out[i] = x[i] * scale / 2**shift rounded to nearest even and clamped to Out's
// range, for int32 x and i < n (0 <= shift <= 62): AIE's shift-round-saturate with an integer
// multiplier. The product is exact in int64; the shift keeps its floor, and the dropped bits
// round it: more than half up, exactly half to the even neighbour.
#include "iron_kernel.h"

namespace {

template <typename Out>
void requantize(const int32_t* x, iron::stored_t<Out>* out, int32_t n, int32_t scale,
                int32_t shift) {
  for (int32_t i = 0; i < n; ++i) {
    const int64_t product = static_cast<int64_t>(x[i]) * scale;
    int64_t rounded = product >> shift;  // the floor: >> of a negative value is arithmetic (C++20)
    if (shift > 0) {
      const int64_t dropped = product & ((int64_t(1) << shift) - 1);
      const int64_t half = int64_t(1) << (shift - 1);
      rounded += dropped > half || (dropped == half && (rounded & 1) != 0);
    }
    out[i] = iron::store_saturated<Out>(rounded);
  }
}

}  // namespace

extern "C" void requantize_i32(const int32_t* x, int8_t* out, int32_t n, int32_t scale,
                               int32_t shift) {
  requantize<iron::i8>(x, out, n, scale, shift);
}

extern "C" void requantize_i32_i16(const int32_t* x, int16_t* out, int32_t n, int32_t scale,
                                   int32_t shift) {
  requantize<iron::i16>(x, out, n, scale, shift);
}
