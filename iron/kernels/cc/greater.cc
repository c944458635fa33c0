// greater: out[i] = 1 where a[i] > b[i], else 0; greater_constant with a constant operand.
#include "iron_kernel.h"

#define IRON_GREATER(T) IRON_BINARY_KERNEL(greater, [](auto a, auto b) { return a > b; }, T)

IRON_ALL_TYPES(IRON_GREATER)
