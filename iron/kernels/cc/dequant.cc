// dequant: GGUF weight blocks expanded to float, as gguf.quants.dequantize does: each row of
// `row_bytes` bytes holds cols / 32 blocks of 32 weights. Q4_1 (20-byte blocks): a float16
// scale d, a float16 minimum m, 16 bytes of 4-bit codes (low nibbles weights 0..15, high nibbles
// 16..31), w = d * code + m. Q8_0 (34-byte blocks): a float16 scale d, 32 int8 codes, w = code * d.
// Each product and sum is one float operation, rounded as numpy rounds it.
#include "iron_kernel.h"

namespace {

// IEEE half bits -> float, exactly (subnormals, infinities and NaN payloads kept).
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) {
    return __builtin_bit_cast(float, sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent == 0) {
    if (mantissa == 0) {
      return __builtin_bit_cast(float, sign);
    }
    exponent = 113;  // 127 - 15 + 1, then normalise the subnormal mantissa
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    mantissa &= 0x3ffu;
    return __builtin_bit_cast(float, sign | (exponent << 23) | (mantissa << 13));
  }
  return __builtin_bit_cast(float, sign | ((exponent + 112) << 23) | (mantissa << 13));
}

float half_at(const uint8_t* p) { return half_to_float(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

void expand_q4_1(const uint8_t* block, float* out) {
  const float scale = half_at(block), minimum = half_at(block + 2);
  for (int32_t i = 0; i < 16; ++i) {
    const float low = scale * static_cast<float>(block[4 + i] & 0x0f);
    const float high = scale * static_cast<float>(block[4 + i] >> 4);
    out[i] = low + minimum;
    out[16 + i] = high + minimum;
  }
}

void expand_q8_0(const uint8_t* block, float* out) {
  const float scale = half_at(block);
  for (int32_t i = 0; i < 32; ++i) {
    out[i] = static_cast<float>(static_cast<int8_t>(block[2 + i])) * scale;
  }
}

}  // namespace

extern "C" void dequant_u8(const uint8_t* blocks, float* out, int32_t rows, int32_t row_bytes, int32_t cols,
                           int32_t block_bytes) {
  const int32_t per_row = cols / 32;
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t b = 0; b < per_row; ++b) {
      const uint8_t* block = blocks + r * row_bytes + b * block_bytes;
      float* weights = out + r * cols + b * 32;
      if (block_bytes == 20) {
        expand_q4_1(block, weights);
      } else {
        expand_q8_0(block, weights);
      }
    }
  }
}
