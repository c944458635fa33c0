"""The Emit (full-ELF devices only): the core computing the next call's scratchpad on the device,
so a CarriedLoop runs without the host between calls. From this call's words (`emit_in`) and the
carried elements groups computed it writes the target version's words into `feedback`, each
bounded word clamped into its range before any DMA or core reads it, then a flag counting the
words that were not (this call's flag included; the host reads it after each run); a flagged
run's state writes go to the states' sink (`sink_writes`)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from iron.compiler.allocate import state_sink
from iron.compiler.objects import Context, holding
from iron.compiler.sequence import Move
from iron.compiler.words import Access
from iron.ir import Op
from iron.plan.fifos import EMIT, EMIT_IN, FEEDBACK
from iron.plan.plan import (
    Const,
    Core,
    Direction,
    Emit,
    Function,
    HostRole,
    Imm,
    Invoke,
    Load,
    Output,
    PlacementKind,
    Ptr,
    ScalarStep,
    WordDef,
    WordKind,
    WordOp,
    WordRef,
)


@dataclass(frozen=True)
class EmitCore:
    """What the Emit adds to a Plan."""

    emit: Emit
    function: Function
    core: Core
    sizes: dict[str, int]          # emit_in / feedback -> object bytes
    moves: tuple[Move, ...]


def carry_sources(ctx: Context) -> tuple[tuple, tuple]:
    """(for the Emit, for Plan.carry) where each next carried value comes from: a word of this
    call, or an element a group computed (its `_out` region; for the host "carry.<name>")."""
    emit, host = [], []
    for name, value in ctx.program.carry:
        if value.op == Op.ELEM:
            emit.append((name, Load(*(ctx.source(EMIT, value.src[0]) or ("", 0)))))
            host.append((name, Output(f"carry.{name}")))
        else:
            source = WordRef(ctx.table.next_value(value))
            emit.append((name, source))
            host.append((name, source))
    return tuple(emit), tuple(host)


def lower_emit(ctx: Context, next_values: tuple, target) -> EmitCore:
    """The Emit core, writing `target` (the fed version's words)."""
    tile, words = ctx.layout.emit, len(ctx.table.words)
    elements = list(dict.fromkeys(src.source for _, src in next_values if isinstance(src, Load)))
    objects = (EMIT_IN, *elements, FEEDBACK)
    core = Core(tile, EMIT, holding(objects[:-1], (FEEDBACK,), (Invoke(EMIT, objects),)),
                ctx.device.compute.default_stack_bytes)
    emit = Emit(tile, tuple(next_values), tuple(target))
    # this call's words and the flag after them (the scratchpad of a version with an Emit has it)
    moves = (Move(Direction.MM2S, EMIT_IN, HostRole.WORDS.value, Access(0, ((words + 1, 1),))),
             Move(Direction.S2MM, FEEDBACK, HostRole.FEEDBACK.value, Access(0, ((emit.nwords, 1),))))
    sizes = {EMIT_IN: 4 * (words + 1), FEEDBACK: 4 * emit.nwords}
    function = Function(EMIT, objects, _emit_steps(ctx, dict(next_values), emit))
    return EmitCore(emit, function, core, sizes, moves)


def sink_writes(ctx: Context, moves: list[list]) -> list[list]:
    """`moves` with every state write given a patch word (`WordTable.sunk`) whose `sink` value
    moves the write, as it lies in its state, into the states' sink (`state_sink`), so a flagged
    run writes no state. The writes of one state at fixed offsets share one word, so the
    scratchpad grows by a word per state written, plus one per index expression."""
    sink, words = state_sink(ctx.placements, ctx.device.full_elf)
    if not words:
        return moves
    states = [p for p in ctx.placements if p.kind is PlacementKind.STATE]

    def sunk(move):   # a Move, or a Wait a grid puts between its rounds
        if not isinstance(move, Move) or move.direction is not Direction.S2MM or move.buffer != HostRole.STATES.value:
            return move
        access = move.access
        state = next(p for p in states if p.offset <= access.offset < p.offset + p.nwords)
        return replace(move, access=replace(access, patch_word=ctx.table.sunk(access.patch_word, sink - state.offset)))

    return [[sunk(move) for move in group] for group in moves]


def _emit_steps(ctx: Context, next_values: dict, emit: Emit) -> tuple:
    mine = {w.name: w.index for w in ctx.table.words if w.kind.given}

    def load(source):   # an operand of this call's words
        if source is None:
            return None
        if isinstance(source, Const):
            return Imm(int(source.value))
        if isinstance(source, Load):
            return source
        return Load(EMIT_IN, 4 * source.index)

    # a run flagged before this one flags the next too: its words may be in range again
    steps = [_set(emit.flag, WordOp.COPY, Load(EMIT_IN, 4 * len(ctx.table.words)))]
    for w in emit.target_words:
        if w.kind is WordKind.CARRIED:
            steps.append(_set(w.index, WordOp.COPY, load(next_values[w.name])))
        elif w.kind is WordKind.SCRATCHPAD:
            steps.append(_set(w.index, WordOp.COPY, load(WordRef(mine[w.name]))))
        else:   # derived from the target's words written before it
            a, b = (_fed(o.index) if isinstance(o, WordRef) else load(o) for o in (w.a, w.b))
            steps.append(_set(w.index, w.op, a, b))
        if w.bound is not None:
            steps.extend(clamp_steps(w, emit))
    sunk = [w for w in emit.target_words if w.sink is not None]
    if sunk:
        steps.extend(unflagged_steps(emit))
        steps.extend(step for w in sunk for step in sink_steps(w, emit))
    return tuple(steps)


def _set(word: int, op: WordOp, a, b=None) -> ScalarStep:
    """Feedback word `word` = op(a, b)."""
    return ScalarStep(Ptr(FEEDBACK, 4 * word), op, a, b)


def _fed(word: int) -> Load:
    """Feedback word `word` as the Emit has written it."""
    return Load(FEEDBACK, 4 * word)


def unflagged_steps(emit: Emit) -> tuple[ScalarStep, ...]:
    """scratch = 1 if the flag is 0 else 0 (the flag is a count, never negative)."""
    s = emit.scratch
    return (_set(s, WordOp.MIN, _fed(emit.flag), Imm(1)),
            _set(s, WordOp.MUL, _fed(s), Imm(-1)),
            _set(s, WordOp.ADD, _fed(s), Imm(1)))


def sink_steps(w: WordDef, emit: Emit) -> tuple[ScalarStep, ...]:
    """State write patch word `w` = (w - sink) * scratch + sink: itself when the run is not
    flagged, else `w.sink`, which sends the write to the states' sink. w is a sum of clamped
    indices times strides, so within the states buffer, and nothing wraps."""
    i = w.index
    return (_set(i, WordOp.SUB, _fed(i), Imm(w.sink)),
            _set(i, WordOp.MUL, _fed(i), _fed(emit.scratch)),
            _set(i, WordOp.ADD, _fed(i), Imm(w.sink)))


def clamp_steps(w: WordDef, emit: Emit) -> tuple[ScalarStep, ...]:
    """Clamp bounded word `w` into [lo, hi) in place and add 1 to the flag if it was not in range,
    in min/max/sub/mul/add on i32 (no new MLIR or C++ op): s = min(max(w, lo - 1), hi) lies in
    [lo - 1, hi] whatever w is, so s - clamp(s) is -1, 0 or 1 and its square cannot wrap."""
    (lo, hi), word, s, flag = w.bound, w.index, emit.scratch, emit.flag
    return (
        _set(s, WordOp.MAX, _fed(word), Imm(lo - 1)),
        _set(s, WordOp.MIN, _fed(s), Imm(hi)),
        _set(word, WordOp.MAX, _fed(s), Imm(lo)),
        _set(word, WordOp.MIN, _fed(word), Imm(hi - 1)),
        _set(s, WordOp.SUB, _fed(s), _fed(word)),
        _set(s, WordOp.MUL, _fed(s), _fed(s)),
        _set(flag, WordOp.ADD, _fed(flag), _fed(s)),
    )
