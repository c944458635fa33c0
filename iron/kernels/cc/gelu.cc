// gelu: out[i] = x[i] / 2 * (1 + erf(x[i] / sqrt(2))) (PyTorch's exact GELU) for i < n, computed in double and rounded once to
// float (bf16 then rounds to nearest even).
#include <cmath>

#include "iron_kernel.h"

#define IRON_GELU(T) \
  IRON_UNARY_KERNEL(gelu, [](float v) { return static_cast<float>(0.5 * double(v) * (1.0 + std::erf(double(v) * 0.70710678118654752440))); }, T)

IRON_FLOAT_TYPES(IRON_GELU)
