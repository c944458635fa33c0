// requantize: out[i] = x[i] * scale / 2**shift rounded to nearest even, plus zero_point, clamped
// to Out's range (int8, uint8 or int16), for int32 x and i < n (0 <= shift <= 62): AIE's
// shift-round-saturate with an integer multiplier. The product is exact in int64; the shift
// keeps its floor, and the dropped bits round it: more than half up, exactly half to the even
// neighbour.
#include "iron_kernel.h"

namespace {

template <typename Out>
void requantize(const int32_t* x, iron::stored_t<Out>* out, int32_t n, int32_t scale,
                int32_t shift, int32_t zero_point) {
  for (int32_t i = 0; i < n; ++i) {
    const int64_t product = static_cast<int64_t>(x[i]) * scale;
    int64_t rounded = product >> shift;  // the floor: >> of a negative value is arithmetic (C++20)
    if (shift > 0) {
      const int64_t dropped = product & ((int64_t(1) << shift) - 1);
      const int64_t half = int64_t(1) << (shift - 1);
      rounded += dropped > half || (dropped == half && (rounded & 1) != 0);
    }
    out[i] = iron::store_saturated<Out>(rounded + zero_point);
  }
}

}  // namespace

#define IRON_REQUANTIZE_TO(Out, symbol)                                                  \
  extern "C" void symbol(const int32_t* x, iron::stored_t<iron::Out>* out, int32_t n,    \
                         int32_t scale, int32_t shift, int32_t zero_point) {             \
    requantize<iron::Out>(x, out, n, scale, shift, zero_point);                          \
  }

IRON_REQUANTIZE_TO(i8, requantize_i32)
IRON_REQUANTIZE_TO(u8, requantize_i32_u8)
IRON_REQUANTIZE_TO(i16, requantize_i32_i16)
