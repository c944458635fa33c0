// minimum: out[i] = the smaller of a[i] and b[i] (a NaN of either, as numpy's minimum); minimum_constant with a constant operand.
#include "iron_kernel.h"

#define IRON_MINIMUM(T) IRON_BINARY_KERNEL(minimum, [](auto a, auto b) { return a <= b || a != a ? a : b; }, T)

IRON_ALL_TYPES(IRON_MINIMUM)
