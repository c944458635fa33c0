"""The elementwise, reduction, activation and norm families (iron/kernels/elementwise.py,
reductions.py, norms.py; Add, Sub, Mul, Scale and Max of library.py): each kernel's C++ built for
the host (the emulator's native mode) against its numpy compute, bit for bit (integers, and
floats too: both compute in the same order, the activations in float64 rounded once), on random
inputs of every dtype it takes and, with hypothesis, on any int32 / float32 values; integers also
against an independent Python-int formula, floats against float64 within a tolerance.
"""
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iron.errors import DeclarationError
from iron.kernels import (
    GELU,
    LIBRARY,
    Add,
    Axpy,
    Binary,
    BitwiseNot,
    GELUTanh,
    LayerNorm,
    LayerNormAffine,
    LeakyReLU,
    Max,
    Min,
    Scale,
    Sigmoid,
    Sum,
    Tanh,
    Where,
)
from iron.kernels.elementwise import Activation

DTYPES = {"i8": np.int8, "u8": np.uint8, "i16": np.int16, "i32": np.int32, "bf16": ml_dtypes.bfloat16, "f32": np.float32}
INTEGERS, FLOATS = ("i8", "u8", "i16", "i32"), ("bf16", "f32")
N = 67
BINARIES = [k for k in LIBRARY if isinstance(k, type) and issubclass(k, Binary)]


def clamp_count(b):
    return min(max(b, 0), 63)


# Each binary op on Python ints, exactly (wrapped to the dtype afterwards).
EXACT = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "maximum": max, "minimum": min,
    "greater": lambda a, b: int(a > b), "greater_equal": lambda a, b: int(a >= b), "less": lambda a, b: int(a < b),
    "less_equal": lambda a, b: int(a <= b), "equal": lambda a, b: int(a == b), "not_equal": lambda a, b: int(a != b),
    "bitwise_and": lambda a, b: a & b, "bitwise_or": lambda a, b: a | b, "bitwise_xor": lambda a, b: a ^ b,
    "shift_left": lambda a, b: a << clamp_count(b), "shift_right": lambda a, b: a >> clamp_count(b),
    "mod": lambda a, b: a % b if b else 0,
}


def dtype_of(dt) -> np.dtype:
    return np.dtype(DTYPES[dt])


def random_array(dt, shape, seed=7):
    """Integers over the dtype's full range; floats standard normal times 3."""
    rng = np.random.default_rng(seed)
    if dt in INTEGERS:
        info = np.iinfo(dtype_of(dt))
        return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype_of(dt))
    return (3 * rng.standard_normal(shape)).astype(np.float32).astype(dtype_of(dt))


def wrapped(values, dt):
    """Python ints wrapped to the dtype's width (two's complement)."""
    bits = 8 * dtype_of(dt).itemsize
    return np.array([(v + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1)) if dt != "u8" else v % 256
                     for v in values]).astype(dtype_of(dt))


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))


def run(library, symbol, inputs, out, *scalars, kinds=()):
    """Call `symbol` on the input arrays and `out`, then its size and attribute operands."""
    operands = [*inputs, out, *scalars]
    types = ["ptr"] * (len(inputs) + 1) + list(kinds or ["i32"] * len(scalars))
    library.call(symbol, operands, types)
    return out


def cases(kernels):
    return [(k, dt) for k in kernels for dt in DTYPES if dtype_of(dt) in k.dtypes]


def name_of(value):
    return getattr(value, "__qualname__", str(value))


@pytest.mark.parametrize("kernel, dt", cases(BINARIES), ids=name_of)
def test_binary_kernels_equal_numpy_bit_for_bit_and_ints_the_exact_formula(library, kernel, dt):
    a, b = random_array(dt, N, 1), random_array(dt, N, 2)
    b[:5] = a[:5]   # ties: equal values, the same operand twice
    if dt in INTEGERS:
        b[5:9] = np.array([0, 1, 7, 70], dtype_of(dt))   # a zero divisor, shift counts in and past the width
    got = run(library, f"{kernel.name}_{dt}", [a, b], np.zeros_like(a), N)
    same_bits(got, kernel.reference(a, b))
    if dt in INTEGERS:
        same_bits(got, wrapped([EXACT[kernel.name](int(x), int(y)) for x, y in zip(a, b)], dt))


