// shift_right: out[i] = a[i] >> b[i], on integers: arithmetic (the sign kept), the count
// clamped to 0..63; shift_right_constant with a constant operand.
#include "iron_kernel.h"

#define IRON_SHIFT_RIGHT(T) IRON_BINARY_KERNEL(shift_right, [](auto a, auto b) { return a >> iron::shift_count(b); }, T)

IRON_INTEGER_TYPES(IRON_SHIFT_RIGHT)
