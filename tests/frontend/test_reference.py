"""The reference interpreter: every bound of a call (a later call's index, a valid length, a
divisor in the carry) is checked before the first kernel runs, so a refused call leaves the
states as they were; its texts are the device path's; accumulating and whole-state writes."""
import numpy as np
import pytest

import iron
from iron import Carried, Scratchpad
from iron.errors import ArgumentError, IndexOutOfRange
from iron.kernels import Accumulate, Copy, Softmax
from tests.quotes import quoted


class TwoWrites(iron.Graph):
    """Writes state `a` at i, then state `b` at j (j may be out of range), and carries 10 // d."""

    def __init__(self):
        self.table = iron.weight(np.arange(4, dtype=np.int32) + 100)
        self.a = iron.state((4,), np.int32, name="a")
        self.b = iron.state((2,), np.int32, name="b")

    def body(self, *, i: Carried[np.int32], d: Carried[np.int32], j: Scratchpad[np.int32]):
        x = Copy.step(self.table[i], dtype=np.int32)
        Copy.step(x, self.a[i], dtype=np.int32)
        Copy.step(x, self.b[j], dtype=np.int32)
        return iron.carry(i=10 // d, d=d)


def test_a_bound_of_a_later_call_refuses_the_call_before_the_first_write():
    g = TwoWrites()
    assert dict(g.reference(i=1, j=0, d=5)) == {"i": 2, "d": 5}
    with pytest.raises(IndexOutOfRange) as e:
        g.reference(i=2, j=2, d=5)
    quoted(e.value, "b[j]", "j = 2", "0..1", "nothing was written", "'b'")
    np.testing.assert_array_equal(g.read("a"), [0, 101, 0, 0])
    np.testing.assert_array_equal(g.read("b"), [101, 0])


def test_a_divisor_of_zero_in_the_carry_refuses_the_call_before_the_first_write():
    g = TwoWrites()
    with pytest.raises(ArgumentError) as e:
        g.reference(i=3, j=1, d=0)
    quoted(e.value, "10 // d", "divides by zero")
    np.testing.assert_array_equal(g.read("a"), [0, 0, 0, 0])
    np.testing.assert_array_equal(g.read("b"), [0, 0])


class Attend(iron.Graph):
    """Softmax of the first n + 1 elements, accumulated into a state row."""

    def __init__(self):
        self.seen = iron.state((2, 8), np.float32, name="seen")

    def body(self, x, *, n: Scratchpad[np.int32], row: Scratchpad[np.int32]):
        p = Softmax.step(x, length=n + 1)
        Accumulate.step(p, out=self.seen[row])
        return p


LENGTH_TEXT = ("Softmax length=n + 1 with n + 1 = 9 is out of range: n + 1 must be in 1..8; nothing was "
               "written. Keep n + 1 between 1 and 8.")


def test_a_valid_length_out_of_range_is_refused_with_the_device_paths_text(monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")
    x = np.linspace(-1, 1, 8).astype(np.float32)
    g = Attend()
    g.reference(x, n=3, row=1)
    before = g.read("seen")
    for call in (g.reference, Attend()):
        with pytest.raises(IndexOutOfRange) as e:
            call(x, n=8, row=0)
        assert str(e.value) == LENGTH_TEXT
    np.testing.assert_array_equal(g.read("seen"), before)


def test_accumulate_reads_and_writes_its_state_view():
    x = np.linspace(-1, 1, 8).astype(np.float32)
    g = Attend()
    p = g.reference(x, n=3, row=1)
    g.reference(x, n=3, row=1)
    e = np.exp(x[:4] - x[:4].max())
    want = np.concatenate([e / e.sum(), np.zeros(4, np.float32)])
    np.testing.assert_allclose(p, want, rtol=1e-6)
    np.testing.assert_allclose(g.read("seen"), [np.zeros(8), 2 * want], rtol=1e-6)


class Fill(iron.Graph):
    """A Copy into a whole state (no view)."""

    def __init__(self):
        self.s = iron.state((3,), np.int16, name="s")

    def body(self, x):
        Copy.step(x, out=self.s)


def test_a_write_to_a_whole_state():
    g = Fill()
    assert g.reference(np.array([1, -2, 3], np.int16)) is None
    np.testing.assert_array_equal(g.read("s"), [1, -2, 3])


class Prefix(iron.Kernel):
    """x with the elements from `count` on zeroed; `count` may be 0..n (declared by its bounds)."""

    name = "prefix"
    attrs = {"count": None}
    scalar_attrs = ("count",)
    bounds = {"count": iron.Within(0)}

    @staticmethod
    def compute(x, count=None):
        out = x.copy()
        out[count:] = 0
        return out


class Keep(iron.Graph):
    def body(self, x, *, c: Scratchpad[np.int32]):
        return Prefix.step(x, count=c)


def test_a_user_kernels_bounded_attribute_is_checked_as_it_declares():
    x = np.arange(1, 9, dtype=np.int32)
    np.testing.assert_array_equal(Keep().reference(x, c=0), np.zeros(8, np.int32))
    np.testing.assert_array_equal(Keep().reference(x, c=8), x)
    with pytest.raises(IndexOutOfRange) as e:
        Keep().reference(x, c=9)
    quoted(e.value, "Prefix count=c", "c = 9", "0..8", "nothing was written")


class Halves(iron.Kernel):
    """A user kernel whose compute() returns half as many elements as its call gives."""

    name = "halves"

    @staticmethod
    def compute(x):
        return x[: x.shape[0] // 2]


class WriteThenFail(iron.Graph):
    def __init__(self):
        self.seen = iron.state((2, 4), np.int32, name="seen")
        self.last = iron.state((4,), np.int32, name="last")

    def body(self, x, *, row: Scratchpad[np.int32]):
        Copy.step(x, out=self.seen[row])
        Copy.step(x, out=self.last)
        return Halves.step(x)


def test_a_kernel_failing_after_writes_puts_back_what_the_call_wrote():
    g = WriteThenFail()
    g.write("seen", np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.int32))
    g.write("last", np.array([9, 9, 9, 9], np.int32))
    with pytest.raises(iron.errors.KernelTypeError) as e:
        g.reference(np.zeros(4, np.int32), row=0)
    quoted(e.value, "Halves.compute()", "(2,) int32", "(4,) int32", "result.astype(np.int32)")
    np.testing.assert_array_equal(g.read("seen"), [[1, 2, 3, 4], [5, 6, 7, 8]])
    np.testing.assert_array_equal(g.read("last"), [9, 9, 9, 9])
