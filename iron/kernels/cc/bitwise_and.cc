// bitwise_and: out[i] = a[i] & b[i], on integers; bitwise_and_constant with a constant operand.
#include "iron_kernel.h"

#define IRON_BITWISE_AND(T) IRON_BINARY_KERNEL(bitwise_and, [](auto a, auto b) { return a & b; }, T)

IRON_INTEGER_TYPES(IRON_BITWISE_AND)
