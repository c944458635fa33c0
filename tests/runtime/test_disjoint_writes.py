"""Writes that cannot overlap are allowed (issue 11 item 3): the hazard check reasons about the
regions of a state that calls touch (static slices, rows, column blocks); two unordered writes to
disjoint regions are accepted and both land, on npu2 and npu1, equal to the reference and to
numpy; overlapping or possibly overlapping writes (per-call indices) keep the WriteHazard text.
Concat joins tensors along an axis, in the reference and in both emulator kernel modes."""
import shutil

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aie_utils
import iron
from iron import Scratchpad
from iron.errors import KernelTypeError, WriteHazard
from iron.kernels import Add, Concat, Copy
from tests.quotes import quoted

DEVICES = ["npu2", "npu1"]


@pytest.fixture(autouse=True, scope="module")
def quiet_emulator():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IRON_BACKEND", "emulator")
        patch.setenv("IRON_QUIET", "1")
        yield


def on(device: str):
    return aie_utils.using_device(aie_utils.from_name(device))


class Halves(iron.Graph):
    """Two unrelated writes into disjoint parts of each state: halves, rows, column blocks."""

    def __init__(self):
        self.flat = iron.state((8,), np.int32, name="flat")
        self.rows = iron.state((3, 4), np.int32, name="rows")
        self.cols = iron.state((4, 8), np.int32, name="cols")

    def body(self, a, b, m):
        Copy.step(a, out=self.flat[0:4])
        Copy.step(b, out=self.flat[4:8])
        Copy.step(a, out=self.rows[0])
        Copy.step(b, out=self.rows[2])
        Add.step(a, b, out=self.rows[1])
        Copy.step(m, out=self.cols[:, 0:4])
        Copy.step(m, out=self.cols[:, 4:8])
        return Add.step(self.flat[2:6], self.rows[1])


def halves_numpy(a, b, m):
    flat, rows, cols = np.concatenate([a, b]), np.stack([a, a + b, b]), np.concatenate([m, m], axis=1)
    return flat[2:6] + rows[1], flat, rows, cols


@pytest.mark.parametrize("device", DEVICES)
def test_disjoint_writes_are_accepted_and_all_land(device):
    a, b = np.arange(4, dtype=np.int32), np.arange(10, 14, dtype=np.int32)
    m = np.arange(16, dtype=np.int32).reshape(4, 4)
    out, flat, rows, cols = halves_numpy(a, b, m)
    g = Halves()
    np.testing.assert_array_equal(g.reference(a, b, m), out)
    with on(device):
        compiled = Halves().compile(a=((4,), np.int32), b=((4,), np.int32), m=((4, 4), np.int32))
    np.testing.assert_array_equal(compiled(a, b, m), out)
    for name, want in (("flat", flat), ("rows", rows), ("cols", cols)):
        np.testing.assert_array_equal(g.read(name), want)
        np.testing.assert_array_equal(compiled.read(name), want)


class Overlapping(iron.Graph):
    def __init__(self, first, second):
        self.st = iron.state((8,), np.int32, name="st")
        self.first, self.second = first, second

    def body(self, a, b, *, i: Scratchpad[np.int32], j: Scratchpad[np.int32]):
        Copy.step(a, out=self.first(self.st, i))
        Copy.step(b, out=self.second(self.st, j))


BOTH_WRITE = ("Copy#0 and Copy#1 in Overlapping.body both write state 'st' and nothing orders them: the "
              "device may run them in either order. Make Copy#1 use a result of Copy#0, or write different states.")


@pytest.mark.parametrize("first, second, n", [
    (lambda s, i: s[0:5], lambda s, j: s[3:8], 5),        # static slices that share st[3:5]
    (lambda s, i: s[i], lambda s, j: s[j], ()),            # two per-call indices may meet
    (lambda s, i: s[i], lambda s, j: s[5], ()),            # a per-call index may reach st[5]
], ids=["slices", "two-indices", "index-and-row"])
def test_writes_that_may_overlap_keep_the_hazard_text(first, second, n):
    x = np.zeros(n, np.int32)
    with pytest.raises(WriteHazard) as e:
        Overlapping(first, second).reference(x, x, i=0, j=1)
    assert str(e.value) == BOTH_WRITE


def test_a_read_then_a_disjoint_overwrite_is_accepted_an_overlapping_one_refused():
    class ReadThenWrite(iron.Graph):
        def __init__(self, written):
            self.st = iron.state((8,), np.int32, name="st")
            self.written = written

        def body(self, a):
            y = Copy.step(self.st[0:4])
            Copy.step(a, out=self.st[self.written:self.written + 4])
            return y

    a = np.arange(4, dtype=np.int32)
    np.testing.assert_array_equal(ReadThenWrite(4).reference(a), np.zeros(4, np.int32))
    with pytest.raises(WriteHazard) as e:
        ReadThenWrite(2).reference(a)
    quoted(e.value, "Copy#0", "ReadThenWrite.body", "state 'st'", "Copy#1", "Copy#0's result in Copy#1")


