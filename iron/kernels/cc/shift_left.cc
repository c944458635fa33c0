// shift_left: out[i] = a[i] << b[i], on integers: the count clamped to 0..63, the int64
// product wrapped to the element width; shift_left_constant with a constant operand.
#include "iron_kernel.h"

#define IRON_SHIFT_LEFT(T) IRON_BINARY_KERNEL(shift_left, [](auto a, auto b) { return a << iron::shift_count(b); }, T)

IRON_INTEGER_TYPES(IRON_SHIFT_LEFT)
