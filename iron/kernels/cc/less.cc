// less: out[i] = 1 where a[i] < b[i], else 0; less_constant with a constant operand.
#include "iron_kernel.h"

#define IRON_LESS(T) IRON_BINARY_KERNEL(less, [](auto a, auto b) { return a < b; }, T)

IRON_ALL_TYPES(IRON_LESS)
