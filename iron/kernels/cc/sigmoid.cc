// sigmoid: out[i] = 1 / (1 + exp(-x[i])) for i < n, computed in double and rounded once to
// float (bf16 then rounds to nearest even).
#include <cmath>

#include "iron_kernel.h"

#define IRON_SIGMOID(T) \
  IRON_UNARY_KERNEL(sigmoid, [](float v) { return static_cast<float>(1.0 / (1.0 + std::exp(-double(v)))); }, T)

IRON_FLOAT_TYPES(IRON_SIGMOID)
