// bitwise_xor: out[i] = a[i] ^ b[i], on integers; bitwise_xor_constant with a constant operand.
#include "iron_kernel.h"

#define IRON_BITWISE_XOR(T) IRON_BINARY_KERNEL(bitwise_xor, [](auto a, auto b) { return a ^ b; }, T)

IRON_INTEGER_TYPES(IRON_BITWISE_XOR)
