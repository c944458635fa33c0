"""The Emit (full-ELF devices only): the core that computes the next call's scratchpad on the
device, so a CarriedLoop runs without the host between calls. It reads this call's words
(`emit_in`) and any carried element a group computed, and writes the target version's words
into `feedback`. `carry_sources` also says where the host finds each next carried value."""
from __future__ import annotations

from dataclasses import dataclass

from iron.compiler.objects import Context
from iron.compiler.plan import (
    Acquire,
    Const,
    Core,
    Direction,
    Element,
    Emit,
    Function,
    Imm,
    Invoke,
    Load,
    Output,
    Port,
    Ptr,
    Release,
    ScalarStep,
    WordKind,
    WordRef,
)
from iron.compiler.sequence import Move
from iron.compiler.words import Access
from iron.ir import Op


@dataclass(frozen=True)
class EmitCore:
    """What the Emit adds to a Plan."""

    emit: Emit
    function: Function
    core: Core
    sizes: dict[str, int]          # emit_in / feedback -> object bytes
    moves: tuple[Move, ...]


def carry_sources(ctx: Context) -> tuple[tuple, tuple]:
    """(for the Emit, for Plan.carry): where each next carried value comes from: a word of this
    call (a value word or a "next" word), or an element a group computed (its `_out` region for
    the Emit, its "carry.<name>" output placement for the host)."""
    emit, host = [], []
    for name, value in ctx.program.carry:
        if value.op == Op.ELEM:
            fifo, offset = ctx.source("emit", value.src[0]) or ("", 0)
            emit.append((name, Element(fifo, offset)))
            host.append((name, Output(f"carry.{name}")))
        else:
            source = WordRef(ctx.table.next_value(value))
            emit.append((name, source))
            host.append((name, source))
    return tuple(emit), tuple(host)


def lower_emit(ctx: Context, next_values: tuple, target) -> EmitCore:
    """The Emit core on the layout's Emit tile, writing `target` (the fed version's words)."""
    tile, words = ctx.layout.emit, len(ctx.table.words)
    elements = list(dict.fromkeys(src.fifo for _, src in next_values if isinstance(src, Element)))
    objects = ("emit_in", *elements, "feedback")
    function = Function("emit", objects, _emit_steps(ctx, dict(next_values), target))
    program = (*(Acquire(f, Port.CONSUME) for f in objects[:-1]), Acquire("feedback", Port.PRODUCE),
               Invoke("emit", objects),
               *(Release(f, Port.CONSUME) for f in objects[:-1]), Release("feedback", Port.PRODUCE))
    core = Core(tile, "emit", program, ctx.device.compute.default_stack_bytes)
    moves = (Move(Direction.MM2S, "emit_in", "words", Access(0, ((words, 1),))),
             Move(Direction.S2MM, "feedback", "feedback", Access(0, ((len(target), 1),))))
    sizes = {"emit_in": 4 * words, "feedback": 4 * len(target)}
    return EmitCore(Emit(tile, tuple(next_values), tuple(target), "feedback"), function, core, sizes, moves)


def _emit_steps(ctx: Context, next_values: dict, target) -> tuple:
    mine = {w.name: w.index for w in ctx.table.words if w.kind.given}

    def load(source):
        if source is None:
            return None
        if isinstance(source, Const):
            return Imm(int(source.value))
        if isinstance(source, Element):
            return Load(source.fifo, source.offset)
        return Load("emit_in", 4 * source.index)

    def target_load(operand):
        if not isinstance(operand, WordRef):
            return load(operand)
        return Load("feedback", 4 * operand.index)

    steps = []
    for w in target:
        dest = Ptr("feedback", 4 * w.index)
        if w.kind is WordKind.CARRIED:
            steps.append(ScalarStep(dest, "copy", load(next_values[w.name])))
        elif w.kind is WordKind.SCRATCHPAD:
            steps.append(ScalarStep(dest, "copy", load(WordRef(mine[w.name]))))
        else:
            steps.append(ScalarStep(dest, w.op, target_load(w.a), target_load(w.b)))
    return tuple(steps)

