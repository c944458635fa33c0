// conv2d: out (oh, ow, k) = the convolution of x (h, w, c) with weights (kh, kw, c, k), all
// row-major (HWC images, HWIO weights), the window moved by `stride` over x padded with
// `padding` zeros on each side: out[y][x'][o] = sum over i < kh, j < kw, ch < c of
// x[y * stride + i - padding][x' * stride + j - padding][ch] * w[i][j][ch][o], the padding's
// terms left out (they are 0). Each sum accumulates as matmul's: integers exactly (mod 2**64),
// wrapped to the output type, floats in float. conv2d_<in>_<out> gives the wider output of
// IRON_WIDER_DOTS, conv2d_<a>_<b>_<out> a product of IRON_MIXED_DOTS (uint8 x int8 -> int32).
#include "iron_kernel.h"

namespace {

template <typename In, typename Out, typename B>
void conv2d(const iron::stored_t<In>* x, const iron::stored_t<B>* w, iron::stored_t<Out>* out,
            int32_t h, int32_t wd, int32_t c, int32_t kh, int32_t kw, int32_t oh, int32_t ow,
            int32_t k, int32_t stride, int32_t padding) {
  using accumulator = typename In::accumulator;
  for (int32_t y = 0; y < oh; ++y) {
    for (int32_t x0 = 0; x0 < ow; ++x0) {
      for (int32_t o = 0; o < k; ++o) {
        accumulator sum = 0;
        for (int32_t i = 0; i < kh; ++i) {
          const int32_t row = y * stride + i - padding;
          for (int32_t j = 0; j < kw && row >= 0 && row < h; ++j) {
            const int32_t col = x0 * stride + j - padding;
            if (col < 0 || col >= wd) {
              continue;
            }
            const iron::stored_t<In>* pixel = x + (row * wd + col) * c;
            const iron::stored_t<B>* weights = w + (i * kw + j) * c * k + o;
            for (int32_t ch = 0; ch < c; ++ch) {
              sum += static_cast<accumulator>(In::load(pixel[ch]) * B::load(weights[ch * k]));
            }
          }
        }
        out[(y * ow + x0) * k + o] = Out::store(static_cast<typename Out::value>(sum));
      }
    }
  }
}

}  // namespace

#define IRON_CONV2D_TO(In, B, Out, symbol)                                                 \
  extern "C" void symbol(const iron::stored_t<iron::In>* x, const iron::stored_t<iron::B>* w, \
                         iron::stored_t<iron::Out>* out, int32_t h, int32_t wd, int32_t c,   \
                         int32_t kh, int32_t kw, int32_t oh, int32_t ow, int32_t k,          \
                         int32_t stride, int32_t padding) {                                  \
    conv2d<iron::In, iron::Out, iron::B>(x, w, out, h, wd, c, kh, kw, oh, ow, k, stride,      \
                                         padding);                                           \
  }
#define IRON_CONV2D(T) IRON_CONV2D_TO(T, T, T, conv2d_##T)
#define IRON_CONV2D_WIDER(In, Out) IRON_CONV2D_TO(In, In, Out, conv2d_##In##_##Out)
#define IRON_CONV2D_MIXED(A, B, Out) IRON_CONV2D_TO(A, B, Out, conv2d_##A##_##B##_##Out)

IRON_ALL_TYPES(IRON_CONV2D)
IRON_WIDER_DOTS(IRON_CONV2D_WIDER)
IRON_MIXED_DOTS(IRON_CONV2D_MIXED)
