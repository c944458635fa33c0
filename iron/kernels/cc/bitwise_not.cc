// bitwise_not: out[i] = ~x[i] for i < n, on integers.
#include "iron_kernel.h"

#define IRON_BITWISE_NOT(T) IRON_UNARY_KERNEL(bitwise_not, [](auto v) { return ~v; }, T)

IRON_INTEGER_TYPES(IRON_BITWISE_NOT)
