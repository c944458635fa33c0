"""Views of computed tensors and slices at a per-call offset (issue 11 items 2 and 4): a kernel's
result sliced along any axis, indexed by row and reshaped inside the call that computes it, used
as a later operand and written into a state (a KV cache row from a projection's slice);
`cache[pos:pos + k]` read and written with a per-call or carried `pos`, bounds-checked alike by
the reference, the host-driven compiled call (npu2, npu1) and the device loop (npu2). Compiled
results equal the reference and numpy."""
import shutil

import numpy as np
import pytest

import aie_utils
import iron
from iron import Carried, Scratchpad
from iron.errors import IndexOutOfRange, KernelTypeError, TracedValueError
from iron.kernels import Add, Copy, MatMul, MatVec, ReLU, Softmax
from iron.plan.rules import Rule
from tests.quotes import quoted

DEVICES = ["npu2", "npu1"]
W = (np.arange(64, dtype=np.float32).reshape(16, 4) - 30) / 8


def compiled(graph, device, **specs):
    with aie_utils.using_device(aie_utils.from_name(device)):
        return graph.compile(**specs)


class Projection(iron.Graph):
    """A (16,) projection viewed every way: halves, a row of its (4, 4) reshape, a column block
    (not contiguous: the compiler copies it), a KV cache row from its slice."""

    def __init__(self):
        self.w = iron.param(W)
        self.kcache = iron.state((6, 8), np.float32, name="kcache")

    def body(self, x, *, pos: Scratchpad[np.int32]):
        y = MatVec.step(self.w, x)
        m = y.reshape(4, 4)
        Copy.step(y[8:], out=self.kcache[pos])
        return (Add.step(y[:8], y[8:]), ReLU.step(m), Copy.step(m[2]), Copy.step(m[:, 1:3]),
                Add.step(m[1:3].reshape(8), y[0:8]))


def projection_numpy(x):
    y = W @ x
    m = y.reshape(4, 4)
    return [y[:8] + y[8:], np.maximum(m, 0), m[2], m[:, 1:3], m[1:3].reshape(8) + y[0:8]], y[8:]


X = np.array([1, -2, 3, -4], np.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_views_of_a_kernels_result_equal_numpy_and_the_reference(on_emulator, device):
    want, row = projection_numpy(X)
    g = Projection()
    got_ref = g.reference(X, pos=2)
    c = compiled(Projection(), device, x=((4,), np.float32))
    got = c(X, pos=2)
    for r, d, w in zip(got_ref, got, want):
        np.testing.assert_allclose(r, w, rtol=1e-6)
        np.testing.assert_array_equal(d, r)
    kcache = np.zeros((6, 8), np.float32)
    kcache[2] = row
    np.testing.assert_allclose(g.read("kcache"), kcache, rtol=1e-6)
    np.testing.assert_array_equal(c.read("kcache"), g.read("kcache"))


def test_a_contiguous_view_is_free_and_a_strided_one_is_copied_run_by_run(on_emulator):
    plan = Projection().compile(x=((4,), np.float32)).plan
    held = {name: what for name, what in plan.holds.items() if isinstance(name, str) and "_buf" in name}   # Buffers
    assert sorted(held.values()) == ["MatVec(w, x).reshape(4, 4)[:, 1:3]"]
    copies = [s for f in plan.functions for s in f.steps if s.symbol == "copy_f32"]
    buffer = next(iter(held))
    assert [(s.args[0].offset, s.args[1], s.args[2].value) for s in copies if s.args[1].source == buffer] == [
        (4 * (4 * r + 1), iron.plan.plan.Ptr(buffer, 8 * r), 2) for r in range(4)]
    assert [text for rule, text in plan.rules if rule == Rule.GATHER_STRIDED_VIEW] == [
        f"{buffer.split('_buf')[0]} copies MatVec(w, x).reshape(4, 4)[:, 1:3] into {buffer} in 4 runs"]


class Heads(iron.Graph):
    """A (2, 128) MatMul result: its left column block written into a KV cache row (copied: not
    contiguous), a row and a reshaped slice read by later groups (Softmax), rows' halves added."""

    def __init__(self):
        self.w = iron.param(np.arange(4 * 128, dtype=np.float32).reshape(4, 128) / 500)
        self.kcache = iron.state((5, 2, 64), np.float32, name="kcache")

    def body(self, x, *, pos: Scratchpad[np.int32]):
        k = MatMul.step(x, self.w)
        Copy.step(k[:, 0:64], self.kcache[pos])
        return Softmax.step(k[1]), Softmax.step(k.reshape(256)[64:192]), Add.step(k[0, 64:], k[1, :64])


def heads_numpy(x, w):
    k = x @ w
    e1, e2 = np.exp(k[1] - k[1].max()), np.exp(k.reshape(256)[64:192] - k.reshape(256)[64:192].max())
    return [e1 / e1.sum(), e2 / e2.sum(), k[0, 64:] + k[1, :64]], k[:, :64]


@pytest.mark.skipif(shutil.which("g++") is None, reason="native kernels need the host C++ compiler g++")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["numpy", "native"])
def test_views_read_by_later_groups_in_both_kernel_modes(on_emulator, monkeypatch, device, mode):
    monkeypatch.setenv("IRON_EMULATOR_KERNELS", mode)
    x = (np.arange(8, dtype=np.float32).reshape(2, 4) - 3) / 2
    g = Heads()
    want, block = heads_numpy(x, np.arange(4 * 128, dtype=np.float32).reshape(4, 128) / 500)
    ref = g.reference(x, pos=3)
    c = compiled(Heads(), device, x=((2, 4), np.float32))
    got = c(x, pos=3)
    assert len(c.plan.groups) > 1
    for r, d, w in zip(ref, got, want):
        np.testing.assert_allclose(r, w, rtol=1e-5)
        np.testing.assert_allclose(d, r, rtol=1e-6)
    np.testing.assert_allclose(g.read("kcache")[3], block, rtol=1e-6)
    np.testing.assert_allclose(c.read("kcache"), g.read("kcache"), rtol=1e-6)


