"""The per-call scratchpad layout (iron/compiler/words.py, as compile_program fills it): value
words, bounded index words, DMA offset words, core words, "next" words, dedupe, and the views
the DMA cannot move in whole words."""

import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron import Scratchpad
from iron.compiler.compile import compile_program
from iron.errors import PlacementError
from iron.kernels import Copy, Softmax
from iron.plan.fifos import FifoId, Stem
from iron.plan.plan import Const, Dma, HostRole, Output, WordDef, WordKind, WordOp, WordRef
from tests.compiler import designs
from tests.quotes import quoted

NPU2 = from_name("npu2")


def lower(graph, **specs):
    return compile_program(graph.trace(**specs), NPU2)


def patches(plan) -> list[tuple[str, int | None]]:
    return [(op.buffer, op.patch_word) for op in plan.sequence if isinstance(op, Dma)]


def test_walk_words_are_node_steps_and_the_next_steps():
    plan = compile_program(designs.trace(designs.walk(8)), NPU2)
    assert plan.words == (
        WordDef(0, "node", WordKind.CARRIED),
        WordDef(1, "steps", WordKind.CARRIED),
        WordDef(2, "node", WordKind.DMA, WordOp.COPY, WordRef(0), bound=(0, 8), what="successor[node]", tensor="successor"),
        WordDef(3, "steps", WordKind.DMA, WordOp.COPY, WordRef(1), bound=(0, 9), what="trail[steps]", tensor="trail"),
        WordDef(4, "steps", WordKind.DMA, WordOp.COPY, WordRef(3), sink=9),
        WordDef(5, "steps + 1", WordKind.NEXT, WordOp.ADD, WordRef(1), Const(1)),
    )
    # int32 rows of one word: the DMA offset words are the bounded copies of the carried indices
    # (a carried value is never bounded itself: the Emit clamps bounded words in place); the
    # trail write's own copy moves it to the states' sink (word 9, after trail's 9) in a flagged run
    assert patches(plan) == [("consts", 2), ("outputs", None), ("states", 4), ("words", None), ("feedback", None)]
    assert plan.host_buffer(HostRole.STATES).nwords == 18
    assert plan.carry == (("node", Output("carry.node")), ("steps", WordRef(5)))


def test_a_row_index_is_scaled_into_a_dma_word():
    plan = compile_program(designs.trace(designs.accumulate_at(n=64, rows=4)), NPU2)
    assert plan.words == (
        WordDef(0, "pos", WordKind.SCRATCHPAD, bound=(0, 4), what="acc[pos]", tensor="acc"),
        WordDef(1, "pos * 64", WordKind.DMA, WordOp.MUL, WordRef(0), Const(64)),
        WordDef(2, "pos * 64", WordKind.DMA, WordOp.COPY, WordRef(1), sink=256),   # the write's: acc's 256 words on
    )
    assert patches(plan) == [("inputs", None), ("states", 1), ("states", 2)]   # the read keeps its word


class TwoAxes(iron.Graph):
    def __init__(self):
        self.s = iron.state((4, 8, 16), np.int32, name="s")

    def body(self, *, i: Scratchpad[np.int32], j: Scratchpad[np.int32]):
        return Copy.step(self.s[i, j])


def test_two_dynamic_axes_sum_into_one_patch_word():
    plan = lower(TwoAxes())
    assert plan.words[2:] == (
        WordDef(2, "i * 128", WordKind.DMA, WordOp.MUL, WordRef(0), Const(128)),
        WordDef(3, "j * 16", WordKind.DMA, WordOp.MUL, WordRef(1), Const(16)),
        WordDef(4, "(i * 128) + (j * 16)", WordKind.DMA, WordOp.ADD, WordRef(2), WordRef(3)),
    )
    assert [w.bound for w in plan.words] == [(0, 4), (0, 8), None, None, None]
    assert patches(plan) == [("states", 4), ("outputs", None)]


class Shared(iron.Graph):
    def __init__(self):
        self.w = iron.weight(np.arange(8, dtype=np.int32))
        self.t = iron.state((4,), np.int32, name="t")

    def body(self, *, node: Scratchpad[np.int32], pos: Scratchpad[np.int32]):
        a = Copy.step(self.w[node])
        b = Copy.step(self.w[pos + 1])
        c = Copy.step(self.w[pos + 1])
        Copy.step(a, self.t[node])
        return b, c


def test_words_are_shared_and_a_second_bound_gets_a_copy():
    plan = lower(Shared())
    assert plan.words == (
        WordDef(0, "node", WordKind.SCRATCHPAD, bound=(0, 8), what="w[node]", tensor="w"),
        WordDef(1, "pos", WordKind.SCRATCHPAD),
        WordDef(2, "pos + 1", WordKind.DMA, WordOp.ADD, WordRef(1), Const(1), bound=(0, 8), what="w[pos + 1]", tensor="w"),
        WordDef(3, "node", WordKind.DMA, WordOp.COPY, WordRef(0), None, bound=(0, 4), what="t[node]", tensor="t"),
        WordDef(4, "node", WordKind.DMA, WordOp.COPY, WordRef(3), sink=4),
    )


class Soft(iron.Graph):
    def body(self, x, *, n: Scratchpad[np.int32]):
        return Softmax.step(x, length=n)


def test_a_per_call_length_is_a_core_word_read_from_the_in_object():
    plan = lower(Soft(), x=((16,), np.float32))
    assert plan.words == (WordDef(0, "n", WordKind.SCRATCHPAD, bound=(1, 17), what="Softmax length=n"),)
    (step,) = plan.function("g0").steps
    assert step.args[-1] == iron.plan.plan.Load(FifoId("g0", Stem.IN), 64)
    assert [(op.buffer, op.offset, op.nwords) for op in plan.sequence if isinstance(op, Dma)] == [
        ("inputs", 0, 16), ("words", 0, 1), ("outputs", 0, 16)]


class InputView(iron.Graph):
    def body(self, x, *, i: Scratchpad[np.int32]):
        return Copy.step(x[i])


def test_a_view_of_an_input_is_patched_in_the_inputs_buffer():
    plan = lower(InputView(), x=((4, 16), np.int32))
    assert plan.words[1] == WordDef(1, "i * 16", WordKind.DMA, WordOp.MUL, WordRef(0), Const(16))
    assert plan.words[0].bound == (0, 4)
    assert patches(plan) == [("inputs", 1), ("outputs", None)]


class HalfWords(iron.Graph):
    def __init__(self):
        self.table = iron.weight(np.zeros(8, dtype=iron.bfloat16))

    def body(self, *, node: Scratchpad[np.int32]):
        return Copy.step(self.table[node])


class ShortRuns(iron.Graph):
    def __init__(self):
        self.table = iron.weight(np.zeros((4, 8), dtype=np.int8))

    def body(self, *, node: Scratchpad[np.int32]):
        return Copy.step(self.table[node, 0:2])


def test_a_dynamic_step_of_half_a_word_is_refused():
    with pytest.raises(PlacementError) as err:
        lower(HalfWords())
    quoted(err.value, "table[node]", "axis 0", "weight 'table'", "'node'", "2 bytes", "4-byte words", "Pad 'table'")


def test_a_run_of_part_of_a_word_is_refused():
    with pytest.raises(PlacementError) as err:
        lower(ShortRuns())
    quoted(err.value, "table[node, :2]", "runs of 2 bytes", "weight 'table' (int8)", "axis 1", "4-byte",
           "Pad or index 'table'")
