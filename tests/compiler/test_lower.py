"""compile_program (iron/compiler/compile.py): what the Walk's golden does not show (what the
host runtime wires), npu1 against npu2, add-one and Accumulate objects, forwarding, waits on state writers, the
Emit of a version feeding another (the sequence's own rules: test_sequence.py)."""

import dataclasses

import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron import Carried, Scratchpad
from iron.compiler.compile import compile_program
from iron.errors import LoopError
from iron.kernels import Accumulate, Add, Copy, Softmax
from iron.plan.fifos import EMIT_IN, FEEDBACK, FifoId, Stem
from iron.plan.plan import (
    FLAG_WORDS,
    Direction,
    Dma,
    Emit,
    FifoRole,
    HostRole,
    Imm,
    Invoke,
    KernelStep,
    Load,
    Output,
    Ptr,
    ScalarStep,
    Tile,
    TileKind,
    WordOp,
    WordRef,
)
from iron.plan.rules import Rule
from tests.compiler import designs
from tests.quotes import quoted

NPU1, NPU2 = from_name("npu1"), from_name("npu2")
SHIM, T02, T03 = Tile(0, 0, TileKind.SHIM), Tile(0, 2, TileKind.COMPUTE), Tile(0, 3, TileKind.COMPUTE)
I32 = np.dtype(np.int32)
F32 = np.float32


def walk_plan(device):
    return compile_program(designs.trace(designs.walk(8)), device)


def copy(source: Ptr, dest: Ptr) -> KernelStep:
    return KernelStep.of(Copy, np.int32, (source, dest, Imm(1)))


def test_walk_on_npu2_beyond_its_golden():
    """What the Walk's golden MLIR and glue (test_mlir.py) do not show: buffer and placement
    names, FIFO roles, where the Emit and the host find the next carried values."""
    plan = walk_plan(NPU2)
    assert (plan.image, plan.full_elf) == ("elf", True)
    assert [(b.name, b.role, b.nwords) for b in plan.host_buffers] == [
        ("consts", HostRole.CONSTS, 8), ("states", HostRole.STATES, 18), ("inputs", HostRole.INPUTS, 1),
        ("outputs", HostRole.OUTPUTS, 1), ("words", HostRole.WORDS, 8), ("feedback", HostRole.FEEDBACK, 8)]
    assert [(p.name, p.buffer, p.offset) for p in plan.placements] == [
        ("successor", "consts", 0), ("trail", "states", 0), ("carry.node", "outputs", 0)]
    assert [(f.name, f.role) for f in plan.fifos] == [
        (FifoId("g0", Stem.IN), FifoRole.INPUT), (FifoId("g0", Stem.HOST), FifoRole.HOST), (FifoId("g0", Stem.OUT), FifoRole.OUTPUT),
        (EMIT_IN, FifoRole.EMIT_IN), (FEEDBACK, FifoRole.FEEDBACK)]
    assert plan.emit == Emit(T03, (("node", Load(FifoId("g0", Stem.OUT), 0)), ("steps", WordRef(5))), plan.words)
    assert (plan.emit.flag, plan.emit.scratch, plan.emit.nwords) == (6, 7, 8)
    assert plan.carry == (("node", Output("carry.node")), ("steps", WordRef(5)))


def without_sink(plan):
    """The Walk's `plan` without the states' sink: trail's 9 words after trail, and w4, the trail
    write's patch word (w3 patches it instead)."""
    assert [w.sink for w in plan.words] == [None, None, None, None, 9, None]
    return dataclasses.replace(
        plan, words=(*plan.words[:4], dataclasses.replace(plan.words[5], index=4)),
        carry=(("node", Output("carry.node")), ("steps", WordRef(4))),
        sequence=tuple(dataclasses.replace(op, patch_word=3) if getattr(op, "patch_word", None) == 4 else op
                       for op in plan.sequence),
        host_buffers=tuple(dataclasses.replace(b, nwords=b.nwords - (9 if b.role is HostRole.STATES else 1))
                           if b.role in (HostRole.STATES, HostRole.WORDS) else b for b in plan.host_buffers))


