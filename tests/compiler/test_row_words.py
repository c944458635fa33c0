"""`pad_rows_to_words` (iron/compiler/words.py): a weight, param or state whose rows are not whole
32-bit words, indexed through per-call values, lies with each row padded to whole words, so the
DMA moves its rows at the padded stride; it equals reference() on npu2 and npu1, host-driven and
in a device loop (also through XRT), the host sees the user's shape, and what the compiler does
not lay out (a host input, a state also used whole) keeps its refusal. `pad_lead_to_words`: an
input or weight whose views start mid-word (`x[1:]` of bfloat16) lies after a lead of padding."""
import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron import Carried, Scratchpad
from iron.errors import ArgumentError, PlacementError
from iron.kernels import Add, Copy, Exp, ReLU, Sigmoid, SiLU, Tanh
from iron.plan.describe import describe
from iron.plan.mlir import ALLOWED_OPS, print_mlir
from iron.plan.rules import Rule
from tests.plan.test_mlir import op_names
from tests.quotes import quoted

BF16 = iron.bfloat16

pytestmark = pytest.mark.usefixtures("on_emulator")


class Gather(iron.Graph):
    """R5a: one bfloat16 row of 1018 bytes picked by a per-call token."""

    def __init__(self, emb):
        self.emb = iron.weight(emb)

    def body(self, *, tok: Scratchpad[np.int32]):
        return Copy.step(self.emb[tok])


class Scatter(iron.Graph):
    """R5b: an int8 row of 7 bytes written at a per-call row."""

    def __init__(self):
        self.q = iron.state((4, 7), np.int8, name="q")

    def body(self, x, *, i: Scratchpad[np.int32]):
        Copy.step(x, out=self.q[i])


class Rows(iron.Graph):
    """Each step adds `inc` to the int8 row the step before wrote and writes it one row on, and
    records the token's bfloat16 embedding row in `seen` at the step."""

    def __init__(self, emb, steps):
        self.emb = iron.weight(emb)
        self.inc = iron.param(np.arange(1, 8, dtype=np.int8))
        self.q = iron.state((steps + 1, 7), np.int8, name="q")
        self.seen = iron.state((steps + 1, 509), BF16, name="seen")

    def body(self, *, pos: Carried[np.int32], tok: Carried[np.int32]):
        Add.step(self.q[pos], self.inc, out=self.q[pos + 1])
        Copy.step(self.emb[tok], out=self.seen[pos])
        return iron.carry(pos=pos + 1, tok=(tok * 3 + 1) % 8)


def preset(c, want, steps, row):
    """q's first row `row` on the device and in the reference, the rest zeros."""
    first = np.zeros((steps + 1, 7), np.int8)
    first[0] = row
    for target in (c, want):
        target.write("q", first)


def table(rows=8, width=509, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, width)).astype(BF16)


def bits(a):
    return np.asarray(a).view(np.uint16)


def lies(plan):
    return {p.name: (p.shape, p.padded) for p in plan.placements if p.word_rows}


def rule(plan):
    return [what for name, what in plan.rules if name == Rule.PAD_ROWS_TO_WORDS]


def allowed_mlir(plan) -> bool:
    return set(op_names(print_mlir(plan))) <= ALLOWED_OPS


@pytest.mark.parametrize("device", ["npu2", "npu1"])
def test_a_gathered_bfloat16_row_of_odd_halfwords_equals_the_reference(device):
    graph, want = Gather(table()), Gather(table())
    c = graph.compile(device=from_name(device))
    assert lies(c.plan) == {"emb": ((8, 509), (8, 510))}
    assert len(rule(c.plan)) == 1 and "weight 'emb' (8, 509) bfloat16" in rule(c.plan)[0]
    assert f"  pad_rows_to_words: {rule(c.plan)[0]}" in describe(c.plan).splitlines()
    assert allowed_mlir(c.plan)
    for tok in (0, 5, 7):
        got = c(tok=tok)
        assert got.shape == (509,)
        np.testing.assert_array_equal(bits(got), bits(want.reference(tok=tok)))   # a copy: bit for bit
    graph.update(graph.emb, table(seed=2))   # written into the user's region of each padded row
    np.testing.assert_array_equal(bits(c(tok=4)), bits(table(seed=2)[4]))


