// greater_equal: out[i] = 1 where a[i] >= b[i], else 0; greater_equal_constant with a constant operand.
#include "iron_kernel.h"

#define IRON_GREATER_EQUAL(T) IRON_BINARY_KERNEL(greater_equal, [](auto a, auto b) { return a >= b; }, T)

IRON_ALL_TYPES(IRON_GREATER_EQUAL)
