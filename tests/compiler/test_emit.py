"""The Emit (iron/compiler/emit.py): `carry_sources` says where each next carried value comes from
(a word of this call, or an element a group computed: its `_out` region for the Emit, its
`carry.<name>` output for the host), and `lower_emit` gives the Emit core's program, its one
Function, its objects' sizes and its two moves. `clamp_steps` and `sink_steps`, run here by a
small interpreter of their ScalarSteps with i32 wrap-around, clamp any i32 into a word's range,
count it in the flag once when it was out of range, and send a flagged run's state write to the
sink. The Emit refuses nothing (a feeds Plan of another device or other values is refused by
`check_feeds`, tests/compiler/test_lower.py)."""
import numpy as np
import pytest

from aie_utils import from_name
from iron.compiler.emit import (
    carry_sources,
    clamp_steps,
    lower_emit,
    sink_steps,
    sink_writes,
    unflagged_steps,
)
from iron.compiler.objects import pack
from iron.compiler.sequence import Move, group_moves
from iron.compiler.words import Access
from iron.plan.fifos import EMIT_IN, FEEDBACK, FifoId, Stem
from iron.plan.plan import (
    Acquire,
    Const,
    Direction,
    Emit,
    Imm,
    Invoke,
    Load,
    Output,
    Port,
    Release,
    Tile,
    TileKind,
    WordDef,
    WordKind,
    WordOp,
    WordRef,
)
from tests.compiler import designs
from tests.compiler.passes import context

NPU2 = from_name("npu2")
C, P = Port.CONSUME, Port.PRODUCE
I32_MIN, I32_MAX = -2 ** 31, 2 ** 31 - 1

G0_OUT = FifoId("g0", Stem.OUT)


def walk_moves():
    """The walk's Context as lowering leaves it for the Emit, and its groups' moves after
    `sink_writes`: every group packed, each state write given its sink word."""
    ctx = context(designs.trace(designs.walk(8)), NPU2)
    return ctx, sink_writes(ctx, [group_moves(ctx, site, pack(ctx, site)) for site in ctx.layout.sites])


def walk_context():
    return walk_moves()[0]


def test_every_state_write_gets_a_word_the_emit_moves_to_the_sink_and_nothing_else_does():
    """trail[steps]'s write (the states' only S2MM move) gets word 4, a copy of its row's word
    3 whose `sink` (9 + 0: the sink follows trail's 9 rows) the Emit writes in a flagged run;
    the moves that read, and the result's, keep theirs."""
    ctx, moves = walk_moves()
    writes = [m for group in moves for m in group if m.buffer == "states" and m.direction is Direction.S2MM]
    assert writes == [Move(Direction.S2MM, FifoId("g0", Stem.HOST), "states", Access(0, ((1, 1),), 4))]
    assert ctx.table.words[4] == WordDef(4, "steps", WordKind.DMA, WordOp.COPY, WordRef(3), None, sink=9)
    assert [m.access.patch_word for group in moves for m in group if m not in writes] == [2, None]


def test_the_walks_next_node_comes_from_its_group_and_its_steps_from_a_word():
    ctx = walk_context()
    emit, host = carry_sources(ctx)
    (_, steps), = [(name, source) for name, source in emit if name == "steps"]
    assert emit == (("node", Load(G0_OUT, 0)), ("steps", steps))
    assert host == (("node", Output("carry.node")), ("steps", steps))
    words = ctx.table.defs()
    given = next(w.index for w in words if w.name == "steps" and w.kind is WordKind.CARRIED)
    nxt = words[steps.index]   # the next steps: this call's steps + 1
    assert (nxt.kind, nxt.op, nxt.a, nxt.b) == (WordKind.NEXT, WordOp.ADD, WordRef(given), Const(1))


def test_the_emit_core_reads_its_words_and_the_element_and_writes_the_feedback():
    ctx = walk_context()
    emit_values, _ = carry_sources(ctx)
    made = lower_emit(ctx, emit_values, ctx.table.defs())
    objects = (EMIT_IN, G0_OUT, FEEDBACK)
    assert made.core.tile == Tile(0, 3, TileKind.COMPUTE) and made.core.group == "emit"
    assert made.core.program == (Acquire(EMIT_IN, C), Acquire(G0_OUT, C), Acquire(FEEDBACK, P),
                                 Invoke("emit", objects), Release(EMIT_IN, C), Release(G0_OUT, C),
                                 Release(FEEDBACK, P))
    assert made.function.name == "emit" and made.function.params == objects
    words = len(ctx.table.words)
    assert made.emit == Emit(made.core.tile, emit_values, ctx.table.defs())
    assert made.sizes == {EMIT_IN: 4 * (words + 1), FEEDBACK: 4 * made.emit.nwords}
    assert made.moves == (Move(Direction.MM2S, FifoId("emit", Stem.IN), "words", Access(0, ((words + 1, 1),))),
                          Move(Direction.S2MM, FifoId(None, Stem.FEEDBACK), "feedback",
                               Access(0, ((made.emit.nwords, 1),))))
    first = made.function.steps[0]   # the flag starts from this call's own
    assert (first.op, first.a) == (WordOp.COPY, Load(EMIT_IN, 4 * words))
    bounded = [w for w in made.emit.target_words if w.bound is not None]
    sunk = [w for w in made.emit.target_words if w.sink is not None]
    assert len(made.function.steps) == 1 + words + 7 * len(bounded) + (3 + 3 * len(sunk)) * bool(sunk)


def run(steps, memory: dict[int, int]) -> dict[int, int]:
    """The ScalarSteps on the feedback object's words (byte offset -> i32), wrapping as i32."""
    def value(operand):
        return operand.value if isinstance(operand, Imm) else memory[operand.offset]
    ops = {WordOp.MIN: min, WordOp.MAX: max, WordOp.ADD: lambda a, b: a + b, WordOp.SUB: lambda a, b: a - b,
           WordOp.MUL: lambda a, b: a * b}
    for step in steps:
        assert step.dest.source == FEEDBACK
        result = ops[step.op](value(step.a), value(step.b))
        memory[step.dest.offset] = int(np.int64(result).astype(np.int32))
    return memory


EMIT = Emit(Tile(0, 3, TileKind.COMPUTE), (), (WordDef(0, "i", WordKind.DMA, bound=(2, 9)),))


@pytest.mark.parametrize("value, clamped", [
    (2, 2), (5, 5), (8, 8), (1, 2), (9, 8), (I32_MIN, 2), (I32_MAX, 8), (-1, 2)])
def test_a_bounded_word_is_clamped_into_its_range_and_counted_once_when_out_of_it(value, clamped):
    word, flag, scratch = 0, 4 * EMIT.flag, 4 * EMIT.scratch
    memory = run(clamp_steps(EMIT.target_words[0], EMIT), {word: value, flag: 3, scratch: 0})
    assert memory[word] == clamped and memory[flag] == 3 + (value != clamped)


@pytest.mark.parametrize("flag, written", [(0, 40), (1, 7), (5, 7)])
def test_a_flagged_runs_state_write_goes_to_the_sink(flag, written):
    w = WordDef(0, "trail", WordKind.DMA, sink=7)
    emit = Emit(EMIT.tile, (), (w,))
    memory = {0: 40, 4 * emit.flag: flag, 4 * emit.scratch: 0}
    assert run((*unflagged_steps(emit), *sink_steps(w, emit)), memory)[0] == written
