// dequant: GGUF weight blocks expanded to float, as gguf.quants.dequantize does: each row of
// `row_bytes` bytes holds cols / 32 blocks of 32 weights. Q4_1 (20-byte blocks): a float16
// scale d, a float16 minimum m, 16 bytes of 4-bit codes (low nibbles weights 0..15, high nibbles
// 16..31), w = d * code + m. Q8_0 (34-byte blocks): a float16 scale d, 32 int8 codes, w = code * d.
// Each product and sum is one float operation, rounded as numpy rounds it. qmatvec multiplies
// the weights so expanded by a vector as it expands them (QMatVec).
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

// use(j, w) for each weight j = 0..31 of a block, in order: Q4_1's low nibbles, then its high ones.
template <typename Use>
void each_weight(const uint8_t* block, int32_t block_bytes, Use use) {
  const float scale = half_at(block);
  if (block_bytes == 34) {
    for (int32_t j = 0; j < 32; ++j) {
      use(j, static_cast<float>(static_cast<int8_t>(block[2 + j])) * scale);
    }
    return;
  }
  const float minimum = half_at(block + 2);
  for (int32_t j = 0; j < 32; ++j) {
    const uint8_t code = j < 16 ? block[4 + j] & 0x0f : block[4 + j - 16] >> 4;
    const float scaled = scale * static_cast<float>(code);   // two roundings, as numpy's multiply then add
    use(j, scaled + minimum);
  }
}

}  // namespace

extern "C" void dequant_u8(const uint8_t* blocks, float* out, int32_t rows, int32_t row_bytes, int32_t cols,
                           int32_t block_bytes) {
  const int32_t per_row = cols / 32;
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t b = 0; b < per_row; ++b) {
      float* weights = out + r * cols + b * 32;
      each_weight(blocks + r * row_bytes + b * block_bytes, block_bytes, [&](int32_t j, float w) { weights[j] = w; });
    }
  }
}

// qmatvec: out[i] = sum_j w[i][j] * x[j], each weight expanded as above as it is multiplied and
// summed in float from j = 0, as dequant_u8 then matvec_f32 give it: the weights are never stored.
extern "C" void qmatvec_u8_f32_f32(const uint8_t* blocks, const float* x, float* out, int32_t m, int32_t row_bytes,
                                   int32_t k, int32_t block_bytes) {
  for (int32_t i = 0; i < m; ++i) {
    float sum = 0;
    for (int32_t b = 0; b < k / 32; ++b) {
      const float* xs = x + b * 32;
      each_weight(blocks + i * row_bytes + b * block_bytes, block_bytes, [&](int32_t j, float w) { sum += w * xs[j]; });
    }
    out[i] = sum;
  }
}
