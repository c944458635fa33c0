"""Conversions as a user meets them: int8 MatVec/MatMul into int32, Requantize back to int8, Cast
between dtypes (float32 activations meeting bfloat16 weights), reference() against the design
compiled for npu2 and for npu1 (the host-driven path) and run on the emulator (integers exactly),
and the exact texts of the errors a wrong dtype gets."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import iron
from iron.errors import KernelTypeError
from iron.kernels import Add, Cast, MatMul, MatVec, Requantize, Tanh
from tests.quotes import quoted

I8, I32, F32 = np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.float32)


pytestmark = pytest.mark.usefixtures("on_emulator")


@pytest.fixture(params=["npu2", "npu1"])
def device(request):
    return request.param


def compiled_call(graph, device, *tensors):
    """The graph's call compiled for `device` and run on the emulator."""
    return graph.compile(*tensors, device=device)(*tensors)


class Dot(iron.Graph):
    """W @ x in int8, and again into int32."""

    def __init__(self, w):
        self.w = iron.param(w)

    def body(self, x):
        return MatVec.step(self.w, x), MatVec.step(self.w, x, dtype=np.int32)


def test_int8_matvec_into_int32_keeps_19200_where_int8_wraps_to_0(device):
    g = Dot(np.full((2, 12), 40, np.int8))
    x = np.full(12, 40, np.int8)
    for wrapped, exact in (g.reference(x), compiled_call(g, device, x)):
        assert (wrapped.dtype, exact.dtype) == (I8, I32)
        np.testing.assert_array_equal(wrapped, [0, 0])
        np.testing.assert_array_equal(exact, [19200, 19200])


class Layer(iron.Graph):
    """An int8 layer: int32 accumulation, requantized to int8, and the next layer's MatMul."""

    def __init__(self, w, b, shift):
        self.w, self.b, self.shift = iron.param(w), iron.param(b), shift

    def body(self, x):
        acc = MatVec.step(self.w, x, dtype=np.int32)
        return acc, Requantize.step(acc, shift=self.shift), MatMul.step(self.w, self.b, dtype=np.int32)


def test_an_int8_layer_compiled_equals_the_reference_and_numpy(device):
    rng = np.random.default_rng(5)
    w, b = rng.integers(-128, 128, (16, 32), dtype=np.int8), rng.integers(-128, 128, (32, 8), dtype=np.int8)
    x = rng.integers(-128, 128, 32, dtype=np.int8)
    g = Layer(w, b, shift=8)
    want = g.reference(x)
    acc = w.astype(np.int64) @ x.astype(np.int64)
    np.testing.assert_array_equal(want[0], acc)
    np.testing.assert_array_equal(want[1], np.clip(np.round(acc / 256), -128, 127))  # numpy rounds half to even
    np.testing.assert_array_equal(want[2], w.astype(np.int64) @ b.astype(np.int64))
    for got, expected in zip(compiled_call(g, device, x), want):
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


class Mixed(iron.Graph):
    """float32 activations meeting bfloat16 weights: Cast the activations, sum into float32."""

    def __init__(self, w):
        self.w = iron.param(w)

    def body(self, x):
        return MatVec.step(self.w, Cast.step(x, dtype=iron.bfloat16), dtype=np.float32)


def test_float32_activations_meet_bfloat16_weights_through_cast(device):
    rng = np.random.default_rng(6)
    w = rng.standard_normal((8, 16)).astype(iron.bfloat16)
    x = rng.standard_normal(16).astype(np.float32)
    g = Mixed(w)
    want = g.reference(x)
    assert want.dtype == F32
    np.testing.assert_allclose(want, w.astype(np.float32) @ x.astype(iron.bfloat16).astype(np.float32), rtol=1e-6)
    got = compiled_call(g, device, x)
    assert got.dtype == F32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


class CastTo(iron.Graph):
    def __init__(self, out):
        self.out = out

    def body(self, x):
        return Cast.step(x, dtype=self.out)


@settings(max_examples=50)
@given(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=8, max_size=8),
       st.sampled_from([np.int8, np.uint8, np.int16, np.float32, iron.bfloat16]))
def test_cast_of_int32_saturates_like_numpy_clip_on_any_values(values, out):
    x = np.array(values, np.int32)
    out = np.dtype(out)
    expected = x.astype(out) if out.kind not in "iu" else np.clip(x, np.iinfo(out).min, np.iinfo(out).max).astype(out)
    got = CastTo(out).reference(x)
    assert got.dtype == out
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=50)
@given(st.lists(st.floats(width=32), min_size=8, max_size=8), st.sampled_from([np.float32, iron.bfloat16]),
       st.sampled_from([np.int8, np.uint8, np.int16, np.int32]))
def test_cast_of_floats_to_integers_is_numpy_rint_then_clip_on_any_values(values, dtype, out):
    x, out = np.array(values, np.float32).astype(dtype), np.dtype(out)
    info = np.iinfo(out)
    rounded = np.rint(x.astype(np.float64))
    expected = np.where(np.isnan(rounded), 0, np.clip(rounded, info.min, info.max)).astype(out)   # NaN: 0
    got = CastTo(out).reference(x)
    assert got.dtype == out
    np.testing.assert_array_equal(got, expected)


class Quantize(iron.Graph):
    def __init__(self, shift):
        self.shift = shift

    def body(self, x):
        return Requantize.step(x, shift=self.shift)


@settings(max_examples=50)
@given(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=8, max_size=8), st.integers(0, 31))
def test_requantize_is_round_half_even_then_clip_on_any_values(values, shift):
    exact = [round(v / 2**shift) for v in values]  # exact in float64; Python's round() ties to even
    got = Quantize(shift).reference(np.array(values, np.int32))
    assert got.dtype == I8
    np.testing.assert_array_equal(got, np.clip(exact, -128, 127))


