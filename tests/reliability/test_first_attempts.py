"""First attempts whose message misled or was missing (issue 25 items 5, 13, 14): a state
returned whole says its view works; bfloat16 NaN through a kernel that rounds once prints no
numpy warning; a user kernel whose declarations disagree, or whose C source lacks the symbol a
call needs, is refused before anything runs."""
import warnings

import ml_dtypes
import numpy as np
import pytest

import iron
from iron.errors import CarryError, KernelTypeError
from iron.kernels import Add, Cast, ReLU, library
from iron.kernels.base import c_functions
from tests.quotes import quoted

BF16 = ml_dtypes.bfloat16


class Sums(iron.Graph):
    def __init__(self):
        self.out = iron.state((4,), np.int32)
        self.history = [iron.state((4,), np.int32, name="older")]

    def body(self, x):
        Add.step(x, self.out, out=self.out)
        return self.out


class SumsOlder(Sums):
    def body(self, x):
        Add.step(x, self.history[0], out=self.history[0])
        return self.history[0]


class SumsView(Sums):
    def body(self, x):
        Add.step(x, self.out, out=self.out)
        return self.out[:]


@pytest.mark.parametrize("graph, name, view", [(Sums, "out", "self.out[:]"), (SumsOlder, "older", "self.history[0][:]")])
def test_returning_a_state_says_its_view_works(graph, name, view, trail, unchanged):
    x = np.arange(4, dtype=np.int32)
    with unchanged(trail), pytest.raises(CarryError) as raised:
        graph().reference(x)
    quoted(raised.value, f"{graph.__name__}.body", f"state '{name}'", "position 0", f"`{view}`")
    with pytest.raises(CarryError, match=f"`{view.replace('[', '.').replace(']', '.')}`"):
        graph()(x)


def test_the_view_the_message_names_returns_the_state_after_the_writes():
    x = np.arange(4, dtype=np.int32)
    g = SumsView()
    np.testing.assert_array_equal(g.reference(x), x)
    np.testing.assert_array_equal(g.reference(x), 2 * x)
    np.testing.assert_array_equal(g(x), x)
    np.testing.assert_array_equal(g(x), 2 * x)


class Relu(iron.Graph):
    def body(self, x):
        return ReLU.step(x)


# Quiet and signalling NaNs of both signs, and numbers: float32 -> bfloat16 rounding of a
# signalling NaN is what made numpy warn.
NAN_BITS = np.array([0x7F81, 0xFF81, 0x7FC0, 0xFFC0, 0x7FC1, 0xBF80, 0x4000, 0x0000], np.uint16)


