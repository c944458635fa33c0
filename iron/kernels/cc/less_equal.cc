// less_equal: out[i] = 1 where a[i] <= b[i], else 0; less_equal_constant with a constant operand.
#include "iron_kernel.h"

#define IRON_LESS_EQUAL(T) IRON_BINARY_KERNEL(less_equal, [](auto a, auto b) { return a <= b; }, T)

IRON_ALL_TYPES(IRON_LESS_EQUAL)