@pytest.mark.parametrize("device", ["npu2", "npu1"])
def test_int8_rows_of_seven_bytes_written_at_a_per_call_row_equal_the_reference(device):
    graph, want = Scatter(), Scatter()
    c = graph.compile(device=from_name(device), x=((7,), np.int8))
    assert lies(c.plan) == {"q": ((4, 7), (4, 8))}
    assert len(rule(c.plan)) == 1 and "state 'q' (4, 7) int8" in rule(c.plan)[0]
    assert allowed_mlir(c.plan)
    scatter(c, want, (2, 0, 3, 1, 2))


def scatter(c, want, rows):
    """Calls writing random int8 rows at `rows` on `c` and on the reference `want`: q agrees."""
    rng = np.random.default_rng(1)
    for i in rows:
        x = rng.integers(-128, 128, 7, dtype=np.int8)
        c(x, i=i)
        want.reference(x, i=i)
    np.testing.assert_array_equal(c.read("q"), want.read("q"))


def test_states_read_back_the_next_step_in_a_device_loop_of_depth_2():
    steps = 6
    graph, want = Rows(table(), steps), Rows(table(), steps)
    body = graph.compile(device=from_name("npu2"))
    assert lies(body.plan) == {"emb": ((8, 509), (8, 510)), "q": ((7, 7), (7, 8)), "seen": ((7, 509), (7, 510))}
    assert allowed_mlir(body.plan)
    preset(body, want, steps, [-80, 56, 52, -82, 70, 21, 97])   # row 6 wraps past 127, as int8 does in numpy
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(steps - 1, pos=0, tok=5)) == list(range(steps - 1))
    carry = {"pos": 0, "tok": 5}
    for _ in range(steps):
        carry = dict(want.reference(**carry))
    assert dict(loop.carry) == carry
    np.testing.assert_array_equal(body.read("q"), want.read("q"))
    np.testing.assert_array_equal(bits(body.read("seen")), bits(want.read("seen")))


def test_the_host_sees_a_padded_state_in_its_own_shape():
    graph = Scatter()
    c = graph.compile(device=from_name("npu2"), x=((7,), np.int8))
    assert c.read(graph.q).shape == (4, 7)
    value = np.arange(28, dtype=np.int8).reshape(4, 7)
    c.write(graph.q, value)
    np.testing.assert_array_equal(c.read("q"), value)
    c(np.full(7, -1, np.int8), i=1)
    value[1] = -1
    np.testing.assert_array_equal(c.read("q"), value)   # the write moved row 1 only, at the padded stride
    with pytest.raises(ArgumentError) as err:
        c.write(graph.q, np.zeros((4, 8), np.int8))
    quoted(err.value, "state 'q'", "(4, 7)", "(4, 8)")
    c.write(graph.q, np.zeros((4, 7), np.int8))   # a reset: every row zeros again
    np.testing.assert_array_equal(c.read("q"), np.zeros((4, 7), np.int8))


class ExpsThenGather(iron.Graph):
    """Five different kernels on x, then a gather of a 6-byte bfloat16 row: more groups than
    npu2_1col's 4 cores (alike ones would run over time on one: repeat_over_time)."""

    def __init__(self):
        self.table = iron.weight(np.arange(12, dtype=np.float32).reshape(4, 3).astype(BF16))

    def body(self, x, *, row: Scratchpad[np.int32]):
        return (*(kernel.step(x) for kernel in (Exp, SiLU, Sigmoid, Tanh, ReLU)), Copy.step(self.table[row]))


def test_segments_see_the_padded_rows():
    graph = ExpsThenGather()
    c = graph.compile(x=((8,), np.float32), device=from_name("npu2_1col"))
    assert len(c.plan.segments) == 2
    assert lies(c.plan) == {"table": ((4, 3), (4, 4))}
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    *exps, row = c(x, row=2)
    np.testing.assert_array_equal(bits(row), bits(graph.table.array[2]))
    for got, want in zip(exps, graph.reference(x, row=2)[:5]):
        np.testing.assert_allclose(got, want, rtol=1e-6)


class InputRows(iron.Graph):
    def body(self, x, *, i: Scratchpad[np.int32]):
        return Copy.step(x[i])


class WholeAndRow(iron.Graph):
    def __init__(self):
        self.q = iron.state((4, 7), np.int8, name="q")

    def body(self, x, *, i: Scratchpad[np.int32]):
        Copy.step(x, out=self.q[i])
        return Copy.step(self.q)


def test_what_the_compiler_does_not_pad_keeps_its_refusal():
    with pytest.raises(PlacementError) as err:
        InputRows().compile(device=from_name("npu2"), x=((4, 7), np.int8))
    quoted(err.value, "x[i]", "input 'x'", "'i'", "7 bytes", "Pad 'x'")
    with pytest.raises(PlacementError) as err:   # read whole, q must lie as the user's (4, 7)
        WholeAndRow().compile(device=from_name("npu2"), x=((7,), np.int8))
    quoted(err.value, "q[i]", "state 'q'", "'i'", "7 bytes", "Pad 'q'")


