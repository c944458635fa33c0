"""Fusion rules (iron/compiler/fuse.py): one test per rule with the exact grouping it makes, and
the dropping of calls nothing uses."""

import numpy as np

import iron
from iron import Scratchpad
from iron.compiler.fuse import (
    RULES,
    fuse,
    live_calls,
)
from iron.ir import call_label
from iron.kernels import Add, Copy, Exp, MatMul, MatVec, RMSNorm, SiLU, Softmax
from iron.plan.rules import Rule
from tests.compiler import designs

F32 = np.float32


def grouping(program) -> list[tuple[str, list[str], str]]:
    return [(g.name, [call_label(program, c) for c in g.calls], g.closed_by) for g in fuse(program)]


class MatrixAfterAdd(iron.Graph):
    def __init__(self):
        self.w = iron.param(np.ones((8, 8), F32))

    def body(self, x):
        a = Add.step(x, x)
        y = SiLU.step(MatVec.step(self.w, a))
        return Softmax.step(y)


def test_matrix_op_starts_group_and_takes_only_elementwise_calls():
    program = MatrixAfterAdd().trace(x=((8,), F32))
    assert grouping(program) == [
        ("g0", ["Add#0"], Rule.MATRIX_OP_STARTS_GROUP),
        ("g1", ["MatVec#1", "SiLU#2"], Rule.MATRIX_OP_STARTS_GROUP),
        ("g2", ["Softmax#3"], None),
    ]


class ProductOfProduct(iron.Graph):
    def __init__(self):
        self.b, self.d = iron.param(np.ones((8, 8), F32)), iron.param(np.ones((8, 8), F32))

    def body(self, a):
        return MatMul.step(MatMul.step(a, self.b), self.d)


def test_a_matrix_op_reading_a_matrix_ops_result_starts_its_own_group():
    """Only an expansion's result joins the matrix call reading it (dequant_before_matvec);
    (A @ B) @ D is two groups."""
    program = ProductOfProduct().trace(a=((8, 8), F32))
    assert grouping(program) == [("g0", ["MatMul#0"], Rule.MATRIX_OP_STARTS_GROUP), ("g1", ["MatMul#1"], None)]


class NormThenAdd(iron.Graph):
    def __init__(self):
        self.g = iron.param(np.ones(8, F32))

    def body(self, x):
        return Add.step(RMSNorm.step(x, self.g), x)


def test_reduction_ends_group():
    program = NormThenAdd().trace(x=((8,), F32))
    assert grouping(program) == [("g0", ["RMSNorm#0"], Rule.REDUCTION_ENDS_GROUP), ("g1", ["Add#1"], None)]


def test_state_write_ends_group():
    program = designs.WriteThenRead().trace(x=((8,), F32))
    assert grouping(program) == [("g0", ["Accumulate#0"], Rule.STATE_WRITE_ENDS_GROUP), ("g1", ["Exp#1"], None)]


class Gather(iron.Graph):
    def __init__(self):
        self.w = iron.weight(np.ones((4, 8), F32))

    def body(self, x, *, row: Scratchpad[np.int32]):
        return Add.step(Exp.step(x), self.w[row])


def test_gather_starts_group():
    program = Gather().trace(x=((8,), F32))
    assert grouping(program) == [("g0", ["Exp#0"], Rule.GATHER_STARTS_GROUP), ("g1", ["Add#1"], None)]


class FiveInputs(iron.Graph):
    def body(self, a, b, c, d, e):
        return Add.step(Add.step(Add.step(Add.step(a, b), c), d), e)


def test_input_limit():
    spec = ((8,), F32)
    program = FiveInputs().trace(a=spec, b=spec, c=spec, d=spec, e=spec)
    assert grouping(program) == [("g0", ["Add#0", "Add#1", "Add#2"], Rule.INPUT_LIMIT), ("g1", ["Add#3"], None)]


class Large(iron.Graph):
    def body(self, x, y):
        return Exp.step(SiLU.step(Add.step(x, y)))