@pytest.mark.parametrize("kernel, dt", cases(BINARIES), ids=name_of)
@pytest.mark.parametrize("flip", [0, 1])
def test_constant_forms_equal_numpy_bit_for_bit(library, kernel, dt, flip):
    x = random_array(dt, N, 3)
    constant = kernel.constant
    value, fvalue = (-3, 0.0) if dt in INTEGERS else (0, float(np.float32(-1.75)))
    if dt == "u8":
        value = 3
    got = run(library, f"{constant.name}_{dt}", [x], np.zeros_like(x), N, value, fvalue, flip,
              kinds=["i32", "i32", "f32", "i32"])
    same_bits(got, constant.reference(x, value=value, fvalue=fvalue, flip=flip))
    c = np.full_like(x, value if dt in INTEGERS else fvalue)
    same_bits(got, kernel.reference(c, x) if flip else kernel.reference(x, c))


INT32 = st.integers(-(2**31), 2**31 - 1)


@settings(max_examples=150)
@given(st.sampled_from(BINARIES), st.sampled_from(INTEGERS), st.lists(st.tuples(INT32, INT32), min_size=1, max_size=32))
def test_integer_binary_kernels_on_any_values(library, kernel, dt, pairs):
    """Any int32 values, wrapped to the dtype first: C++, numpy and the exact formula agree."""
    a = wrapped([p[0] for p in pairs], dt)
    b = wrapped([p[1] for p in pairs], dt)
    got = run(library, f"{kernel.name}_{dt}", [a, b], np.zeros_like(a), len(a))
    same_bits(got, kernel.reference(a, b))
    same_bits(got, wrapped([EXACT[kernel.name](int(x), int(y)) for x, y in zip(a, b)], dt))


@settings(max_examples=100)
@given(st.sampled_from(BINARIES), st.sampled_from(INTEGERS), st.lists(INT32, min_size=1, max_size=32), INT32,
       st.integers(0, 1))
def test_integer_constant_forms_wrap_a_per_call_value_to_the_dtype(library, kernel, dt, values, value, flip):
    x = wrapped(values, dt)
    got = run(library, f"{kernel.name}_constant_{dt}", [x], np.zeros_like(x), len(x), value, 0.0, flip,
              kinds=["i32", "i32", "f32", "i32"])
    same_bits(got, kernel.constant.reference(x, value=value, flip=flip))
    c = int(wrapped([value], dt)[0])
    same_bits(got, wrapped([EXACT[kernel.name](*((c, int(v)) if flip else (int(v), c))) for v in x], dt))


FLOAT32 = st.floats(width=32, allow_nan=False, allow_infinity=False, min_value=-1e4, max_value=1e4)


@settings(max_examples=100)
@given(st.sampled_from(BINARIES), st.sampled_from(FLOATS), st.lists(st.tuples(FLOAT32, FLOAT32), min_size=1, max_size=32))
def test_float_binary_kernels_on_any_values(library, kernel, dt, pairs):
    if dtype_of(dt) not in kernel.dtypes:
        return
    a = np.array([p[0] for p in pairs], np.float32).astype(dtype_of(dt))
    b = np.array([p[1] for p in pairs], np.float32).astype(dtype_of(dt))
    got = run(library, f"{kernel.name}_{dt}", [a, b], np.zeros_like(a), len(a))
    same_bits(got, kernel.reference(a, b))


UNARY = {
    Tanh: np.tanh, Sigmoid: lambda x: 1 / (1 + np.exp(-x)),
    GELU: lambda x: x / 2 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x])),
    GELUTanh: lambda x: x / 2 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    LeakyReLU: lambda x: np.where(x >= 0, x, 0.01 * x),
}


