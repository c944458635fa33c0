// mod: out[i] = a[i] mod b[i], on integers, with the sign of b[i] (numpy's mod, Python's %);
// 0 where b[i] is 0; mod_constant with a constant operand.
#include "iron_kernel.h"

#define IRON_MOD(T) IRON_BINARY_KERNEL(mod, [](auto a, auto b) { return iron::floor_mod(a, b); }, T)

IRON_INTEGER_TYPES(IRON_MOD)
