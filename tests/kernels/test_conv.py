"""Conv2D, MaxPool2D and AvgPool2D (iron/kernels/conv.py): their C++ run natively against an
independent formula written here with Python integers or float64 (integers exactly; float32
within rtol 1e-4, bfloat16 one ulp; pooling bit for bit on every dtype) and against the kernels'
numpy reference, on fixed shapes and, with hypothesis, on any small shape, stride and padding;
designs using them compiled for npu2 and npu1 and run on the emulator in both kernel modes
against reference(), among them a ResNet bottleneck block of uint8 activations and int8 weights
checked against mlir-aie's formula for it; describe() and the picture naming them; the refusals."""
import itertools
import xml.etree.ElementTree as ET
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import iron
from iron.errors import KernelTypeError
from iron.kernels import Add, AvgPool2D, Cast, Conv2D, MaxPool2D, Requantize
from tests.runtime.test_native_kernels import (
    ALL,
    DTYPES,
    MIXED,
    REDUCTION,
    WIDER,
    call,
    expect,
    random_array,
    same_bits,
    wide,
)

pytestmark = pytest.mark.usefixtures("on_emulator")


def windows_formula(x, kh, kw, stride, padding):
    """(y, x', cells) for every output pixel, cells its window's (i, j, row, col) in window order
    with row and col in the padded image's terms (outside x on the padding), independently of conv.py."""
    h, w = x.shape[:2]
    oh, ow = (h + 2 * padding - kh) // stride + 1, (w + 2 * padding - kw) // stride + 1
    for y, x0 in itertools.product(range(oh), range(ow)):
        yield y, x0, [(i, j, y * stride + i - padding, x0 * stride + j - padding) for i in range(kh) for j in range(kw)]


def inside(x, r, c):
    return 0 <= r < x.shape[0] and 0 <= c < x.shape[1]


def conv_formula(x, w, stride, padding):
    """The convolution as nested sums of exact Python integers (or float64)."""
    kh, kw, _, k = w.shape
    oh, ow = (x.shape[0] + 2 * padding - kh) // stride + 1, (x.shape[1] + 2 * padding - kw) // stride + 1
    out = np.zeros((oh, ow, k), dtype=object if x.dtype.kind in "iu" else np.float64)
    xs, ws = wide(x), wide(w)
    for y, x0, cells in windows_formula(x, kh, kw, stride, padding):
        for i, j, r, c in cells:
            out[y, x0] += xs[r, c] @ ws[i, j] if inside(x, r, c) else 0
    return out


def conv(library, x, w, dt_out, stride, padding, symbol):
    kh, kw, _, k = w.shape
    oh, ow = (x.shape[0] + 2 * padding - kh) // stride + 1, (x.shape[1] + 2 * padding - kw) // stride + 1
    out = np.zeros((oh, ow, k), DTYPES[dt_out])
    call(library, symbol, x, w, out, *x.shape, kh, kw, oh, ow, k, stride, padding)
    return out


SHAPES = [((6, 7, 5), (3, 3, 5, 4), 1, 1), ((6, 7, 5), (1, 1, 5, 3), 1, 0), ((9, 8, 3), (3, 3, 3, 2), 2, 1),
          ((5, 5, 2), (2, 3, 2, 3), 2, 0)]
SIGNATURES = [(dt, dt, dt) for dt in ALL] + [(dt, dt, out) for dt, out in WIDER] + [(a, b, "i32") for a, b in MIXED]


@pytest.mark.parametrize("da, db, out", SIGNATURES)
@pytest.mark.parametrize("xs, ws, stride, padding", SHAPES)
def test_conv2d_in_cpp_equals_the_formula_and_the_reference(library, da, db, out, xs, ws, stride, padding):
    x, w = random_array(da, xs, seed=1), random_array(db, ws, seed=2)
    symbol = f"conv2d_{da}" if da == db == out else f"conv2d_{da}_{out}" if da == db else f"conv2d_{da}_{db}_{out}"
    got = conv(library, x, w, out, stride, padding, symbol)
    expect(got, conv_formula(x, w, stride, padding), out, rtol=REDUCTION)
    expect(got, Conv2D.reference(x, w, stride=stride, padding=padding, dtype=DTYPES[out]), out, rtol=REDUCTION)


