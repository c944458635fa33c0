// not_equal: out[i] = 1 where a[i] != b[i], else 0 (1 where either is NaN); not_equal_constant with a constant operand.
#include "iron_kernel.h"

#define IRON_NOT_EQUAL(T) IRON_BINARY_KERNEL(not_equal, [](auto a, auto b) { return a != b; }, T)

IRON_ALL_TYPES(IRON_NOT_EQUAL)
