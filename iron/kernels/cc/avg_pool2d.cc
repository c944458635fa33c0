// avg_pool2d: out (oh, ow, c) = the mean of each size x size window of x (h, w, c), row-major,
// moved by `stride` over x padded with `padding` zeros on each side, which count (size * size
// terms in every mean). Floats sum in float from 0 in window order, the padding adding 0, and
// divide once; integers sum exactly and divide rounding half to even (the floor of the quotient,
// up when the remainder is more than half the count, or exactly half and the floor odd).
#include "iron_kernel.h"

namespace {

template <typename T>
struct Mean {
  int32_t count;  // the terms of every mean: the window's size, padding included
  typename T::accumulator sum = 0;

  void add(typename T::value value, bool) { sum += static_cast<typename T::accumulator>(value); }

  typename T::value result() const {
    if constexpr (T::is_integer) {
      const int64_t total = static_cast<int64_t>(sum);
      int64_t floor = total / count, rest = total % count;
      if (rest < 0) {  // C++ divides toward zero: step down to the floor
        rest += count;
        --floor;
      }
      return floor + (2 * rest > count || (2 * rest == count && (floor & 1) != 0));
    } else {
      return sum / static_cast<float>(count);
    }
  }
};

}  // namespace

#define IRON_AVG_POOL2D(T) IRON_POOL2D_KERNEL(avg_pool2d, Mean, T)

IRON_ALL_TYPES(IRON_AVG_POOL2D)