def without_emit(plan):
    """`plan` without its Emit: the Emit's tile, FIFOs, function, feedback buffer, flag words and DMAs, and
    the copy of the carried element into g0_out."""
    emit_fifos = {FifoId("g0", Stem.OUT), EMIT_IN, FEEDBACK}
    g0 = plan.function("g0")
    g0 = dataclasses.replace(g0, params=g0.params[:2], steps=g0.steps[:2])

    def kept(items):
        return tuple(i for i in items if getattr(i, "fifo", None) not in emit_fifos)

    core = plan.cores[0]
    core = dataclasses.replace(core, program=tuple(
        Invoke("g0", (FifoId("g0", Stem.IN), FifoId("g0", Stem.HOST))) if isinstance(i, Invoke) else i for i in kept(core.program)))
    return dataclasses.replace(
        plan, device=None, full_elf=None, image=None, emit=None, rules=(), holds={}, closed_by={},
        tiles=tuple(t for t in plan.tiles if t != T03),
        host_buffers=tuple(dataclasses.replace(b, nwords=b.nwords - FLAG_WORDS) if b.role is HostRole.WORDS else b
                           for b in plan.host_buffers if b.role is not HostRole.FEEDBACK),
        fifos=tuple(f for f in plan.fifos if f.name not in emit_fifos),
        functions=(g0,),
        cores=(core,), sequence=kept(plan.sequence))


def test_walk_on_npu1_differs_from_npu2_only_by_the_emit_and_the_states_sink():
    on1, on2 = walk_plan(NPU1), walk_plan(NPU2)
    assert (on1.device.name, on1.full_elf, on1.image, on1.emit) == ("npu1", False, "xclbin", None)
    assert [b.role for b in on1.host_buffers] == list(HostRole)[:5]
    bare = dataclasses.replace(on1, device=None, full_elf=None, image=None, rules=(), holds={}, closed_by={})
    assert bare == without_emit(without_sink(on2))


def test_add_one_moves_one_object_with_the_input_and_the_ones():
    plan = compile_program(designs.trace(designs.add_one(1024)), NPU2)
    assert [(f.name, f.nbytes) for f in plan.fifos] == [(FifoId("g0", Stem.IN), 8192), (FifoId("g0", Stem.HOST), 4096)]
    assert plan.function("g0").steps == (
        KernelStep.of(Add, np.int32, (Ptr(FifoId("g0", Stem.IN)), Ptr(FifoId("g0", Stem.IN), 4096), Ptr(FifoId("g0", Stem.HOST)), Imm(1024))),)
    assert [(op.buffer, op.sizes, op.strides) for op in plan.sequence if isinstance(op, Dma)] == [
        ("inputs", (1, 1, 2, 512), (0, 0, 512, 1)), ("consts", (1, 1, 2, 512), (0, 0, 512, 1)),
        ("outputs", (1, 1, 2, 512), (0, 0, 512, 1))]


def test_accumulate_copies_the_row_then_adds_into_it():
    plan = compile_program(designs.trace(designs.accumulate_at(n=64, rows=4)), NPU2)
    assert plan.function("g0").steps == (
        KernelStep.of(Copy, np.int32, (Ptr(FifoId("g0", Stem.IN), 256), Ptr(FifoId("g0", Stem.HOST)), Imm(64))),
        KernelStep.of(Accumulate, np.int32, (Ptr(FifoId("g0", Stem.IN)), Ptr(FifoId("g0", Stem.HOST)), Imm(64))))
    assert [(op.direction, op.buffer, op.patch_word) for op in plan.sequence if isinstance(op, Dma)] == [
        (Direction.MM2S, "inputs", None), (Direction.MM2S, "states", 1), (Direction.S2MM, "states", 2)]


class Soft(iron.Graph):
    def body(self, x, *, n: Scratchpad[np.int32]):
        return Softmax.step(x, length=n), Softmax.step(x)


def test_softmax_without_a_length_passes_n_and_a_shared_input_is_forwarded():
    plan = compile_program(Soft().trace(x=((16,), F32)), NPU2)
    assert plan.function("g1").steps == (
        KernelStep.of(Softmax, np.float32, (Ptr(FifoId("g0", Stem.OUT)), Ptr(FifoId("g1", Stem.HOST)), Imm(1), Imm(16), Imm(16))),)
    assert plan.function("g0").steps[-1] == KernelStep.of(Copy, np.float32, (Ptr(FifoId("g0", Stem.IN)), Ptr(FifoId("g0", Stem.OUT)), Imm(16)))
    assert (Rule.FORWARD_SHARED_INPUT, "g0 forwards x to g1") in plan.rules


class TwiceInOneGroup(iron.Graph):
    def body(self, x, y):
        return Add.step(Add.step(x, y), y)


def test_a_tensor_read_twice_by_one_group_is_loaded_once_and_not_forwarded():
    plan = compile_program(TwiceInOneGroup().trace(x=((8,), np.int32), y=((8,), np.int32)), NPU2)
    assert [(f.name, f.nbytes) for f in plan.fifos] == [(FifoId("g0", Stem.IN), 64), (FifoId("g0", Stem.HOST), 32)]
    assert not [rule for rule, _ in plan.rules if rule == Rule.FORWARD_SHARED_INPUT]