def test_a_1x1_conv2d_is_the_matmul_of_pixels_by_channels():
    x, w = random_array("i8", (4, 5, 6)), random_array("i8", (1, 1, 6, 3), seed=3)
    got = Conv2D.reference(x, w, dtype=np.int32)
    np.testing.assert_array_equal(got.reshape(20, 3), x.reshape(20, 6).astype(np.int32) @ w[0, 0].astype(np.int32))


SIDES = st.integers(1, 6)


@settings(max_examples=60)
@given(st.tuples(SIDES, SIDES, st.integers(1, 4)), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3),
       st.integers(1, 3), st.integers(0, 2), st.sampled_from([("i8", "i8"), ("u8", "i8"), ("i8", "u8")]),
       st.integers(0, 2**32 - 1))
def test_conv2d_of_any_small_shape_stride_and_padding_is_exact(library, image, kh, kw, k, stride, padding, pair, seed):
    h, w, c = image
    padding = min(padding, kh - 1, kw - 1)
    if h + 2 * padding < kh or w + 2 * padding < kw:
        return
    da, db = pair
    x, wts = random_array(da, image, seed=seed), random_array(db, (kh, kw, c, k), seed=seed + 1)
    symbol = "conv2d_i8_i32" if da == db else f"conv2d_{da}_{db}_i32"
    got = conv(library, x, wts, "i32", stride, padding, symbol)
    np.testing.assert_array_equal(got, conv_formula(x, wts, stride, padding).astype(np.int64))
    np.testing.assert_array_equal(got, Conv2D.reference(x, wts, stride=stride, padding=padding, dtype=np.int32))


def pool_formula(x, size, stride, padding, kind):
    """Max over a window's elements inside x (padding takes no part, a NaN wins); mean over
    size * size terms, the padding's zeros counted: integers exactly, halves to even; floats
    summed in float32 from 0 in window order, then divided."""
    oh, ow = (x.shape[0] + 2 * padding - size) // stride + 1, (x.shape[1] + 2 * padding - size) // stride + 1
    out = np.zeros((oh, ow, x.shape[2]), dtype=object if x.dtype.kind in "iu" else np.float32)
    for y, x0, cells in windows_formula(x, size, size, stride, padding):
        for ch in range(x.shape[2]):
            values = [x[r, c, ch] if inside(x, r, c) else None for _, _, r, c in cells]
            if kind == "max":
                out[y, x0, ch] = max((v for v in values if v is not None), key=lambda v: (np.isnan(float(v)), float(v)))
            elif x.dtype.kind in "iu":
                out[y, x0, ch] = round(Fraction(sum(int(v) for v in values if v is not None), size * size))
            else:
                total = np.float32(0)
                for v in values:
                    total = np.float32(total + (np.float32(0) if v is None else np.float32(v)))
                out[y, x0, ch] = total / np.float32(size * size)
    return out


POOLS = [(2, 2, 0), (3, 2, 1), (3, 1, 1), (2, 1, 0)]


@pytest.mark.parametrize("dt", ALL)
@pytest.mark.parametrize("size, stride, padding", POOLS)
@pytest.mark.parametrize("kind, kernel", [("max", MaxPool2D), ("avg", AvgPool2D)])
def test_pooling_in_cpp_equals_the_formula_and_the_reference_bit_for_bit(library, dt, size, stride, padding, kind, kernel):
    x = random_array(dt, (7, 6, 3), seed=5)
    if dt in ("f32", "bf16"):
        x[1, 2, 0] = np.nan
    oh, ow = (7 + 2 * padding - size) // stride + 1, (6 + 2 * padding - size) // stride + 1
    got = np.zeros((oh, ow, 3), DTYPES[dt])
    call(library, f"{kernel.name}_{dt}", x, got, 7, 6, 3, oh, ow, size, stride, padding)
    same_bits(got, np.asarray(pool_formula(x, size, stride, padding, kind)).astype(DTYPES[dt]))
    same_bits(got, kernel.reference(x, size=size, stride=stride, padding=padding))


@settings(max_examples=60)
@given(st.tuples(SIDES, SIDES, st.integers(1, 3)), st.integers(1, 3), st.integers(1, 3), st.integers(0, 1),
       st.sampled_from(ALL), st.sampled_from([MaxPool2D, AvgPool2D]), st.integers(0, 2**32 - 1))