def test_views_are_described_in_the_users_words():
    class Named(iron.Graph):
        def body(self, x):
            y = Copy.step(x)
            names.extend(t.name for t in (y[4:], y.reshape(2, 4), y.reshape(2, 4)[1], y.reshape(2, 4)[:, 1:3]))
            return y

    names: list[str] = []
    Named().reference(np.zeros(8, np.float32))
    assert names == ["Copy(x)[4:]", "Copy(x).reshape(2, 4)", "Copy(x).reshape(2, 4)[1]", "Copy(x).reshape(2, 4)[:, 1:3]"]


def test_a_computed_tensor_indexed_per_call_or_reshaped_wrongly_is_refused():
    class PerCall(iron.Graph):
        def body(self, x, *, i: Scratchpad[np.int32]):
            return Copy.step(Copy.step(x)[i])

    with pytest.raises(TracedValueError) as e:
        PerCall().reference(np.zeros(4, np.float32), i=0)
    quoted(e.value, "Copy(x)", "per-call value 'i'", "out=self.s")

    class Reshape(iron.Graph):
        def body(self, x):
            return Copy.step(Copy.step(x).reshape(3, 3))

    with pytest.raises(KernelTypeError) as e:
        Reshape().reference(np.zeros(8, np.float32))
    quoted(e.value, "Copy(x)", "(8,)", "(3, 3)")


# ---- slices at a per-call offset ------------------------------------------------------------------

class Window(iron.Graph):
    """Writes x into cache[pos:pos + 4] and returns the window before it, cache[pos - 4:pos]."""

    def __init__(self):
        self.cache = iron.state((12,), np.int32, name="cache")

    def body(self, x, *, pos: Scratchpad[np.int32]):
        before = Copy.step(self.cache[pos - 4:pos])
        Copy.step(Add.step(x, before), out=self.cache[pos:pos + 4])
        return before


WINDOW_TEXT = ("cache[pos:pos + 4] with pos = 9 is out of range: pos must be in 0..8; nothing was written. "
               "Keep pos in range, or make 'cache' larger.")


@pytest.mark.parametrize("device", DEVICES)
def test_a_per_call_slice_reads_and_writes_and_is_bounds_checked(on_emulator, device):
    x = np.arange(1, 5, dtype=np.int32)
    g, c = Window(), compiled(Window(), device, x=((4,), np.int32))
    cache = np.zeros(12, np.int32)
    for pos in (4, 8):
        want = cache[pos - 4:pos].copy()
        cache[pos:pos + 4] = x + want
        np.testing.assert_array_equal(g.reference(x, pos=pos), want)
        np.testing.assert_array_equal(c(x, pos=pos), want)
        np.testing.assert_array_equal(g.read("cache"), cache)
        np.testing.assert_array_equal(c.read("cache"), cache)
    for call in (g.reference, c):
        with pytest.raises(IndexOutOfRange) as e:
            call(x, pos=9)
        assert str(e.value) == WINDOW_TEXT
    np.testing.assert_array_equal(c.read("cache"), cache)


def test_a_slice_whose_length_is_not_fixed_is_refused():
    class Loose(iron.Graph):
        def __init__(self):
            self.cache = iron.state((12,), np.int32, name="cache")

        def body(self, *, a: Scratchpad[np.int32], b: Scratchpad[np.int32]):
            return Copy.step(self.cache[a:b])

    with pytest.raises(TracedValueError) as e:
        Loose().reference(a=0, b=2)
    quoted(e.value, "cache[a:b]", "[pos:pos + k]")


