// g0.cc: function g0 of design Accumulate, written by iron from its Plan.
// p0: g0_in
// p1: g0_host
#include "iron_kernel.h"
#include "accumulate.cc"
#include "copy.cc"

extern "C" void g0(uint8_t* p0, uint8_t* p1) {
  copy_f32(reinterpret_cast<const float*>(p0 + 16), reinterpret_cast<float*>(p1), 4);
  accumulate_f32(reinterpret_cast<const float*>(p0), reinterpret_cast<float*>(p1), 4);
}