@pytest.mark.parametrize("kernel, dt", cases(UNARY), ids=name_of)
def test_activations_equal_numpy_bit_for_bit_and_float64_within_an_ulp(library, kernel, dt):
    x = random_array(dt, N, 4)
    kinds = ["i32", "f32"] if kernel.c_attrs else ["i32"]
    got = run(library, f"{kernel.name}_{dt}", [x], np.zeros_like(x), N, *([0.01] if kernel.c_attrs else []),
              kinds=kinds)
    same_bits(got, kernel.reference(x))
    exact = UNARY[kernel](x.astype(np.float64))
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=2**-7 if dt == "bf16" else 1e-6, atol=1e-7)


@settings(max_examples=100)
@given(st.sampled_from(list(UNARY)), st.sampled_from(FLOATS), st.lists(FLOAT32, min_size=1, max_size=32))
def test_activations_on_any_values(library, kernel, dt, values):
    x = np.array(values, np.float32).astype(dtype_of(dt))
    got = run(library, f"{kernel.name}_{dt}", [x], np.zeros_like(x), len(x),
              *([0.01] if kernel.c_attrs else []), kinds=["i32", "f32"][:1 + len(kernel.c_attrs)])
    same_bits(got, kernel.reference(x))


@pytest.mark.parametrize("dt", INTEGERS)
def test_bitwise_not(library, dt):
    x = random_array(dt, N, 5)
    got = run(library, f"bitwise_not_{dt}", [x], np.zeros_like(x), N)
    same_bits(got, BitwiseNot.reference(x))
    same_bits(got, wrapped([~int(v) for v in x], dt))


@pytest.mark.parametrize("dt", DTYPES)
def test_where_takes_a_where_the_condition_is_not_zero(library, dt):
    cond = np.tile(np.array([0, 1, 0, 2], dtype_of(dt)), 17)[:N]
    a, b = random_array(dt, N, 6), random_array(dt, N, 7)
    got = run(library, f"where_{dt}", [cond, a, b], np.zeros_like(a), N)
    same_bits(got, Where.reference(cond, a, b))
    same_bits(got, np.array([x if c != 0 else y for c, x, y in zip(cond, a, b)], dtype_of(dt)))


@pytest.mark.parametrize("dt", DTYPES)
def test_scale_rounds_and_saturates_integers(library, dt):
    x = random_array(dt, N, 8)
    for factor in (-1.75, 0.5, 3.0):
        got = run(library, f"scale_{dt}", [x], np.zeros_like(x), N, factor, kinds=["i32", "f32"])
        same_bits(got, Scale.reference(x, factor=factor))
        if dt in INTEGERS:
            info = np.iinfo(dtype_of(dt))   # exact: x * factor needs at most 33 bits here; round() ties to even
            same_bits(got, np.array([min(max(round(int(v) * factor), info.min), info.max) for v in x], dtype_of(dt)))


@settings(max_examples=100)
@given(st.sampled_from(INTEGERS), st.lists(INT32, min_size=1, max_size=32), st.floats(width=32, min_value=-1e6, max_value=1e6))
def test_scale_of_integers_on_any_values(library, dt, values, factor):
    x = wrapped(values, dt)
    got = run(library, f"scale_{dt}", [x], np.zeros_like(x), len(x), factor, kinds=["i32", "f32"])
    same_bits(got, Scale.reference(x, factor=factor))


ROWS = 3


@pytest.mark.parametrize("kernel, dt", cases([Max, Min, Sum]), ids=name_of)
def test_row_reductions_equal_numpy_bit_for_bit(library, kernel, dt):
    x = random_array(dt, (ROWS, N), 9)
    got = run(library, f"{kernel.name}_{dt}", [x], np.zeros(ROWS, dtype_of(dt)), ROWS, N)
    same_bits(got, kernel.reference(x))
    same_bits(got[1:2], kernel.reference(x[1]).reshape(1))   # a whole tensor (n,) is one row
    exact = {"max": max, "min": min, "sum": sum}[kernel.name]
    if dt in INTEGERS:
        same_bits(got, wrapped([exact(int(v) for v in row) for row in x], dt))
    else:
        np.testing.assert_allclose(got.astype(np.float64), [exact(row.astype(np.float64)) for row in x], rtol=1e-2)


