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

int32_t word_sub(int32_t a, int32_t b) { return static_cast<int32_t>(uint32_t(a) - uint32_t(b)); }

int32_t word_mul(int32_t a, int32_t b) { return static_cast<int32_t>(uint32_t(a) * uint32_t(b)); }

int32_t word_min(int32_t a, int32_t b) { return a < b ? a : b; }

int32_t word_max(int32_t a, int32_t b) { return a > b ? a : b; }

}  // namespace

extern "C" void emit(uint8_t* p0, uint8_t* p1, uint8_t* p2) {
  store_word(p2 + 24, load_word(p0 + 24));
  store_word(p2, load_word(p1));
  store_word(p2 + 4, load_word(p0 + 20));
  store_word(p2 + 8, load_word(p2));
  store_word(p2 + 28, word_max(load_word(p2 + 8), -1));
  store_word(p2 + 28, word_min(load_word(p2 + 28), 8));
  store_word(p2 + 8, word_max(load_word(p2 + 28), 0));
  store_word(p2 + 8, word_min(load_word(p2 + 8), 7));
  store_word(p2 + 28, word_sub(load_word(p2 + 28), load_word(p2 + 8)));
  store_word(p2 + 28, word_mul(load_word(p2 + 28), load_word(p2 + 28)));
  store_word(p2 + 24, word_add(load_word(p2 + 24), load_word(p2 + 28)));
  store_word(p2 + 12, load_word(p2 + 4));
  store_word(p2 + 28, word_max(load_word(p2 + 12), -1));
  store_word(p2 + 28, word_min(load_word(p2 + 28), 9));
  store_word(p2 + 12, word_max(load_word(p2 + 28), 0));
  store_word(p2 + 12, word_min(load_word(p2 + 12), 8));
  store_word(p2 + 28, word_sub(load_word(p2 + 28), load_word(p2 + 12)));
  store_word(p2 + 28, word_mul(load_word(p2 + 28), load_word(p2 + 28)));
  store_word(p2 + 24, word_add(load_word(p2 + 24), load_word(p2 + 28)));
  store_word(p2 + 16, load_word(p2 + 12));
  store_word(p2 + 20, word_add(load_word(p2 + 4), 1));
  store_word(p2 + 28, word_min(load_word(p2 + 24), 1));
  store_word(p2 + 28, word_mul(load_word(p2 + 28), -1));
  store_word(p2 + 28, word_add(load_word(p2 + 28), 1));
  store_word(p2 + 16, word_sub(load_word(p2 + 16), 9));
  store_word(p2 + 16, word_mul(load_word(p2 + 16), load_word(p2 + 28)));
  store_word(p2 + 16, word_add(load_word(p2 + 16), 9));
}