class Tail(iron.Graph):
    """R7: Exp of a bfloat16 input but its first element: x[1:] starts at byte 2, mid-word."""

    def body(self, x):
        return Exp.step(x[1:])


class TailCopy(iron.Graph):
    def body(self, x):
        return Copy.step(x[1:])


class WeightTail(iron.Graph):
    def __init__(self, w):
        self.w = iron.weight(w)

    def body(self):
        return Copy.step(self.w[1:])


def lead(plan):
    return {p.name: (p.lead, p.nwords) for p in plan.placements if p.lead}


@pytest.mark.parametrize("device", ["npu2", "npu1"])
@pytest.mark.parametrize("n", [509, 510])
def test_a_view_starting_mid_word_lies_after_a_lead_of_padding(device, n):
    x = np.linspace(-3, 3, n).astype(BF16)
    c = TailCopy().compile(device=from_name(device), x=((n,), BF16))
    assert lead(c.plan) == {"x": (1, 255 if n == 509 else 256)}   # 2 + 2n bytes, to the end of a word
    assert [name for name, _ in c.plan.rules].count(Rule.PAD_LEAD_TO_WORDS) == 1
    assert allowed_mlir(c.plan)
    np.testing.assert_array_equal(bits(c(x)), bits(x[1:]))   # a copy: bit for bit
    graph = Tail()
    e = graph.compile(device=from_name(device), x=((n,), BF16))
    np.testing.assert_allclose(np.float32(e(x)), np.float32(graph.reference(x)), rtol=2e-2)
    w = WeightTail(x).compile(device=from_name(device))
    assert lead(w.plan) == {"w": (1, 255 if n == 509 else 256)}
    np.testing.assert_array_equal(bits(w()), bits(x[1:]))


class TwoWords(iron.Graph):
    def body(self, x):
        return Copy.step(x[2:])


def test_a_run_to_the_tensors_end_moves_the_rest_of_its_last_word():
    x = np.linspace(-3, 3, 509).astype(BF16)
    c = TwoWords().compile(device=from_name("npu2"), x=((509,), BF16))
    assert lead(c.plan) == {} and lies(c.plan) == {}   # x[2:] starts on a word; its end is x's, mid-word
    np.testing.assert_array_equal(bits(c(x)), bits(x[2:]))


class WholeAndTail(iron.Graph):
    def body(self, x):
        return Exp.step(x), Copy.step(x[1:])


def test_a_tensor_read_whole_keeps_its_first_word():
    """x read whole gets no lead, so x[1:] (starting mid-word) is gathered on a core by a Strided
    call (`copy_view_for_grid`; it was a PlacementError)."""
    x = np.linspace(-3, 3, 509).astype(BF16)
    c = WholeAndTail().compile(device=from_name("npu2"), x=((509,), BF16))
    whole, tail = c(x)
    np.testing.assert_array_equal(bits(tail), bits(x[1:]))
    np.testing.assert_array_equal(whole, WholeAndTail().reference(x)[0])
    assert lead(c.plan) == {} and [g for _, g in c.plan.groups if "Strided#2" in g]
    assert [text.split(" by ")[0] for rule, text in c.plan.rules if rule is Rule.COPY_VIEW_FOR_GRID] == [
        "Strided#2 gathers (508,) of x on a core"]


def test_through_xrt_the_host_writes_and_reads_the_users_rows(xrt):
    graph, want = Scatter(), Scatter()
    c = graph.compile(device=from_name("npu2"), x=((7,), np.int8))
    for target in (c, want):
        target.write("q", np.arange(28, dtype=np.int8).reshape(4, 7))
    scatter(c, want, (3, 1))


def test_host_driven_on_npu1_states_read_back_the_next_call():
    steps = 4
    graph, want = Rows(table(), steps), Rows(table(), steps)
    c = graph.compile(device=from_name("npu1"))
    preset(c, want, steps, [1, -2, 3, -4, 5, -6, 7])
    carry, expect = {"pos": 0, "tok": 2}, {"pos": 0, "tok": 2}
    for _ in range(steps):
        carry, expect = dict(c(**carry)), dict(want.reference(**expect))
    assert carry == expect
    np.testing.assert_array_equal(c.read("q"), want.read("q"))
    np.testing.assert_array_equal(bits(c.read("seen")), bits(want.read("seen")))
