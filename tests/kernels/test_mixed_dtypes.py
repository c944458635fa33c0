"""Mixed dtypes as a quantized network meets them: uint8 activations times int8 weights (and int8
times uint8) in MatVec and MatMul, summed exactly into int32, requantized to uint8 or int8 with a
zero point; reference() against numpy's exact integers and the design compiled for npu2 and npu1
and run on the emulator in both kernel modes, including a MatMul large enough to tile over the
array. And the refusals: a pair of dtypes no kernel takes names a Cast that keeps every value."""
import numpy as np
import pytest

import iron
from iron.errors import KernelTypeError
from iron.kernels import Add, MatMul, MatVec, Requantize
from iron.plan.rules import Rule
from tests.quotes import quoted

pytestmark = pytest.mark.usefixtures("on_emulator")
RNG = np.random.default_rng(24)


@pytest.fixture(params=["npu2", "npu1"])
def device(request):
    return request.param


def uint8(*shape):
    return RNG.integers(0, 256, shape, dtype=np.uint8)


def int8(*shape):
    return RNG.integers(-128, 128, shape, dtype=np.int8)


class QuantizedMatVec(iron.Graph):
    """uint8 x through int8 W into int32, requantized to uint8 with zero point 3 (a ReLU for free
    below it), and W's transpose-free partner int8 V times the uint8 result into int32."""

    def __init__(self, w, v):
        self.w, self.v = iron.param(w), iron.param(v)

    def body(self, x):
        h = Requantize.step(MatVec.step(self.w, x), shift=7, dtype=np.uint8, zero_point=3)
        return h, MatVec.step(self.v, h)


def test_uint8_activations_through_int8_weights_into_int32_and_back_to_uint8(device, monkeypatch):
    w, v, x = int8(48, 64), uint8(16, 48).astype(np.int8), uint8(64)
    g = QuantizedMatVec(w, v)
    h, y = g.reference(x)
    exact = w.astype(np.int64) @ x.astype(np.int64)
    assert (h.dtype, y.dtype) == (np.uint8, np.int32)
    np.testing.assert_array_equal(h, np.clip(np.round(exact / 128) + 3, 0, 255))
    np.testing.assert_array_equal(y, v.astype(np.int64) @ h.astype(np.int64))
    assert (h == 0).any() and (h == 255).any()   # both ends clamp
    compiled = g.compile(x=x, device=device)
    for mode in ("numpy", "native"):
        monkeypatch.setenv("IRON_EMULATOR_KERNELS", mode)
        got_h, got_y = compiled(x)
        np.testing.assert_array_equal(got_h, h)
        np.testing.assert_array_equal(got_y, y)


class Product(iron.Graph):
    def __init__(self, b, bias):
        self.b, self.bias = iron.param(b), iron.param(bias)

    def body(self, a):
        return Requantize.step(Add.step(MatMul.step(a, self.b), self.bias), shift=8, dtype=np.int8, zero_point=-4)


@pytest.mark.parametrize("m, k, n", [(8, 32, 16), (128, 256, 128)])
def test_uint8_matmul_of_int8_weights_small_and_tiled_over_the_array(device, monkeypatch, m, k, n):
    """The larger one tiles over the array (tile_matmul_over_array): every core's MatMul and
    MatMulAccumulate of uint8 x int8 into int32."""
    a, b, bias = uint8(m, k), int8(k, n), RNG.integers(-5000, 5000, (m, n), dtype=np.int32)
    g = Product(b, bias)
    want = g.reference(a)
    exact = a.astype(np.int64) @ b.astype(np.int64) + bias
    np.testing.assert_array_equal(want, np.clip(np.round(exact / 256) - 4, -128, 127))
    compiled = g.compile(a=a, device=device)
    rules = {rule for plan in (compiled.plan, *compiled.plan.segments) for rule, _ in plan.rules}
    assert (Rule.TILE_MATMUL_OVER_ARRAY in rules) == (m == 128)
    for mode in ("numpy", "native"):
        monkeypatch.setenv("IRON_EMULATOR_KERNELS", mode)
        np.testing.assert_array_equal(compiled(a), want)


class Mixed(iron.Graph):
    def __init__(self, kernel, w, **attrs):
        self.kernel, self.w, self.attrs = kernel, iron.param(w), attrs

    def body(self, x):
        return self.kernel.step(self.w, x, **self.attrs)


@pytest.mark.parametrize("w, x, text", [
    (int8(4, 8), np.ones(8, np.uint16).astype(np.int16),
     "MatVec computes in one dtype, or takes uint8 x int8 into int32 or int8 x uint8 into int32, but input 0 (w) is "
     "int8 and input 1 (x) is int16: Cast.step(w, dtype=np.int16) converts w without losing a value."),
    (uint8(4, 8), int8(8),
     None),
])
def test_a_pair_no_kernel_takes_names_a_cast_keeping_every_value(w, x, text):
    if text is None:   # uint8 W x int8 x is taken: int32, and nothing else
        assert Mixed(MatVec, w).reference(x).dtype == np.int32
        with pytest.raises(KernelTypeError) as raised:
            Mixed(MatVec, w, dtype=np.uint8).reference(x)
        quoted(raised.value, "MatVec", "uint8 x int8", "np.int32", "not uint8", "dtype=")
        return
    with pytest.raises(KernelTypeError) as raised:
        Mixed(MatVec, w).reference(x)
    assert str(raised.value) == text


def test_add_of_uint8_and_int8_names_the_int16_casts_of_both():
    """Neither int8 nor uint8 holds the other's values: both go to int16, never to one of them."""
    class Sum(iron.Graph):
        def body(self, a, b):
            return Add.step(a, b)

    with pytest.raises(KernelTypeError) as raised:
        Sum().reference(uint8(4), int8(4))
    quoted(raised.value, "Add", "input 0 (a) is uint8", "input 1 (b) is int8", "Cast.step(a, dtype=np.int16)",
           "Cast.step(b, dtype=np.int16)")


def every_value(dtype) -> np.ndarray:
    """Every value of an 8- or 16-bit dtype; int32's ends and the integers around 2**24 (where
    float32 stops holding every integer); float32's largest and smallest, and 1 + 2**-23."""
    dtype = np.dtype(dtype)
    if dtype.itemsize <= 2:
        return np.arange(2 ** (8 * dtype.itemsize), dtype=np.uint32).astype(f"u{dtype.itemsize}").view(dtype)
    if dtype.kind == "i":
        return np.array([-(2**31), 2**31 - 1, 2**24 + 1, -(2**24) - 1, 0], dtype)
    return np.array([np.finfo(np.float32).max, np.finfo(np.float32).tiny, 1 + 2**-23], dtype)


@pytest.mark.parametrize("source", iron.dtypes.SUPPORTED, ids=str)
def test_holds_is_whether_every_value_survives_the_round_trip(source):
    """The dtype a refusal suggests casting to must hold every value: dtypes.holds against the
    values themselves, converted and compared as numbers (float64 holds each exactly; NaNs aside)."""
    values = every_value(source)
    with np.errstate(over="ignore", invalid="ignore"):   # NaNs, and floats beyond an integer's range
        exact = values.astype(np.float64)
        values, exact = values[~np.isnan(exact)], exact[~np.isnan(exact)]
        conversions = {into: values.astype(into).astype(np.float64) for into in iron.dtypes.SUPPORTED}
    for into, converted in conversions.items():
        assert iron.dtypes.holds(source, into) == bool(np.array_equal(converted, exact)), into