def test_every_cast_pair_compiled_equals_the_reference(device):
    rng = np.random.default_rng(8)
    for dtype, out in Cast.signatures():
        x = (rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, 8, endpoint=True).astype(dtype)
             if dtype.kind in "iu" else (rng.standard_normal(8) * 300).astype(dtype))
        g = CastTo(out)
        want, got = g.reference(x), compiled_call(g, device, x)
        assert want.dtype == got.dtype == out
        np.testing.assert_array_equal(got.view(f"u{out.itemsize}"), want.view(f"u{out.itemsize}"))


# ---- errors --------------------------------------------------------------------------------------

class Uses(iron.Graph):
    """body() is the given function of the input tensors and the params w (8, 16) of `wdtype`."""

    def __init__(self, fn, wdtype=np.int8):
        self.fn, self.w = fn, iron.param(np.ones((8, 16), wdtype))

    def body(self, x):
        return self.fn(self, x)


ERRORS = [
    (lambda g, x: Cast.step(x), np.float32,
     "Cast on float32 inputs gives np.int8, np.uint8, np.int16, np.int32, iron.bfloat16: pass dtype= one of those."),
    (lambda g, x: Cast.step(x, dtype=np.float32), np.float32,
     "Cast on float32 inputs gives np.int8, np.uint8, np.int16, np.int32, iron.bfloat16, not float32: pass dtype= "
     "one of those."),
    (lambda g, x: Cast.step(x, dtype=np.int32), np.int32,
     "Cast on int32 inputs gives np.int8, np.uint8, np.int16, iron.bfloat16, np.float32, not int32: pass dtype= "
     "one of those."),
    (lambda g, x: MatVec.step(g.w, x, dtype=np.int16), np.int8,
     "MatVec on int8 inputs gives np.int8, np.int32, not int16: pass dtype= one of those."),
    (lambda g, x: MatVec.step(g.w, x), np.float32,
     "MatVec computes in one dtype, or takes uint8 x int8 into int32 or int8 x uint8 into int32, but input 0 (w) "
     "is int8 and input 1 (x) is float32: Cast.step(w, dtype=np.float32) converts w without losing a value."),
    (lambda g, x: Tanh.step(x), np.int32,
     "Tanh does not support int32: it supports bfloat16, float32; no dtype Tanh supports holds every int32 value, "
     "so any Cast would round or clamp some: pick another kernel, or Cast knowing which values change."),
    (lambda g, x: Requantize.step(x), np.int32, "Requantize needs shift=...: pass it to Requantize.step."),
    (lambda g, x: Requantize.step(x, shift=63), np.int32,
     "Requantize needs shift= an int in 0..62, not 63; got x (16,)."),
    (lambda g, x: Requantize.step(x, shift=4, scale=0.5), np.int32,
     "Requantize needs scale= an int32 multiplier (fold a fraction into scale / 2**shift), not 0.5; got x (16,)."),
    (lambda g, x: Requantize.step(x, shift=4), np.int8,
     "Requantize does not support int8: it supports int32; Cast.step(x, dtype=np.int32) converts x without losing a "
     "value."),
]


@pytest.mark.parametrize("fn, dtype, text", ERRORS, ids=[e[2][:40] for e in ERRORS])
def test_a_wrong_dtype_or_attribute_is_refused_with_the_fix(fn, dtype, text):
    with pytest.raises(KernelTypeError) as raised:
        Uses(fn).reference(np.ones(16, dtype))
    assert str(raised.value) == text


def test_bfloat16_weights_and_float32_activations_say_to_cast_the_weights_up():
    """Never the activations down: float32 to bfloat16 rounds."""
    with pytest.raises(KernelTypeError) as raised:
        Uses(lambda g, x: MatVec.step(g.w, x), iron.bfloat16).reference(np.ones(16, np.float32))
    quoted(raised.value, "MatVec", "input 0 (w) is bfloat16", "input 1 (x) is float32", "Cast.step(w, dtype=np.float32)")


class QuantizedLayer(iron.Graph):
    """int8 W (m, k) @ x into int32, plus an int32 bias, requantized to int8: one group."""

    def __init__(self, m, k):
        rng = np.random.default_rng(9)
        self.w = iron.param(rng.integers(-128, 128, (m, k), dtype=np.int8))
        self.b = iron.param(rng.integers(-1000, 1000, m, dtype=np.int32))

    def body(self, x):
        return Requantize.step(Add.step(MatVec.step(self.w, x, dtype=np.int32), self.b), shift=9)


@pytest.mark.parametrize("m, k, split", [(64, 64, False), (512, 512, True)])
def test_a_quantized_layer_is_one_group_its_epilogue_split_with_the_matrix(monkeypatch, device, m, k, split):
    """Cast and Requantize are elementwise: they join a MatVec's epilogue, and when the matrix is
    split over tiles, the int32 and int8 parts split with it, in both kernel modes."""
    g = QuantizedLayer(m, k)
    x = np.random.default_rng(10).integers(-128, 128, k, dtype=np.int8)
    want = g.reference(x)
    exact = g.w.array.astype(np.int64) @ x.astype(np.int64) + g.b.array
    np.testing.assert_array_equal(want, np.clip(np.round(exact / 512), -128, 127))
    compiled = g.compile(x=x, device=device)
    assert compiled.plan.groups == (("g0", ("MatVec#0", "Add#1", "Requantize#2")),)
    assert ("split_matrix_over_tiles" in compiled.describe()) == split
    for mode in ("numpy", "native"):
        monkeypatch.setenv("IRON_EMULATOR_KERNELS", mode)
        np.testing.assert_array_equal(compiled(x), want)
