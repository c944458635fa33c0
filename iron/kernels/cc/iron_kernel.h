// iron_kernel.h: the element types and loop templates shared by iron's kernel library.
//
// Each kernel keeps its own .cc (linked on the device as `<name>.o`) holding only its
// `extern "C"` entry points, one per element type; the loops live here as templates over an
// element type. This is the portable scalar path: it compiles with the host C++ compiler
// (the emulator's native mode) and with Peano for AIE2/AIE2P cores, so the library includes
// nothing beyond <cstdint> and, in the kernels that call exp or sqrt, <cmath>. It has no AIE
// vector path.
//
// Element types (the suffix of every symbol) and how they compute:
//   i8 u8 i16 i32  load into int64_t, so one add, sub or product never overflows; storing
//                  truncates to the element width (two's complement wrap-around, C++20), and
//                  store_saturated clamps to the element's range instead.
//                  Dot products accumulate in uint64_t, which wraps instead of overflowing and
//                  keeps the low bits of the exact int64 sum.
//   f32            computes in float.
//   bf16           raw uint16_t bits of bfloat16: loads as float (bits << 16), computes in
//                  float, stores rounded to nearest even; a NaN stores as the quiet NaN 0x7fc0
//                  with its sign, as numpy's bfloat16 (ml_dtypes) converts one.
// A kernel whose output type differs from its inputs' names both: `matvec_i8_i32(const int8_t*
// w, const int8_t* x, int32_t* out, ...)`, `cast_f32_bf16`; one whose inputs differ names each
// input's and the output's: `matmul_u8_i8_i32(const uint8_t* a, const int8_t* b, int32_t* out, ...)`.
#pragma once

#include <cstdint>

namespace iron {

inline float bf16_to_float(uint16_t bits) {
  return __builtin_bit_cast(float, static_cast<uint32_t>(bits) << 16);
}

inline uint16_t float_to_bf16(float value) {
  const uint32_t bits = __builtin_bit_cast(uint32_t, value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | 0x7fc0u);  // quiet NaN, sign kept
  }
  const uint32_t round_to_nearest_even = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + round_to_nearest_even) >> 16);
}

template <typename Stored>
struct integer_type {
  using stored = Stored;
  using value = int64_t;
  using accumulator = uint64_t;
  static constexpr bool is_integer = true;
  static constexpr value lowest = Stored(-1) < 0 ? -(value(1) << (8 * sizeof(Stored) - 1)) : 0;
  static constexpr value highest = Stored(-1) < 0 ? (value(1) << (8 * sizeof(Stored) - 1)) - 1
                                                  : (value(1) << (8 * sizeof(Stored))) - 1;
  static value load(stored s) { return s; }
  static stored store(value v) { return static_cast<stored>(v); }
};

struct i8 : integer_type<int8_t> {};
struct u8 : integer_type<uint8_t> {};
struct i16 : integer_type<int16_t> {};
struct i32 : integer_type<int32_t> {};

struct f32 {
  using stored = float;
  using value = float;
  using accumulator = float;
  static constexpr bool is_integer = false;
  static value load(stored s) { return s; }
  static stored store(value v) { return v; }
};

struct bf16 {
  using stored = uint16_t;
  using value = float;
  using accumulator = float;
  static constexpr bool is_integer = false;
  static value load(stored s) { return bf16_to_float(s); }
  static stored store(value v) { return float_to_bf16(v); }
};

// Expand X(dt) for every element type a kernel supports; X defines that type's entry point.
#define IRON_ALL_TYPES(X) X(i8) X(u8) X(i16) X(i32) X(bf16) X(f32)
#define IRON_FLOAT_TYPES(X) X(bf16) X(f32)
#define IRON_INTEGER_TYPES(X) X(i8) X(u8) X(i16) X(i32)
// Expand X(in, out) for every wider result a dot product may give: exact integer sums in int32,
// bfloat16 products summed and kept in float32.
#define IRON_WIDER_DOTS(X) X(i8, i32) X(u8, i32) X(i16, i32) X(bf16, f32)
// Expand X(a, b, out) for every product of two inputs of differing types a kernel takes: uint8
// activations times int8 weights (and the other way round), summed exactly in int32.
#define IRON_MIXED_DOTS(X) X(u8, i8, i32) X(i8, u8, i32)

template <typename T>
using stored_t = typename T::stored;

template <typename T, typename Op>
void map(const stored_t<T>* x, stored_t<T>* out, int32_t n, Op op) {
  for (int32_t i = 0; i < n; ++i) {
    out[i] = T::store(op(T::load(x[i])));
  }
}

