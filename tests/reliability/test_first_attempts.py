"""First attempts whose message misled or was missing (issue 25 items 5, 13, 14): a state
returned whole says its view works; bfloat16 NaN through a kernel that rounds once prints no
numpy warning; a user kernel whose declarations disagree, or whose C source lacks the symbol a
call needs, is refused before anything runs."""
import warnings

import ml_dtypes
import numpy as np
import pytest

import iron
from iron.errors import CarryError
from iron.kernels import Add, Cast, ReLU

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
    assert str(raised.value) == (
        f"{graph.__name__}.body returned state '{name}' at position 0: body() returns tensor handles and, last, "
        f"iron.carry(...). Return a view of it, `{view}`, which reads it after the body's writes."
    )
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