def test_a_reader_of_a_state_waits_for_its_writer():
    plan = compile_program(designs.WriteThenRead().trace(x=((8,), F32)), NPU2)
    ops = [(type(op).__name__, op.fifo, getattr(op, "bd_id", None)) for op in plan.sequence]
    assert ops == [("Dma", FifoId("g0", Stem.IN), 0), ("Dma", FifoId("g0", Stem.IN), 1), ("Dma", FifoId("g0", Stem.HOST), 2), ("Wait", FifoId("g0", Stem.HOST), None),
                   ("Dma", FifoId("g1", Stem.IN), 2), ("Dma", FifoId("g1", Stem.HOST), 3), ("Wait", FifoId("g1", Stem.HOST), None)]


class Seeded(iron.Graph):
    """A first version takes the first trail entry as a tensor; the body copies the last one."""

    def __init__(self):
        self.trail = iron.state((8,), np.int32, name="trail")

    def body(self, x=None, *, pos: Carried[np.int32]):
        Copy.step(x if x is not None else self.trail[pos], self.trail[pos + 1])
        return iron.carry(pos=pos + 1)


def test_the_emit_of_a_first_version_writes_the_words_of_the_body_it_feeds():
    graph = Seeded()
    body = compile_program(graph.trace(), NPU2)
    first = compile_program(graph.trace(x=((), np.int32)), NPU2, feeds=body)
    assert [(w.bound, w.sink) for w in first.words] == [(None, None), ((0, 8), None), (None, 8)]
    assert [(w.bound, w.sink) for w in body.words] == [(None, None), ((0, 8), None), ((0, 8), None), (None, 8)]
    assert first.emit.target_words == body.words
    flag, s, sunk = FLAG, SCRATCH, Ptr(FEEDBACK, 12)
    assert first.function("emit").steps == (
        ScalarStep(flag, WordOp.COPY, Load(EMIT_IN, 12)),          # first's own flag, after its 3 words
        ScalarStep(Ptr(FEEDBACK), WordOp.COPY, Load(EMIT_IN, 4)),
        ScalarStep(Ptr(FEEDBACK, 4), WordOp.COPY, Load(FEEDBACK)),
        *clamped(Ptr(FEEDBACK, 4)),
        ScalarStep(Ptr(FEEDBACK, 8), WordOp.ADD, Load(FEEDBACK), Imm(1)),
        *clamped(Ptr(FEEDBACK, 8)),
        ScalarStep(sunk, WordOp.COPY, Load(FEEDBACK, 8)),
        ScalarStep(s, WordOp.MIN, Load(FEEDBACK, 16), Imm(1)),     # s = 1 when nothing was flagged, else 0
        ScalarStep(s, WordOp.MUL, Load(FEEDBACK, 20), Imm(-1)),
        ScalarStep(s, WordOp.ADD, Load(FEEDBACK, 20), Imm(1)),
        ScalarStep(sunk, WordOp.SUB, Load(FEEDBACK, 12), Imm(8)),  # the write's word, or 8: trail's 8 words on
        ScalarStep(sunk, WordOp.MUL, Load(FEEDBACK, 12), Load(FEEDBACK, 20)),
        ScalarStep(sunk, WordOp.ADD, Load(FEEDBACK, 12), Imm(8)))


FLAG, SCRATCH = Ptr(FEEDBACK, 16), Ptr(FEEDBACK, 20)   # after the body's 4 words


def clamped(word):
    """The Emit's steps clamping `word` into 0..7 and counting a violation in the flag word."""
    def at(ptr):
        return Load(ptr.source, ptr.offset)
    flag, s = FLAG, SCRATCH
    return (ScalarStep(s, WordOp.MAX, at(word), Imm(-1)), ScalarStep(s, WordOp.MIN, at(s), Imm(8)),
            ScalarStep(word, WordOp.MAX, at(s), Imm(0)), ScalarStep(word, WordOp.MIN, at(word), Imm(7)),
            ScalarStep(s, WordOp.SUB, at(s), at(word)), ScalarStep(s, WordOp.MUL, at(s), at(s)),
            ScalarStep(flag, WordOp.ADD, at(flag), at(s)))


def test_feeds_with_other_carried_values_or_device_are_refused():
    graph = Seeded()
    with pytest.raises(LoopError) as err:
        compile_program(graph.trace(), NPU2, feeds=walk_plan(NPU2))
    quoted(err.value, "Seeded", "(pos)", "Walk", "(node, steps)", "Carried")
    with pytest.raises(LoopError) as err:
        compile_program(graph.trace(), NPU2, feeds=compile_program(graph.trace(), from_name("npu2_1col")))
    quoted(err.value, "Seeded", "npu2", "npu2_1col")