@pytest.mark.parametrize("dt, out", [("i8", "i32"), ("u8", "i32"), ("i16", "i32"), ("bf16", "f32")])
def test_sum_into_a_wider_dtype(library, dt, out):
    x = random_array(dt, (ROWS, N), 10)
    got = run(library, f"sum_{dt}_{out}", [x], np.zeros(ROWS, dtype_of(out)), ROWS, N)
    same_bits(got, Sum.reference(x, dtype=dtype_of(out)))
    if dt in INTEGERS:
        assert got.tolist() == [sum(int(v) for v in row) for row in x]


@settings(max_examples=100)
@given(st.sampled_from(FLOATS), st.lists(FLOAT32, min_size=1, max_size=48), st.sampled_from([Max, Min, Sum]))
def test_float_row_reductions_on_any_values(library, dt, values, kernel):
    x = np.array(values, np.float32).astype(dtype_of(dt))
    got = run(library, f"{kernel.name}_{dt}", [x], np.zeros(1, x.dtype), 1, len(x))
    same_bits(got, kernel.reference(x).reshape(1))


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("length", [N, 40])
def test_layer_norm_with_and_without_weight_and_bias(library, dt, length):
    x, w, b = random_array(dt, (ROWS, N), 11), random_array(dt, N, 12), random_array(dt, N, 13)
    plain = run(library, f"layer_norm_{dt}", [x], np.full_like(x, 9), ROWS, N, 1e-5, length,
                kinds=["i32", "i32", "f32", "i32"])
    affine = run(library, f"layer_norm_affine_{dt}", [x, w, b], np.full_like(x, 9), ROWS, N, 1e-5, length,
                 kinds=["i32", "i32", "f32", "i32"])
    same_bits(plain, LayerNorm.reference(x, eps=1e-5, length=length))
    same_bits(affine, LayerNormAffine.reference(x, w, b, eps=1e-5, length=length))
    valid = x[:, :length].astype(np.float64)
    normal = (valid - valid.mean(axis=1, keepdims=True)) / np.sqrt(valid.var(axis=1, keepdims=True) + 1e-5)
    tolerance = {"rtol": 2e-2, "atol": 2e-2} if dt == "bf16" else {"rtol": 1e-4, "atol": 1e-5}
    np.testing.assert_allclose(plain[:, :length].astype(np.float64), normal, **tolerance)
    np.testing.assert_allclose(affine[:, :length].astype(np.float64),
                               normal * w[:length].astype(np.float64) + b[:length].astype(np.float64), **tolerance)
    assert not plain[:, length:].astype(np.float32).any() and not affine[:, length:].astype(np.float32).any()


@pytest.mark.parametrize("dt", FLOATS)
def test_axpy(library, dt):
    x, y = random_array(dt, N, 14), random_array(dt, N, 15)
    got = run(library, f"axpy_{dt}", [x, y], np.zeros_like(x), N, -0.75, kinds=["i32", "f32"])
    same_bits(got, Axpy.reference(x, y, alpha=-0.75))
    np.testing.assert_allclose(got.astype(np.float64), -0.75 * x.astype(np.float64) + y.astype(np.float64),
                               rtol=2**-7 if dt == "bf16" else 1e-6, atol=1e-6)


def test_add_of_int8_wraps_and_its_constant_form_too(library):
    x = np.array([127, -128, 100], np.int8)
    same_bits(run(library, "add_constant_i8", [x], np.zeros_like(x), 3, 1, 0.0, 0, kinds=["i32", "i32", "f32", "i32"]),
              np.array([-128, -127, 101], np.int8))
    same_bits(Add.constant.reference(x, value=1), np.array([-128, -127, 101], np.int8))


@pytest.mark.parametrize("family, attr", [(Binary, "op"), (Activation, "fn")])
def test_a_named_family_kernel_without_its_numpy_is_refused_before_it_claims_its_name(family, attr):
    name = f"no_{attr}_{family.__name__.lower()}"
    with pytest.raises(DeclarationError) as refused:
        type("Lacking", (family,), {"name": name})
    assert f"kernel Lacking ('{name}') defines no {attr}" in str(refused.value)
    defined = type("Lacking", (family,), {"name": name, attr: staticmethod(np.negative if attr == "fn" else np.add)})
    assert defined.name == name   # the refusal claimed nothing: the same name is free
