// gelu_tanh: out[i] = x[i] / 2 * (1 + tanh(sqrt(2 / pi) * (x[i] + 0.044715 * x[i]**3))) (PyTorch's
// approximate='tanh') for i < n, computed in double and rounded once to
// float (bf16 then rounds to nearest even).
#include <cmath>

#include "iron_kernel.h"

#define IRON_GELU_TANH(T) \
  IRON_UNARY_KERNEL(gelu_tanh, [](float v) { return static_cast<float>(0.5 * double(v) * (1.0 + std::tanh(0.79788456080286535588 * (double(v) + 0.044715 * double(v) * double(v) * double(v))))); }, T)

IRON_FLOAT_TYPES(IRON_GELU_TANH)
