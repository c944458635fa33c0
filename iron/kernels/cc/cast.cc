// cast: out[i] = x[i] converted from In to Out for i < n. Between integer types the value
// clamps to Out's range (saturates); floats to integers round to nearest, ties to even, then
// clamp (NaN gives 0); integers to f32 and bf16 and f32 to bf16 round to nearest even (an
// integer to bf16 through f32, as numpy's ml_dtypes converts); bf16 to f32 is exact. The symbol
// names both types: cast_i32_i8, cast_f32_bf16.
#include "iron_kernel.h"

namespace {

template <typename In, typename Out>
void cast(const iron::stored_t<In>* x, iron::stored_t<Out>* out, int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    if constexpr (Out::is_integer && !In::is_integer) {
      out[i] = iron::store_rounded<Out>(In::load(x[i]));
    } else if constexpr (In::is_integer && !Out::is_integer) {
      out[i] = Out::store(static_cast<float>(In::load(x[i])));
    } else {
      out[i] = iron::store_saturated<Out>(static_cast<typename Out::value>(In::load(x[i])));
    }
  }
}

}  // namespace

#define IRON_CAST(In, Out)                                                               \
  extern "C" void cast_##In##_##Out(const iron::stored_t<iron::In>* x,                   \
                                    iron::stored_t<iron::Out>* out, int32_t n) {         \
    cast<iron::In, iron::Out>(x, out, n);                                                \
  }
// Every pair Cast.out_dtypes lists: each integer type to every other one, to f32 and to bf16;
// f32 <-> bf16; f32 and bf16 to each integer type.

IRON_CAST(i8, u8) IRON_CAST(i8, i16) IRON_CAST(i8, i32)
IRON_CAST(u8, i8) IRON_CAST(u8, i16) IRON_CAST(u8, i32)
IRON_CAST(i16, i8) IRON_CAST(i16, u8) IRON_CAST(i16, i32)
IRON_CAST(i32, i8) IRON_CAST(i32, u8) IRON_CAST(i32, i16)
IRON_CAST(i8, f32) IRON_CAST(u8, f32) IRON_CAST(i16, f32) IRON_CAST(i32, f32)
IRON_CAST(i8, bf16) IRON_CAST(u8, bf16) IRON_CAST(i16, bf16) IRON_CAST(i32, bf16)
IRON_CAST(f32, bf16) IRON_CAST(bf16, f32)
IRON_CAST(f32, i8) IRON_CAST(f32, u8) IRON_CAST(f32, i16) IRON_CAST(f32, i32)
IRON_CAST(bf16, i8) IRON_CAST(bf16, u8) IRON_CAST(bf16, i16) IRON_CAST(bf16, i32)
