"""The elementwise, reduction, activation and norm families as a user meets them: graphs calling
them (Python numbers and per-call values as operands, `Mul.step(x, 3)`, `Greater.step(x, t)`),
compiled for npu2 and npu1 and run on the emulator, with the kernels' numpy semantics and (npu2)
their C++ built for the host, against reference() (integers exactly, float32 to 1e-6, bfloat16
to one ulp); reference() against numpy formulas; one streamed size per family; the errors a wrong
constant gets; describe() and the picture naming the calls as written.
"""
import ml_dtypes
import numpy as np
import pytest

import iron
from iron import Scratchpad
from iron.errors import KernelTypeError
from iron.ir import describe
from iron.kernels import (
    GELU,
    Add,
    Axpy,
    BitwiseAnd,
    BitwiseNot,
    BitwiseOr,
    BitwiseXor,
    Cast,
    Equal,
    GELUTanh,
    Greater,
    GreaterEqual,
    LayerNorm,
    LayerNormAffine,
    LeakyReLU,
    Less,
    Max,
    Maximum,
    Min,
    Minimum,
    Mod,
    Mul,
    NotEqual,
    Scale,
    ShiftLeft,
    ShiftRight,
    Sigmoid,
    Sub,
    Sum,
    Tanh,
    Where,
)
from iron.plan.rules import Rule
from tests.quotes import quoted

BF16 = np.dtype(ml_dtypes.bfloat16)
INTEGERS = [np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.int32)]
FLOATS = [np.dtype(np.float32), BF16]
RUNS = [("npu2", "numpy"), ("npu2", "native"), ("npu1", "numpy")]   # device, IRON_EMULATOR_KERNELS

pytestmark = pytest.mark.usefixtures("on_emulator")


def run_compiled(monkeypatch, graph, device, kernels, *tensors, **values):
    monkeypatch.setenv("IRON_EMULATOR_KERNELS", kernels)
    return graph.compile(*tensors, device=device)(*tensors, **values)


def assert_close(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                   rtol=2**-7 if want.dtype == BF16 else 1e-6, atol=1e-6)


class IntegerOps(iron.Graph):
    """Every integer elementwise kernel, numbers and a per-call threshold among the operands."""

    def body(self, a, b, *, t: Scratchpad[np.int32]):
        picked = Where.step(Greater.step(a, t), Maximum.step(a, b), Minimum.step(a, b))
        bits = BitwiseXor.step(BitwiseOr.step(BitwiseAnd.step(a, b), 3), BitwiseNot.step(b))
        shifted = Sub.step(ShiftRight.step(ShiftLeft.step(a, 2), b), Mod.step(a, 7))
        compared = Add.step(Add.step(Less.step(a, b), GreaterEqual.step(a, 5)),
                            Add.step(Equal.step(a, b), NotEqual.step(9, b)))
        return picked, bits, shifted, compared, Mul.step(Scale.step(a, factor=0.75), 3)


def integer_inputs(dtype):
    rng = np.random.default_rng(1)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, 32, endpoint=True).astype(dtype)
    b = rng.integers(0, 9, 32).astype(dtype)   # shift counts and a few ties with a
    b[:4] = a[:4]
    return a, b


def wrap(values, dtype):
    return np.asarray(values, np.int64).astype(dtype)


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_integer_kernels_reference_is_the_numpy_formula(dtype):
    a, b = integer_inputs(dtype)
    picked, bits, shifted, compared, scaled = IntegerOps().reference(a, b, t=3)
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    np.testing.assert_array_equal(picked, np.where(a64 > 3, np.maximum(a64, b64), np.minimum(a64, b64)))
    np.testing.assert_array_equal(bits, wrap(((a64 & b64) | 3) ^ ~b64, dtype))
    counts = np.clip(b64, 0, 63)   # a count outside 0..63 counts as its nearest end
    np.testing.assert_array_equal(shifted, wrap((wrap(a64 << 2, dtype).astype(np.int64) >> counts) - a64 % 7, dtype))
    truths = [a64 < b64, a64 >= 5, a64 == b64, b64 != 9]
    np.testing.assert_array_equal(compared, sum(t.astype(np.int64) for t in truths))
    info = np.iinfo(dtype)
    np.testing.assert_array_equal(scaled, wrap(np.clip(np.rint(a64 * 0.75), info.min, info.max) * 3, dtype))


@pytest.mark.parametrize("device, kernels", RUNS)
@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_integer_kernels_compiled_equal_the_reference(monkeypatch, device, kernels, dtype):
    a, b = integer_inputs(dtype)
    graph = IntegerOps()
    for t in (3, -100):
        for got, want in zip(run_compiled(monkeypatch, graph, device, kernels, a, b, t=t), graph.reference(a, b, t=t)):
            assert_close(got, want)