class Rows(iron.Graph):
    """A device loop writing row blocks of a state at a carried offset: rows[2 * step:2 * step + 2]
    gets table[step % 3] (two rows) each step."""

    def __init__(self, steps):
        self.table = iron.weight(np.arange(3 * 2 * 4, dtype=np.int32).reshape(3, 2, 4))
        self.rows = iron.state((2 * steps, 4), np.int32, name="rows")

    def body(self, *, step: Carried[np.int32]):
        Copy.step(self.table[step % 3], out=self.rows[2 * step:2 * step + 2])
        return iron.carry(step=step + 1)


def test_a_carried_offset_slice_in_a_device_loop_equals_the_reference(on_emulator):
    steps = 5
    g = Rows(steps + 1)   # room for the words of the run after the last, which the Emit computes
    carry = {"step": 0}
    for _ in range(steps):
        carry = g.reference(**carry)
    with aie_utils.using_device(aie_utils.from_name("npu2")):
        body = Rows(steps + 1).compile()
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(steps, step=0)) == list(range(steps))
    want = np.concatenate([np.arange(24, dtype=np.int32).reshape(3, 2, 4)[s % 3] for s in range(steps)])
    np.testing.assert_array_equal(g.read("rows")[:2 * steps], want)
    np.testing.assert_array_equal(body.read("rows")[:2 * steps], want)


def test_a_carried_offset_slice_past_the_end_stops_the_device_loop_at_that_step(on_emulator):
    text = ("rows[2 * step:2 * step + 2] with 2 * step = 10 is out of range: 2 * step must be in 0..8; "
            "nothing was written. Keep 2 * step in range, or make 'rows' larger.")
    g = Rows(5)
    with pytest.raises(IndexOutOfRange) as e:
        g.reference(step=5)
    assert str(e.value) == text
    with aie_utils.using_device(aie_utils.from_name("npu2")):
        body = Rows(5).compile()
    with pytest.raises(IndexOutOfRange) as e:
        list(iron.CarriedLoop(body, body, depth=2).run(6, step=0))
    quoted(e.value, "CarriedLoop step 4", "rows[2 * step:2 * step + 2]", "2 * step = 10", "0..8", "'rows'")


@pytest.mark.parametrize("pick, error, text", [
    (lambda s, pos: s[pos:pos + 4][1], TracedValueError,
     "cache[pos:pos + 4] is already sliced at a per-call offset along axis 0: index the memory once, with "
     "every index in one [...]."),
    (lambda s, pos: s[pos:pos + 13], IndexOutOfRange,
     "cache[pos:...] takes 13 elements along axis 0 but it has 12: take fewer."),
], ids=["index-a-per-call-slice", "longer-than-the-axis"])
def test_per_call_slices_used_wrongly_are_refused_when_traced(pick, error, text):
    class Picks(iron.Graph):
        def __init__(self):
            self.cache = iron.state((12,), np.int32, name="cache")

        def body(self, *, pos: Scratchpad[np.int32]):
            return Copy.step(pick(self.cache, pos))

    with pytest.raises(error) as e:
        Picks().reference(pos=0)
    assert str(e.value) == text


def test_a_view_of_too_many_separate_runs_is_gathered_by_a_strided_call(on_emulator):
    """`copy_view_for_grid`: a view gather_strided_view would copy in more than 256 runs reads
    through a Strided call, which gathers it on a core by its access pattern in elements."""
    class Column(iron.Graph):
        def body(self, x):
            return Copy.step(Copy.step(x)[:, 0])

    x = np.arange(600, dtype=np.float32).reshape(300, 2)
    np.testing.assert_array_equal(Column().reference(x), x[:, 0])
    body = Column().compile(x=((300, 2), np.float32))
    assert [text for rule, text in body.plan.rules if str(rule) == "copy_view_for_grid"] == [
        "Strided#2 gathers (300,) of Copy(x) on a core by its access pattern (from element 0, sizes (300,), "
        "strides (2,) elements): it picks more than 256 separate runs, so no DMA moves it"]
    np.testing.assert_array_equal(body(x), x[:, 0])


def test_a_reshaped_per_call_slice_indexed_again_is_copied_first(on_emulator):
    """cache[pos:pos + 4].reshape(2, 2)[0]: the reshape lies in no rows of cache, so the trace
    records a Copy of it (Copy#0) and indexes the copy, which lies whole."""
    class Picks(iron.Graph):
        def __init__(self):
            self.cache = iron.state((12,), np.int32, name="cache")

        def body(self, x, *, pos: Scratchpad[np.int32]):
            Copy.step(x, out=self.cache)
            return Copy.step(self.cache[pos:pos + 4].reshape(2, 2)[1])

    x = np.arange(12, dtype=np.int32) * 3
    graph = Picks()
    for pos in (0, 5, 8):
        np.testing.assert_array_equal(graph.reference(x=x, pos=pos), x[pos:pos + 4].reshape(2, 2)[1])
    with aie_utils.using_device(aie_utils.from_name("npu2")):
        body = Picks().compile(x=x)
    np.testing.assert_array_equal(body(x=x, pos=5), x[5:9].reshape(2, 2)[1])