template <typename T, typename Op>
void zip(const stored_t<T>* a, const stored_t<T>* b, stored_t<T>* out, int32_t n, Op op) {
  for (int32_t i = 0; i < n; ++i) {
    out[i] = T::store(op(T::load(a[i]), T::load(b[i])));
  }
}

// out[i] = op(x[i], c), or op(c, x[i]) when `flip`: a binary kernel with a constant operand. The
// constant is `value` for an integer type (wrapped to T, as a per-call value may be any int32)
// and `fvalue` for a float type (already rounded to T by the caller).
template <typename T, typename Op>
void zip_constant(const stored_t<T>* x, stored_t<T>* out, int32_t n, int32_t value, float fvalue,
                  int32_t flip, Op op) {
  typename T::value c;
  if constexpr (T::is_integer) {
    c = T::load(T::store(value));
  } else {
    c = fvalue;
  }
  for (int32_t i = 0; i < n; ++i) {
    const auto v = T::load(x[i]);
    out[i] = T::store(flip ? op(c, v) : op(v, c));
  }
}

// A shift count clamped to 0..63, the counts an int64_t shift is defined for (numpy's shift
// of int64 gives the same for them).
inline int64_t shift_count(int64_t count) { return count < 0 ? 0 : count > 63 ? 63 : count; }

// a mod b with the sign of b (numpy's mod, Python's %), 0 when b is 0 (as numpy gives).
inline int64_t floor_mod(int64_t a, int64_t b) {
  if (b == 0) {
    return 0;
  }
  const int64_t r = a % b;
  return r != 0 && (r < 0) != (b < 0) ? r + b : r;
}

// v stored as T: clamped to T's range when T is an integer type (a float rounds as it stores).
template <typename T>
stored_t<T> store_saturated(typename T::value v) {
  if constexpr (T::is_integer) {
    return T::store(v < T::lowest ? T::lowest : v > T::highest ? T::highest : v);
  } else {
    return T::store(v);
  }
}

// v stored as the integer type T: rounded to nearest, ties to even, and clamped to T's range
// (clamping first gives the same: the ends are integers); NaN stores 0.
template <typename T>
stored_t<T> store_rounded(double v) {
  if (v != v) {
    return T::store(0);
  }
  v = v < T::lowest ? T::lowest : v > T::highest ? T::highest : v;
  int64_t whole = static_cast<int64_t>(v);  // toward zero, exact within T's range
  const double part = v - static_cast<double>(whole);
  if (part > 0.5 || (part == 0.5 && (whole & 1))) {
    ++whole;
  } else if (part < -0.5 || (part == -0.5 && (whole & 1))) {
    --whole;
  }
  return T::store(whole);
}

// sum_j a[j] * b[j * b_stride] over k terms, a of type In and b of type B (In unless mixed), in
// In's accumulator (B's is the same kind), stored as Out.
template <typename In, typename Out = In, typename B = In>
stored_t<Out> dot(const stored_t<In>* a, const stored_t<B>* b, int32_t b_stride, int32_t k) {
  using accumulator = typename In::accumulator;
  accumulator sum = 0;
  for (int32_t j = 0; j < k; ++j) {
    sum += static_cast<accumulator>(In::load(a[j]) * B::load(b[j * b_stride]));
  }
  return Out::store(static_cast<typename Out::value>(sum));
}

// The index of the first element of x[0:n] no later one beats (0 when n <= 1): `better(v, top)`
// says v beats the best so far. As numpy's argmax, max and min, a NaN beats any number: the first
// NaN is the extreme.
template <typename T, typename Better>
int32_t first_extreme(const stored_t<T>* x, int32_t n, Better better) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    const auto value = T::load(x[i]), top = T::load(x[best]);
    if (top != top) {
      break;
    }
    if (better(value, top) || value != value) {
      best = i;
    }
  }
  return best;
}

// The index of the first maximum of x[0:n]: Argmax, Max and ArgmaxBlocks.
template <typename T>
int32_t first_maximum(const stored_t<T>* x, int32_t n) {
  return first_extreme<T>(x, n, [](auto v, auto top) { return v > top; });
}

// out[r] = the element of row r of `rows` rows of n that first_extreme picks: Max and Min.
template <typename T, typename Better>
void row_extremes(const stored_t<T>* x, stored_t<T>* out, int32_t rows, int32_t n, Better better) {
  for (int32_t r = 0; r < rows; ++r) {
    out[r] = x[r * n + first_extreme<T>(x + r * n, n, better)];
  }
}

