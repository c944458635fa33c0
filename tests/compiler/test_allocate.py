"""Allocation (iron/compiler/allocate.py): host buffers packed word by word in argument order,
FIFO depths lowered where a tile is tight, and the DoesNotFit text."""

import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron import Carried
from iron.compiler.allocate import host_buffers, host_placements, state_sink
from iron.compiler.compile import compile_program
from iron.errors import DoesNotFit
from iron.kernels import Add, Argmax, Copy, MatVec, SiLU
from iron.plan.fifos import FifoId, Stem
from iron.plan.plan import (
    Emit,
    HostBuffer,
    HostRole,
    Placement,
    PlacementKind,
    Tile,
    TileKind,
    WordDef,
    WordKind,
)
from tests.quotes import quoted

BF16 = iron.bfloat16
I32 = np.dtype(np.int32)


class Everything(iron.Graph):
    def __init__(self):
        self.table = iron.weight(np.arange(5, dtype=np.int8))
        self.bias = iron.param(np.ones(3, dtype=BF16))
        self.seen = iron.state((3,), BF16, name="seen")
        self.count = iron.state((2,), np.int32)

    def body(self, x, *, i: Carried[np.int32]):
        y = Add.step(x, self.bias)
        Copy.step(y, self.seen)
        return y, iron.carry(i=Argmax.step(y))


def test_host_tensors_are_packed_in_whole_words_in_argument_order():
    program = Everything().trace(x=((3,), BF16))
    assert host_placements(program) == (
        Placement("table", PlacementKind.WEIGHT, "consts", 0, (5,), np.dtype(np.int8)),
        Placement("bias", PlacementKind.PARAM, "consts", 2, (3,), BF16),
        Placement("seen", PlacementKind.STATE, "states", 0, (3,), BF16),
        Placement("count", PlacementKind.STATE, "states", 2, (2,), I32),
        Placement("x", PlacementKind.INPUT, "inputs", 0, (3,), BF16),
        Placement("out0", PlacementKind.OUTPUT, "outputs", 0, (3,), BF16),
        Placement("carry.i", PlacementKind.CARRY, "outputs", 2, (), I32),
    )


def test_every_host_buffer_has_a_word_and_feedback_comes_only_with_an_emit():
    program = Everything().trace(x=((3,), BF16))
    buffers = host_buffers(host_placements(program), 0, None, False)
    assert buffers == (HostBuffer("consts", HostRole.CONSTS, 4), HostBuffer("states", HostRole.STATES, 4),
                       HostBuffer("inputs", HostRole.INPUTS, 2), HostBuffer("outputs", HostRole.OUTPUTS, 3),
                       HostBuffer("words", HostRole.WORDS, 1))
    emit = Emit(Tile(0, 3, TileKind.COMPUTE), (), (WordDef(0, "n", WordKind.CARRIED),))
    assert host_buffers(host_placements(program), 1, emit, False)[-2:] == (   # the word, the flag and scratch words
        HostBuffer("words", HostRole.WORDS, 3), HostBuffer("feedback", HostRole.FEEDBACK, 3))


def test_on_a_full_elf_device_the_states_end_in_a_sink_as_large_as_the_largest_state():
    placements = host_placements(Everything().trace(x=((3,), BF16)))
    assert state_sink(placements, True) == (4, 2) and state_sink(placements, False) == (4, 0)   # seen: 2 words
    assert host_buffers(placements, 0, None, True)[1] == HostBuffer("states", HostRole.STATES, 6)


class Whole(iron.Graph):
    def __init__(self, n):
        self.big = iron.state((n,), np.int32, name="big")

    def body(self):
        return Argmax.step(self.big)


def test_a_tight_tile_gets_depth_one_fifos():
    plan = compile_program(Whole(8192).trace(), from_name("npu2"))   # 32 KiB read whole
    assert [(f.name, f.depth) for f in plan.fifos] == [(FifoId("g0", Stem.IN), 1), (FifoId("g0", Stem.HOST), 2)]


class Projected(iron.Graph):
    def __init__(self, m, k):
        self.w = iron.weight(np.zeros((m, k), np.float32))

    def body(self, x):
        return SiLU.step(MatVec.step(self.w, x))


def test_a_tight_tile_keeps_the_streamed_rows_double_buffered_and_takes_the_vector_once():
    """Each of the 6 parts of the split MatVec holds the 16 KiB vector, taken once per launch,
    and its rows, streamed one 16 KiB row at a time: too much at depth 2 each, so the vector's
    FIFO goes to depth 1 and the rows keep a second object to fill while the core works."""
    plan = compile_program(Projected(96, 4096).trace(x=((4096,), np.float32)), from_name("npu2"))
    depths = {str(f.name): f.depth for f in plan.fifos}
    assert depths["g0_in"] == 1 and {depths[f"g0_w{k}"] for k in range(6)} == {2}


def test_a_state_too_large_for_a_tile_does_not_fit():
    with pytest.raises(DoesNotFit) as err:
        compile_program(Whole(16384).trace(), from_name("npu2"))
    quoted(err.value, "Whole", "Argmax#0", "16384 int32", "65540 bytes", "at most 16127 elements")   # by placement