def test_pooling_of_any_small_shape_window_and_padding_is_bit_for_bit(library, image, size, stride, padding, dt, kernel,
                                                                     seed):
    h, w, c = image
    padding = min(padding, size - 1)
    if h + 2 * padding < size or w + 2 * padding < size:
        return
    x = random_array(dt, image, seed=seed)
    oh, ow = (h + 2 * padding - size) // stride + 1, (w + 2 * padding - size) // stride + 1
    got = np.zeros((oh, ow, c), DTYPES[dt])
    call(library, f"{kernel.name}_{dt}", x, got, h, w, c, oh, ow, size, stride, padding)
    same_bits(got, kernel.reference(x, size=size, stride=stride, padding=padding))


def test_avg_pool_of_integers_rounds_half_to_even():
    x = np.zeros((2, 10, 1), np.int16)
    x[0, :, 0] = [1, 1, 3, 3, -1, -1, -3, -3, 5, 5]   # sums 2, 6, -2, -6, 10 over four terms
    assert AvgPool2D.reference(x).reshape(-1).tolist() == [0, 2, 0, -2, 2]   # 0.5 1.5 -0.5 -1.5 2.5


# ---- compiled designs ---------------------------------------------------------------------------

@pytest.fixture(params=["npu2", "npu1"])
def device(request):
    return request.param


def run_both_modes(compiled, monkeypatch, *tensors):
    results = []
    for mode in ("numpy", "native"):
        monkeypatch.setenv("IRON_EMULATOR_KERNELS", mode)
        results.append(compiled(*tensors))
    return results


class Features(iron.Graph):
    """A 3x3 convolution of a bfloat16 image, max- and average-pooled."""

    def __init__(self, w):
        self.w = iron.param(w)

    def body(self, x):
        c = Conv2D.step(x, self.w, padding=1, dtype=np.float32)
        return MaxPool2D.step(c), AvgPool2D.step(c, size=3, stride=1, padding=1)


def test_a_bfloat16_convolution_pooled_compiles_and_runs_as_its_reference(device, monkeypatch):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 8, 4)).astype(iron.bfloat16)
    w = (rng.standard_normal((3, 3, 4, 8)) / 6).astype(iron.bfloat16)
    g = Features(w)
    pooled, mean = g.reference(x)
    c = conv_formula(x, w, 1, 1).astype(np.float32)
    np.testing.assert_allclose(pooled, c.reshape(4, 2, 4, 2, 8).max(axis=(1, 3)), rtol=1e-5, atol=1e-5)
    assert mean.shape == (8, 8, 8)
    compiled = g.compile(x=x, device=device)
    for got in run_both_modes(compiled, monkeypatch, x):
        np.testing.assert_array_equal(got[0], pooled)   # a max picks one of the convolution's sums
        np.testing.assert_allclose(got[1], mean, rtol=1e-5, atol=1e-5)
    assert "Conv2D#0" in compiled.describe()
    svg = ET.fromstring(compiled.svg())
    assert any("Conv2D#0" in (t.text or "") for t in svg.iter("{http://www.w3.org/2000/svg}text"))


class Pools(iron.Graph):
    def body(self, x):
        return MaxPool2D.step(x), AvgPool2D.step(x, size=3, stride=2, padding=1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16])
def test_integer_pooling_compiles_and_runs_exactly_as_its_reference(device, monkeypatch, dtype):
    x = random_array("u8" if dtype == np.uint8 else "i16", (10, 12, 6), seed=9)
    largest, mean = Pools().reference(x)
    assert largest.tolist() == x.reshape(5, 2, 6, 2, 6).max(axis=(1, 3)).tolist()
    assert mean.shape == (5, 6, 6) and mean.dtype == dtype
    compiled = Pools().compile(x=x, device=device)
    for got in run_both_modes(compiled, monkeypatch, x):
        np.testing.assert_array_equal(got[0], largest)
        np.testing.assert_array_equal(got[1], mean)


