// max_pool2d: out (oh, ow, c) = the largest element of each size x size window of x (h, w, c),
// row-major, moved by `stride`; of x padded with `padding` elements on each side that take no
// part (every window holds at least one element of x: padding < size). As numpy's maximum, a
// NaN is larger than any number: a window holding one gives NaN.
#include "iron_kernel.h"

namespace {

template <typename T>
struct Largest {
  int32_t count;  // the window's size (unused: a maximum needs no count)
  bool found = false;
  typename T::value best = 0;

  void add(typename T::value value, bool inside) {
    if (inside && (!found || value > best || value != value)) {
      best = best != best ? best : value;  // a NaN, once found, stays
      found = true;
    }
  }
  typename T::value result() const { return best; }
};

}  // namespace

#define IRON_MAX_POOL2D(T) IRON_POOL2D_KERNEL(max_pool2d, Largest, T)

IRON_ALL_TYPES(IRON_MAX_POOL2D)
