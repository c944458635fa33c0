"""One rule for per-call attributes (issue 11 item 6): only an attribute its kernel declares
bounded (`bounds = {"length": Within(1)}`, Softmax's valid length) is range-checked; any other
per-call scalar attribute is accepted by reference() exactly when the compiled graph accepts it,
on npu2 and npu1. Range errors quote the user's expression whole, on every path."""
import numpy as np
import pytest

import aie_utils
import iron
from iron import Scratchpad
from iron.errors import IndexOutOfRange
from iron.kernels import Softmax
from iron.kernels.base import Within

SOURCE = """#include "iron_kernel.h"
extern "C" void shift_by_f32(const float* x, float* out, int32_t n, int32_t k) {
  for (int32_t i = 0; i < n; ++i) out[i] = x[i] + static_cast<float>(k);
}
"""


class ShiftBy(iron.Kernel):
    """out = x + k, with k a per-call value of any size: no bound declared."""

    name = "shift_by"
    dtypes = frozenset({np.dtype(np.float32)})
    attrs = {"k": 0}
    scalar_attrs = ("k",)
    c_attrs = (("k", "i32"),)
    source = SOURCE

    @staticmethod
    def compute(x, k=0):
        return x + np.float32(k)


class BoundedShift(ShiftBy):
    """The same kernel declaring k a length of its input (1..n)."""

    name = "bounded_shift"
    bounds = {"k": Within(1)}
    source = SOURCE.replace("shift_by_f32", "bounded_shift_f32")


class Shifted(iron.Graph):
    def __init__(self, kernel):
        self.kernel = kernel

    def body(self, x, *, k: Scratchpad[np.int32]):
        return self.kernel.step(x, k=k * 3)


X = np.arange(12, dtype=np.float32)


@pytest.mark.parametrize("device", ["npu2", "npu1"])
@pytest.mark.parametrize("k", [-7, 0, 20, 1000])
def test_an_undeclared_attribute_is_not_bounded_by_reference_or_device(on_emulator, device, k):
    g = Shifted(ShiftBy)
    expected = X + np.float32(3 * k)
    np.testing.assert_array_equal(g.reference(X, k=k), expected)
    with aie_utils.using_device(aie_utils.from_name(device)):
        compiled = g.compile(x=((12,), np.float32))
    np.testing.assert_array_equal(compiled(X, k=k), expected)


BOUND_TEXT = ("BoundedShift k=k * 3 with k * 3 = 15 is out of range: k * 3 must be in 1..12; nothing was "
              "written. Keep k * 3 between 1 and 12.")


@pytest.mark.parametrize("device", ["npu2", "npu1"])
def test_a_declared_bound_is_checked_alike_by_reference_and_device(on_emulator, device):
    g = Shifted(BoundedShift)
    with aie_utils.using_device(aie_utils.from_name(device)):
        compiled = g.compile(x=((12,), np.float32))
    np.testing.assert_array_equal(compiled(X, k=4), g.reference(X, k=4))
    for call in (g.reference, compiled):
        with pytest.raises(IndexOutOfRange) as e:
            call(X, k=5)
        assert str(e.value) == BOUND_TEXT


def test_softmax_declares_its_length_bounded():
    assert Softmax.bounds == {"length": Within(1, axis=-1)}
    assert ShiftBy.bounds == {}


def test_the_range_error_quotes_a_views_expression_whole(on_emulator):
    class Pick(iron.Graph):
        def __init__(self):
            self.table = iron.weight(np.arange(8, dtype=np.int32))

        def body(self, *, i: Scratchpad[np.int32]):
            return iron.kernels.Copy.step(self.table[(i + 1) * 2])

    text = ("table[(i + 1) * 2] with (i + 1) * 2 = 8 is out of range: (i + 1) * 2 must be in 0..7; "
            "nothing was written. Keep (i + 1) * 2 in range, or make 'table' larger.")
    g = Pick()
    for call in (g.reference, g.compile()):
        with pytest.raises(IndexOutOfRange) as e:
            call(i=3)
        assert str(e.value) == text