class Bottleneck(iron.Graph):
    """ResNet's bottleneck block as mlir-aie's programming_examples/ml/bottleneck computes it:
    int8 x, 1x1 conv to `mid` channels, ReLU, 3x3 conv (padding 1), ReLU, 1x1 conv back to the
    input's channels, the skip add of x, ReLU; activations uint8 between the convolutions (a
    Requantize to uint8 is the ReLU), weights int8, sums int32."""

    def __init__(self, w1, w2, w3, shifts=(1, 1, 1)):
        self.w1, self.w2, self.w3 = iron.param(w1), iron.param(w2), iron.param(w3)
        self.shifts = shifts

    def body(self, x):
        s1, s2, s3 = self.shifts
        h = Requantize.step(Conv2D.step(x, self.w1, dtype=np.int32), shift=s1, dtype=np.uint8)
        h = Requantize.step(Conv2D.step(h, self.w2, padding=1), shift=s2, dtype=np.uint8)
        h = Requantize.step(Conv2D.step(h, self.w3), shift=s3, dtype=np.int8)
        skip = Add.step(Cast.step(h, dtype=np.int32), Cast.step(x, dtype=np.int32))
        return Requantize.step(skip, shift=0, dtype=np.uint8)


def bottleneck_formula(x, w1, w2, w3):
    """mlir-aie's golden model (test.py) with every scale 0.5: conv1 * 0.25 then ReLU and
    round(/ 0.5) clamped to uint8, likewise conv2, conv3 rounded to int8, plus x, clamped to uint8
    (torch.round rounds half to even, as numpy's)."""
    c1 = conv_formula(x, w1, 1, 0).astype(np.float64) * 0.25
    r1 = np.clip(np.round(np.maximum(c1, 0) / 0.5), 0, 255).astype(np.uint8)
    c2 = conv_formula(r1, w2, 1, 1).astype(np.float64) * 0.25
    r2 = np.clip(np.round(np.maximum(c2, 0) / 0.5), 0, 255).astype(np.uint8)
    c3 = conv_formula(r2, w3, 1, 0).astype(np.float64) * 0.25
    same = np.clip(np.round(c3 / 0.5), -128, 127)
    return np.clip(np.round(0.5 * (same + x) / 0.5), 0, 255).astype(np.uint8)


def test_a_resnet_bottleneck_block_of_library_kernels_equals_mlir_aies_formula(device, monkeypatch):
    rng = np.random.default_rng(8)
    c, mid = 32, 8
    x = rng.integers(1, 100, (8, 8, c), dtype=np.int8)
    # mlir-aie draws its weights in 50..100; centred here so the sums neither all clamp nor vanish
    w1, w2, w3 = (rng.integers(-2, 4, s, dtype=np.int8) for s in ((1, 1, c, mid), (3, 3, mid, mid), (1, 1, mid, c)))
    g = Bottleneck(w1, w2, w3)
    want = g.reference(x)
    np.testing.assert_array_equal(want, bottleneck_formula(x, w1, w2, w3))
    assert 0.1 < (want == 0).mean() < 0.3   # the last ReLU cuts some, not most
    compiled = g.compile(x=x, device=device)
    for got in run_both_modes(compiled, monkeypatch, x):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("step, text", [
    (lambda x, w: Conv2D.step(x, w[0]), "Conv2D needs x (H, W, C) and w (KH, KW, C, K); got x (6, 6, 4), w[0] (3, 4, 2)."),
    (lambda x, w: Conv2D.step(x, w, padding=3),
     "Conv2D needs padding= an int in 0..2 (less than the window), not 3; got x (6, 6, 4), w (3, 3, 4, 2)."),
    (lambda x, w: Conv2D.step(x, w, stride=0), "Conv2D needs stride= an int >= 1, not 0; got x (6, 6, 4), w (3, 3, 4, 2)."),
    (lambda x, w: MaxPool2D.step(x[0]), "MaxPool2D needs x (H, W, C); got x[0] (6, 4)."),
    (lambda x, w: AvgPool2D.step(x, size=7), "AvgPool2D needs an image at least as large as its 7x7 window once padded; "
                                             "got x (6, 6, 4)."),
])
def test_a_wrong_shape_or_window_is_refused_naming_it(step, text):
    class Wrong(iron.Graph):
        def __init__(self):
            self.w = iron.param(np.ones((3, 3, 4, 2), np.float32))

        def body(self, x):
            return step(x, self.w)

    with pytest.raises(KernelTypeError) as raised:
        Wrong().reference(np.ones((6, 6, 4), np.float32))
    assert str(raised.value) == text
