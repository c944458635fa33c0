// emit.cc: function emit of design Walk, written by iron from its Plan.
// p0: emit_in
// p1: g0_out
// p2: feedback
#include "iron_kernel.h"

namespace {

int32_t load_word(const uint8_t* at) {
  int32_t value;
  __builtin_memcpy(&value, at, sizeof value);
  return value;
}

void store_word(uint8_t* at, int32_t value) { __builtin_memcpy(at, &value, sizeof value); }

int32_t word_add(int32_t a, int32_t b) { return static_cast<int32_t>(uint32_t(a) + uint32_t(b)); }

}  // namespace

extern "C" void emit(uint8_t* p0, uint8_t* p1, uint8_t* p2) {
  store_word(p2, load_word(p1));
  store_word(p2 + 4, load_word(p0 + 8));
  store_word(p2 + 8, word_add(load_word(p2 + 4), 1));
}