def test_size_limit():
    # 2048 float32 are 8 KiB: x, y, x + y and SiLU hold 32 KiB (half a tile); Exp would pass it
    program = Large().trace(x=((2048,), F32), y=((2048,), F32))
    assert grouping(program) == [("g0", ["Add#0", "SiLU#1"], Rule.SIZE_LIMIT), ("g1", ["Exp#2"], None)]


class TwoChains(iron.Graph):
    def body(self, x, y):
        return Exp.step(x), Exp.step(y)


def test_unrelated_starts_group():
    program = TwoChains().trace(x=((8,), F32), y=((8,), F32))
    assert grouping(program) == [("g0", ["Exp#0"], Rule.UNRELATED_STARTS_GROUP), ("g1", ["Exp#1"], None)]


class SkipAdd(iron.Graph):
    """Exp(x) + SiLU(y): the second operand of the add made by a call unrelated to the first."""

    def body(self, x, y):
        return Add.step(Exp.step(x), SiLU.step(y))


def test_a_stream_takes_an_unrelated_call_a_later_call_reads_with_it():
    # 16384 float32 are 64 KiB, larger than half a tile: Exp streams, SiLU joins it as the Add reads both
    program = SkipAdd().trace(x=((16384,), F32), y=((16384,), F32))
    assert grouping(program) == [("g0", ["Exp#0", "SiLU#1", "Add#2"], None)]


def test_a_group_a_tile_holds_does_not_take_an_unrelated_call():
    program = SkipAdd().trace(x=((8,), F32), y=((8,), F32))
    assert grouping(program) == [("g0", ["Exp#0"], Rule.UNRELATED_STARTS_GROUP), ("g1", ["SiLU#1", "Add#2"], None)]


class Dead(iron.Graph):
    def body(self, x):
        Exp.step(x)
        return Copy.step(x)


def test_calls_nothing_uses_are_dropped():
    program = Dead().trace(x=((8,), F32))
    assert [call_label(program, c) for c in live_calls(program)] == ["Copy#1"]


def test_walk_fuses_its_gather_and_its_write():
    program = designs.trace(designs.walk())
    assert grouping(program) == [("g0", ["Copy#0", "Copy#1"], None)]


def test_the_mlp_fuses_one_norm_and_one_matrix_with_its_epilogue_per_layer():
    program = designs.trace(designs.mlp(layers=2, width=64))
    assert grouping(program) == [
        ("g0", ["RMSNorm#0"], Rule.MATRIX_OP_STARTS_GROUP),
        ("g1", ["MatVec#1", "SiLU#2", "Add#3"], Rule.MATRIX_OP_STARTS_GROUP),
        ("g2", ["RMSNorm#4"], Rule.MATRIX_OP_STARTS_GROUP),
        ("g3", ["MatVec#5", "SiLU#6", "Add#7"], None),
    ]


class TwoBranches(iron.Graph):
    """Exp of x, then `second` of y: a call using none of the open group's results."""

    def __init__(self, second):
        self.w = iron.param(np.ones((8, 8), F32))
        self.second = second

    def body(self, x, y):
        return Exp.step(x), (MatVec.step(self.w, y) if self.second is MatVec else Exp.step(y))


def test_the_first_rule_in_order_that_stops_a_call_is_recorded():
    order = [rule for rule, _ in RULES]
    assert order.index(Rule.MATRIX_OP_STARTS_GROUP) < order.index(Rule.UNRELATED_STARTS_GROUP)
    both = TwoBranches(MatVec).trace(x=((8,), F32), y=((8,), F32))
    assert grouping(both)[0] == ("g0", ["Exp#0"], Rule.MATRIX_OP_STARTS_GROUP)
    unrelated = TwoBranches(Exp).trace(x=((8,), F32), y=((8,), F32))
    assert grouping(unrelated)[0] == ("g0", ["Exp#0"], Rule.UNRELATED_STARTS_GROUP)
