// tanh: out[i] = tanh(x[i]) for i < n, computed in double and rounded once to
// float (bf16 then rounds to nearest even).
#include <cmath>

#include "iron_kernel.h"

#define IRON_TANH(T) \
  IRON_UNARY_KERNEL(tanh, [](float v) { return static_cast<float>(std::tanh(double(v))); }, T)

IRON_FLOAT_TYPES(IRON_TANH)