class FloatOps(iron.Graph):
    """Every float activation, Axpy, and numbers as operands."""

    def body(self, a, b):
        chosen = Where.step(Greater.step(a, 0.5), Mul.step(a, 2), Sub.step(1.5, b))
        return (GELU.step(a), GELUTanh.step(b), LeakyReLU.step(Axpy.step(a, b, alpha=0.5), alpha=0.1),
                Sigmoid.step(Tanh.step(a)), chosen)


def float_inputs(dtype):
    rng = np.random.default_rng(2)
    return tuple((2 * rng.standard_normal(32)).astype(np.float32).astype(dtype) for _ in range(2))


def test_float_kernels_reference_is_the_numpy_formula():
    a, b = float_inputs(np.float32)
    gelu, gelu_tanh, leaky, squashed, chosen = FloatOps().reference(a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(gelu, [v / 2 * (1 + __import__("math").erf(v / 2**0.5)) for v in a64], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gelu_tanh, b64 / 2 * (1 + np.tanh((2 / np.pi) ** 0.5 * (b64 + 0.044715 * b64**3))),
                               rtol=1e-6, atol=1e-7)
    axpy = 0.5 * a64 + b64
    np.testing.assert_allclose(leaky, np.where(axpy >= 0, axpy, 0.1 * axpy), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(squashed, 1 / (1 + np.exp(-np.tanh(a64))), rtol=1e-6)
    np.testing.assert_array_equal(chosen, np.where(a > 0.5, a * 2, np.float32(1.5) - b))


@pytest.mark.parametrize("device, kernels", RUNS)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_kernels_compiled_equal_the_reference(monkeypatch, device, kernels, dtype):
    a, b = float_inputs(dtype)
    graph = FloatOps()
    for got, want in zip(run_compiled(monkeypatch, graph, device, kernels, a, b), graph.reference(a, b)):
        assert_close(got, want)


class Reductions(iron.Graph):
    """Max, Min and Sum of each row, and of a whole tensor."""

    def __init__(self, wider=None):
        self.wider = wider

    def body(self, x, v):
        return Max.step(x), Min.step(x), Sum.step(x, dtype=self.wider), Sum.step(v)


WIDER = {np.dtype(np.int8): np.int32, np.dtype(np.uint8): np.int32, np.dtype(np.int16): np.int32, BF16: np.float32}


def reduction_inputs(dtype):
    rng = np.random.default_rng(3)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return (rng.integers(info.min, info.max, (4, 24), endpoint=True).astype(dtype),
                rng.integers(info.min, info.max, 64, endpoint=True).astype(dtype))
    return (rng.standard_normal((4, 24)).astype(np.float32).astype(dtype),
            rng.standard_normal(64).astype(np.float32).astype(dtype))


@pytest.mark.parametrize("device, kernels", RUNS)
@pytest.mark.parametrize("dtype", INTEGERS + FLOATS, ids=str)
def test_reductions_compiled_equal_the_reference(monkeypatch, device, kernels, dtype):
    x, v = reduction_inputs(dtype)
    graph = Reductions(WIDER.get(dtype))
    want = graph.reference(x, v)
    if dtype.kind in "iu":
        assert want[0].tolist() == x.max(axis=1).tolist() and want[1].tolist() == x.min(axis=1).tolist()
        assert want[2].tolist() == wrap(x.astype(np.int64).sum(axis=1), want[2].dtype).tolist()
        assert int(want[3]) == int(wrap(v.astype(np.int64).sum(), dtype))
    for got, expected in zip(run_compiled(monkeypatch, graph, device, kernels, x, v), want):
        assert_close(got, expected)


class Norms(iron.Graph):
    def __init__(self, w, b):
        self.w, self.b = iron.param(w), iron.param(b)

    def body(self, x):
        return LayerNorm.step(x), LayerNormAffine.step(x, self.w, self.b, eps=1e-3), LayerNorm.step(x[0], length=20)


@pytest.mark.parametrize("device, kernels", RUNS)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_layer_norm_compiled_equals_the_reference_and_numpy(monkeypatch, device, kernels, dtype):
    rng = np.random.default_rng(4)
    x, w, b = (rng.standard_normal(s).astype(np.float32).astype(dtype) for s in ((4, 32), 32, 32))
    graph = Norms(w, b)
    want = graph.reference(x)
    x64 = x.astype(np.float64)
    normal = (x64 - x64.mean(axis=1, keepdims=True)) / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5)
    tolerance = 2e-2 if dtype == BF16 else 1e-5
    np.testing.assert_allclose(want[0].astype(np.float64), normal, rtol=tolerance, atol=tolerance)
    head = x64[0, :20]
    np.testing.assert_allclose(want[2][:20].astype(np.float64), (head - head.mean()) / np.sqrt(head.var() + 1e-5),
                               rtol=tolerance, atol=tolerance)
    assert not want[2][20:].astype(np.float32).any()
    for got, expected in zip(run_compiled(monkeypatch, graph, device, kernels, x), want):
        assert_close(got, expected)


class ColorThreshold(iron.Graph):
    """mlir-aie's color threshold (binary, 255 above the per-call level, else 0) on a uint8 image."""

    def body(self, image, *, level: Scratchpad[np.int32]):
        return Mul.step(Greater.step(image, level), 255)


@pytest.mark.parametrize("device", ["npu2", "npu1"])
def test_an_elementwise_call_with_a_per_call_value_streams_over_many_tiles(device):
    image = (np.arange(512 * 512) % 251).astype(np.uint8).reshape(512, 512)
    graph = ColorThreshold()
    compiled = graph.compile(image, device=device)
    cores = {"npu2": 32, "npu1": 16}[device]
    rule = next(r for r in compiled.plan.rules if r[0] is Rule.STREAM_ELEMENTWISE)
    assert f"over {cores} tiles" in rule[1] and "level a per-call word every core receives" in rule[1]
    for level in (100, 7, 250):
        got = compiled(image, level=level)
        np.testing.assert_array_equal(got, np.where(image > level, 255, 0).astype(np.uint8))
        np.testing.assert_array_equal(got, graph.reference(image, level=level))


class RowSums(iron.Graph):
    def body(self, x):
        return Sum.step(x), LayerNorm.step(x)


@pytest.mark.parametrize("device", ["npu2", "npu1"])
def test_sum_and_layer_norm_stream_a_large_batch_of_rows(device):
    x = np.random.default_rng(5).standard_normal((256, 512)).astype(np.float32)
    graph = RowSums()
    compiled = graph.compile(x, device=device)
    assert [r[0] for r in compiled.plan.rules].count(Rule.STREAM_ROW_BLOCKS) == 2
    for got, want in zip(compiled(x), graph.reference(x)):
        assert_close(got, want)


class Scaled(iron.Graph):
    def __init__(self, constant, first=False):
        self.constant, self.first = constant, first

    def body(self, x):
        return Sub.step(self.constant, x) if self.first else Mul.step(x, self.constant)


def test_a_constant_takes_the_tensors_dtype():
    x = np.array([1, 100, -100], np.int8)
    np.testing.assert_array_equal(Scaled(3).reference(x), np.array([3, 44, -44], np.int8))   # wraps as int8 does
    np.testing.assert_array_equal(Scaled(1, first=True).reference(x), np.array([0, -99, 101], np.int8))
    bf = np.array([1, 2], BF16)
    assert Scaled(0.1).reference(bf).tolist() == (bf.astype(np.float32) * np.float32(BF16.type(0.1))).astype(BF16).tolist()


@pytest.mark.parametrize("constant, text", [
    (1.5, "Mul.step's constant operand 1.5 is not a int8 value, but the tensor it meets is int8: pass an integer in "
          "-128..127 (a constant takes the tensor's dtype)."),
    (300, "Mul.step's constant operand 300 is not a int8 value, but the tensor it meets is int8: pass an integer in "
          "-128..127 (a constant takes the tensor's dtype)."),
])
def test_a_constant_outside_the_tensors_dtype_is_refused(constant, text):
    with pytest.raises(KernelTypeError) as raised:
        Scaled(constant).reference(np.ones(4, np.int8))
    assert str(raised.value) == text


class FloatThreshold(iron.Graph):
    def body(self, x, *, t: Scratchpad[np.int32]):
        return Greater.step(x, t)


def test_a_per_call_constant_meets_integer_tensors_only():
    with pytest.raises(KernelTypeError) as raised:
        FloatThreshold().reference(np.ones(4, np.float32), t=1)
    quoted(raised.value, "Greater.step", "constant operand t", "int32", "float32")


class Written(iron.Graph):
    def body(self, x, *, t: Scratchpad[np.int32]):
        return Sub.step(2, Mul.step(Greater.step(x, t), 255)), Add.step(Cast.step(x, dtype=np.float32), 1.5)


def test_describe_and_the_picture_name_the_calls_as_written():
    program = Written().trace(x=((16,), np.int16))
    assert [describe(c) for c in program.calls] == [
        "Greater(x, t)", "Mul(Greater(x, t), 255)", "Sub(2, Mul(Greater(x, t), 255))", "Cast(x)", "Add(Cast(x), 1.5)"]
    compiled = ColorThreshold().compile(np.zeros((16, 16), np.uint8), device="npu2")
    assert ("g0", ("Greater#0", "Mul#1")) in compiled.plan.groups
    assert "g0: Greater#0, Mul#1" in compiled.describe()
    assert "<title>tile_0_2 (group g0: Greater#0, Mul#1)" in compiled.svg()


class Reduced(iron.Graph):
    def __init__(self, kernel):
        self.kernel = kernel

    def body(self, x):
        return self.kernel.step(x)


@pytest.mark.parametrize("kernel", [Max, Min, Sum], ids=lambda k: k.__name__)
def test_a_reduction_of_three_axes_is_refused_naming_the_kernel(kernel):
    with pytest.raises(KernelTypeError) as raised:
        Reduced(kernel).reference(np.ones((2, 2, 2), np.float32))
    assert str(raised.value) == f"{kernel.__name__} needs x (n,) or (rows, n); got x (2, 2, 2)."
