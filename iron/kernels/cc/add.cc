// add: out[i] = a[i] + b[i] for i < n, and add_constant with a constant operand; integers
// wrap around, bf16 rounds to nearest even.
#include "iron_kernel.h"

#define IRON_ADD(T) IRON_BINARY_KERNEL(add, [](auto a, auto b) { return a + b; }, T)

IRON_ALL_TYPES(IRON_ADD)
