// bitwise_or: out[i] = a[i] | b[i], on integers; bitwise_or_constant with a constant operand.
#include "iron_kernel.h"

#define IRON_BITWISE_OR(T) IRON_BINARY_KERNEL(bitwise_or, [](auto a, auto b) { return a | b; }, T)

IRON_INTEGER_TYPES(IRON_BITWISE_OR)
