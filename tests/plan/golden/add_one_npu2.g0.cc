// g0.cc: function g0 of design AddOne, written by iron from its Plan.
// p0: g0_in
// p1: g0_host
#include "iron_kernel.h"
#include "add.cc"

extern "C" void g0(uint8_t* p0, uint8_t* p1) {
  add_i32(reinterpret_cast<const int32_t*>(p0), reinterpret_cast<const int32_t*>(p0 + 4096), reinterpret_cast<int32_t*>(p1), 1024);
}