// Pooling over an h x w x c image (row-major, HWC) into oh x ow x c: for each output pixel and
// channel, `pool` folds the size x size window moved by `stride` over the image padded by
// `padding` on each side, in window order: `pool.add(value, inside)` for each position (value
// 0 where it lies on the padding), then `pool.result()` is stored; a copy of `pool` per window.
template <typename T, typename Pool>
void pool2d(const stored_t<T>* x, stored_t<T>* out, int32_t h, int32_t w, int32_t c, int32_t oh,
            int32_t ow, int32_t size, int32_t stride, int32_t padding, Pool pool) {
  for (int32_t y = 0; y < oh; ++y) {
    for (int32_t x0 = 0; x0 < ow; ++x0) {
      for (int32_t ch = 0; ch < c; ++ch) {
        Pool window = pool;
        for (int32_t i = 0; i < size; ++i) {
          const int32_t row = y * stride + i - padding;
          for (int32_t j = 0; j < size; ++j) {
            const int32_t col = x0 * stride + j - padding;
            const bool inside = row >= 0 && row < h && col >= 0 && col < w;
            window.add(inside ? T::load(x[(row * w + col) * c + ch]) : typename T::value(0), inside);
          }
        }
        out[(y * ow + x0) * c + ch] = T::store(window.result());
      }
    }
  }
}

}  // namespace iron

// The entry point `<name>_<T>(const T* x, T* out, int32_t h, int32_t w, int32_t c, int32_t oh,
// int32_t ow, int32_t size, int32_t stride, int32_t padding)` of a pooling kernel folding each
// window with `Pool<iron::T>` (iron::pool2d).
#define IRON_POOL2D_KERNEL(name, Pool, T)                                                  \
  extern "C" void name##_##T(const iron::stored_t<iron::T>* x, iron::stored_t<iron::T>* out, \
                             int32_t h, int32_t w, int32_t c, int32_t oh, int32_t ow,         \
                             int32_t size, int32_t stride, int32_t padding) {                 \
    iron::pool2d<iron::T>(x, out, h, w, c, oh, ow, size, stride, padding,                      \
                          Pool<iron::T>{size * size});                                         \
  }

// The entry points of an elementwise binary kernel `fn` (a lambda on two loaded values):
// `<name>_<T>(const T* a, const T* b, T* out, int32_t n)`, out[i] = fn(a[i], b[i]), and its form
// with a constant operand, `<name>_constant_<T>(const T* x, T* out, int32_t n, int32_t value,
// float fvalue, int32_t flip)` (zip_constant).
#define IRON_BINARY_KERNEL(name, fn, T)                                                  \
  extern "C" void name##_##T(const iron::stored_t<iron::T>* a,                          \
                             const iron::stored_t<iron::T>* b,                          \
                             iron::stored_t<iron::T>* out, int32_t n) {                 \
    iron::zip<iron::T>(a, b, out, n, fn);                                               \
  }                                                                                     \
  extern "C" void name##_constant_##T(const iron::stored_t<iron::T>* x,                 \
                                      iron::stored_t<iron::T>* out, int32_t n,          \
                                      int32_t value, float fvalue, int32_t flip) {      \
    iron::zip_constant<iron::T>(x, out, n, value, fvalue, flip, fn);                    \
  }

// The entry point `<name>_<T>(const T* x, T* out, int32_t n)` of an elementwise unary kernel
// computing `fn` (a lambda on one loaded value): out[i] = fn(x[i]).
#define IRON_UNARY_KERNEL(name, fn, T)                                                   \
  extern "C" void name##_##T(const iron::stored_t<iron::T>* x,                          \
                             iron::stored_t<iron::T>* out, int32_t n) {                 \
    iron::map<iron::T>(x, out, n, fn);                                                  \
  }

// The entry point `symbol(const In* a, const B* b, Out* out, int32_t m, int32_t k, int32_t n)`
// of a kernel on an m x k and a k x n matrix, calling `fn<In, Out, B>` (matmul,
// matmul_accumulate); IRON_MATRIX_KERNEL has b of a's type.
#define IRON_MIXED_MATRIX_KERNEL(fn, In, B, Out, symbol)                                 \
  extern "C" void symbol(const iron::stored_t<iron::In>* a,                              \
                         const iron::stored_t<iron::B>* b,                               \
                         iron::stored_t<iron::Out>* out, int32_t m, int32_t k,           \
                         int32_t n) {                                                    \
    fn<iron::In, iron::Out, iron::B>(a, b, out, m, k, n);                                \
  }
#define IRON_MATRIX_KERNEL(fn, In, Out, symbol) IRON_MIXED_MATRIX_KERNEL(fn, In, In, Out, symbol)
