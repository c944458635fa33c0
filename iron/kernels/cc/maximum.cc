// maximum: out[i] = the larger of a[i] and b[i] (a NaN of either, as numpy's maximum); maximum_constant with a constant operand.
#include "iron_kernel.h"

#define IRON_MAXIMUM(T) IRON_BINARY_KERNEL(maximum, [](auto a, auto b) { return a >= b || a != a ? a : b; }, T)

IRON_ALL_TYPES(IRON_MAXIMUM)
