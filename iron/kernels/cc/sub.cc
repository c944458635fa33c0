// sub: out[i] = a[i] - b[i] for i < n, and sub_constant with a constant operand; integers
// wrap around, bf16 rounds to nearest even.
#include "iron_kernel.h"

#define IRON_SUB(T) IRON_BINARY_KERNEL(sub, [](auto a, auto b) { return a - b; }, T)

IRON_ALL_TYPES(IRON_SUB)