def test_relu_over_bfloat16_nans_prints_no_numpy_warning_and_keeps_them_nan():
    x = NAN_BITS.view(BF16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got_reference = Relu().reference(x)
        got_device = Relu()(x)
    expected = np.maximum(x.astype(np.float32), np.float32(0))
    for got in (got_reference, got_device):
        assert got.dtype == BF16
        assert np.isnan(got[:5].astype(np.float32)).all()
        np.testing.assert_array_equal(got[5:].astype(np.float32), expected[5:])
    np.testing.assert_array_equal(got_reference.view(np.uint16), got_device.view(np.uint16))


class Rounded(iron.Graph):
    def body(self, x):
        return Cast.step(x, dtype=iron.bfloat16)


def test_cast_of_float32_signalling_nans_to_bfloat16_prints_no_numpy_warning():
    x = np.array([0x7F800001, 0xFF800001, 0x7FC00000, 0x3F800000], np.uint32).view(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [Rounded().reference(x), Rounded()(x)]
    for result in got:
        assert result.dtype == BF16
        assert np.isnan(result[:3].astype(np.float32)).all()
        assert result[3] == 1


# ---- item 5: out_shape and the C ABI agree, or the kernel is refused where traced -----------------


class Total(iron.Kernel):
    """The sum of x as out_shape () says, with the default (elementwise) sizes and abi_shapes: the
    C call would see one element of x."""

    name = "total_default_abi"

    @classmethod
    def out_shape(cls, shapes, **attrs):
        return ()

    @staticmethod
    def compute(x):
        return np.asarray(x.sum(dtype=x.dtype))


class TotalFlat(Total):
    """The same sum with its C ABI declared: x (n,) in, one element (1,) out."""

    name = "total_flat_abi"

    @classmethod
    def sizes(cls, shapes, out_shape):
        return (shapes[0][0],)

    @classmethod
    def abi_shapes(cls, sizes):
        return [(sizes[0],)], (1,)


class TotalAsOne(TotalFlat):
    """compute() gives (1,) where out_shape says (): the same one element."""

    name = "total_as_one"

    @staticmethod
    def compute(x):
        return np.asarray([x.sum(dtype=x.dtype)])


def summing(kernel):
    return type(f"Sum{kernel.__name__}", (iron.Graph,), {"body": lambda self, x: kernel.step(x)})


def test_a_kernel_whose_c_abi_misses_elements_is_refused_where_traced_on_every_path(trail, unchanged):
    graph, x = summing(Total)(), np.arange(8, dtype=np.int32)
    refusal = (
        "Total's declarations disagree: for inputs (8,), out_shape gives (), sizes() gives (1,) and abi_shapes() "
        "makes input 0 of the C call (1,), 1 elements where the call's has 8. Define sizes() and abi_shapes() so "
        "the C call sees every element (the defaults are an elementwise kernel's: each input and the output of "
        "the output's element count)."
    )
    for path in (graph.reference, graph, lambda x: graph.compile(((8,), np.int32))):
        with unchanged(trail), pytest.raises(KernelTypeError) as raised:
            path(x)
        assert str(raised.value) == refusal


@pytest.mark.parametrize("kernel", [TotalFlat, TotalAsOne])
def test_a_one_element_result_declared_as_an_empty_shape_is_the_same_on_every_path(kernel):
    x = np.arange(8, dtype=np.int32)
    got = [summing(kernel)().reference(x), summing(kernel)()(x)]
    for result in got:
        assert result.shape == () and result == 28


# ---- item 13: a user kernel's C source declares the function each call needs ---------------------


SOURCES = {
    "misnamed": ('extern "C" void tripel_it_i32(const int32_t* x, int32_t* y, int32_t n) {}\n', "'tripel_it_i32'"),
    "none": ("void triple_c_i32(const int32_t* x, int32_t* y, int32_t n) {}\n", "none"),
    "commented out": ('// extern "C" void triple_c_i32(const int32_t* x, int32_t* y, int32_t n);\n'
                      'extern "C" { int helper(int (*f)(int)); }\n', "'helper'"),
    "a macro for other dtypes": ('#define TRIPLE(T) extern "C" void other_##T(const T* x, T* y, int32_t n) {}\n'
                                 "TRIPLE(int32_t)\n", "'other_##T'"),
}


def tripling(source):
    kernel = type("Triple", (iron.Kernel,), {
        "name": "triple_c", "source": source, "compute": staticmethod(lambda x: x * np.int32(3))})
    return type("Uses", (iron.Graph,), {"body": lambda self, x: kernel.step(x)})()


@pytest.mark.parametrize("case", list(SOURCES))
def test_a_user_kernel_whose_source_lacks_the_called_c_function_is_refused_at_compile(case, trail, unchanged):
    source, declared = SOURCES[case]
    graph, x = tripling(source), np.arange(8, dtype=np.int32)
    np.testing.assert_array_equal(graph.reference(x), 3 * x)   # numpy knows no C
    for path in (lambda: graph.compile(((8,), np.int32)), lambda: graph(x)):
        with unchanged(trail), pytest.raises(KernelTypeError) as raised:
            path()
        quoted(raised.value, "Triple", "'triple_c_i32'", "Uses's Triple#0", "int32", f"it declares {declared}",
               'extern "C" void triple_c_i32(...)')


@pytest.mark.parametrize("source", [
    'extern "C" void triple_c_i32(const int32_t* x, int32_t* y, int32_t n) {}\n',
    'extern "C" {\nvoid triple_c_i32(const int32_t* x, int32_t* y, int32_t n) { for (;;) { break; } }\n}\n',
    '#define TRIPLE(T, S) \\\n  extern "C" void triple_c_##S(const T* x, T* y, int32_t n) {}\nTRIPLE(int32_t, i32)\n',
])
def test_a_user_kernel_declaring_its_c_function_compiles_and_runs(source):
    graph, x = tripling(source), np.arange(8, dtype=np.int32)
    np.testing.assert_array_equal(graph(x), 3 * x)


LIBRARY = sorted((k for k in vars(library).values() if isinstance(k, type) and issubclass(k, iron.Kernel) and k.name),
                 key=lambda k: k.__name__)


@pytest.mark.parametrize("kernel", LIBRARY, ids=lambda k: k.__name__)
def test_every_library_kernel_source_declares_each_of_its_c_functions_as_the_check_reads_them(kernel):
    found = c_functions(kernel.source_text()[1])
    for dtype, out in kernel.signatures():
        assert any(p.fullmatch(kernel.symbol(dtype, out)) for p in found.values()), (kernel.symbol(dtype, out), found)