def test_writes_through_different_reshapes_are_compared_element_by_element():
    class Reframed(iron.Graph):
        def __init__(self, second):
            self.st = iron.state((8,), np.int32, name="st")
            self.second = second

        def body(self, a):
            Copy.step(a, out=self.st.reshape(2, 4)[0])
            Copy.step(a, out=self.second(self.st))

    a = np.arange(1, 5, dtype=np.int32)
    g = Reframed(lambda s: s[4:8])
    g.reference(a)
    np.testing.assert_array_equal(g.read("st"), np.concatenate([a, a]))
    with pytest.raises(WriteHazard):
        Reframed(lambda s: s.reshape(4, 2)[1:3].reshape(4)).reference(a)


# ---- the region rule on random slices -------------------------------------------------------------

SHAPE = (4, 8)


@st.composite
def part(draw):
    """A static view of a (4, 8) state: a row or a slice on axis 0, a slice on axis 1 (even
    bounds, whole words of int32 either way)."""
    r0 = draw(st.integers(0, 3))
    row = r0 if draw(st.booleans()) else slice(r0, draw(st.integers(r0 + 1, 4)))
    c0 = draw(st.integers(0, 7))
    return row, slice(c0, draw(st.integers(c0 + 1, 8)))


def mask(index) -> np.ndarray:
    m = np.zeros(SHAPE, bool)
    m[index] = True
    return m


class TwoParts(iron.Graph):
    def __init__(self, first, second):
        self.st = iron.state(SHAPE, np.int32, name="st")
        self.first, self.second = first, second

    def body(self, a, b):
        Copy.step(a, out=self.st[self.first])
        Copy.step(b, out=self.st[self.second])


@settings(max_examples=40)
@given(part(), part())
def test_random_writes_are_accepted_exactly_when_disjoint_and_then_equal_numpy(first, second):
    want = np.zeros(SHAPE, np.int32)
    a = np.arange(want[first].size, dtype=np.int32).reshape(want[first].shape) + 1
    b = np.arange(want[second].size, dtype=np.int32).reshape(want[second].shape) + 100
    g = TwoParts(first, second)
    if (mask(first) & mask(second)).any():
        with pytest.raises(WriteHazard):
            g.reference(a, b)
        return
    want[first], want[second] = a, b
    g.reference(a, b)
    np.testing.assert_array_equal(g.read("st"), want)
    with aie_utils.using_device(aie_utils.from_name("npu2")):
        compiled = TwoParts(first, second).compile(a=(a.shape, np.int32), b=(b.shape, np.int32))
    compiled(a, b)
    np.testing.assert_array_equal(compiled.read("st"), want)


# ---- Concat ---------------------------------------------------------------------------------------

class Joined(iron.Graph):
    def __init__(self, axis):
        self.axis = axis
        self.st = iron.state((2, 3, 4), np.int32, name="st")

    def body(self, a, b, c):
        return Concat.step(a, b, axis=self.axis), iron.concat(a, b, c, axis=self.axis)


DTYPES = [np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.int32, np.float32)] + [np.dtype(ml_dtypes.bfloat16)]


@pytest.mark.skipif(shutil.which("g++") is None, reason="native kernels need the host C++ compiler g++")
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_concat_equals_numpy_in_reference_and_both_kernel_modes(monkeypatch, dtype, axis):
    rng = np.random.default_rng(5)
    a, b, c = (rng.integers(-100, 100, (2, 4, 6)).astype(dtype) for _ in range(3))
    want = (np.concatenate([a, b], axis=axis), np.concatenate([a, b, c], axis=axis))
    for got in [Joined(axis).reference(a, b, c)] + [
            (monkeypatch.setenv("IRON_EMULATOR_KERNELS", mode), Joined(axis)(a, b, c))[1] for mode in ("numpy", "native")]:
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g.view(f"u{g.itemsize}"), w.view(f"u{w.itemsize}"))


def test_concat_refuses_shapes_that_differ_off_its_axis():
    class Bad(iron.Graph):
        def body(self, a, b):
            return Concat.step(a, b, axis=1)

    x, y = np.zeros((2, 3), np.float32), np.zeros((3, 3), np.float32)
    with pytest.raises(KernelTypeError) as e:
        Bad().reference(x, y)
    quoted(e.value, "Concat", "axis 1", "a (2, 3), b (3, 3)")


def test_iron_concat_needs_two_tensors():
    class One(iron.Graph):
        def body(self, a):
            return iron.concat(a)

    with pytest.raises(KernelTypeError) as e:
        One().reference(np.zeros(4, np.float32))
    quoted(e.value, "iron.concat", "two or more", "got 1")
