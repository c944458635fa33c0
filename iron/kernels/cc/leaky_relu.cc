// leaky_relu: out[i] = x[i] where x[i] >= 0, else alpha * x[i], for i < n, in float (bf16 rounds
// to nearest even; NaN stays NaN).
#include "iron_kernel.h"

#define IRON_LEAKY_RELU(T)                                                                 \
  extern "C" void leaky_relu_##T(const iron::stored_t<iron::T>* x,                        \
                                 iron::stored_t<iron::T>* out, int32_t n, float alpha) {  \
    iron::map<iron::T>(x, out, n, [alpha](float v) { return v >= 0.0f ? v : alpha * v; });  \
  }

IRON_FLOAT_TYPES(IRON_LEAKY_RELU)
