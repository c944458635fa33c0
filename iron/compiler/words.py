"""The per-call scratchpad (a Program's words) and where host tensors lie, in words. `WordTable`
numbers the per-call values (in body()'s parameter order) and derives, once each, the words a
call needs: bounded indices, DMA offsets patched into Dma ops, core operands and carried values'
next values. `view_access` turns a host tensor or a view of one into a word access pattern,
refusing views the DMA cannot move in whole 32-bit words."""
from __future__ import annotations

import math
from copy import copy
from dataclasses import dataclass, replace

import numpy as np

from iron import dtypes
from iron.errors import PlacementError
from iron.ir import MemoryKind, Node, Op, Program, describe, frame, kept
from iron.plan.plan import Const, Operand, WordDef, WordKind, WordOp, WordRef
from iron.plan.rules import Decision, Rule


class WordTable:
    """The words of one Program, grown while the compiler walks its calls."""

    def __init__(self, program: Program):
        self.words: list[WordDef] = [
            WordDef(i, v.arg.name, WordKind(v.arg.kind.value)) for i, v in enumerate(program.scalars)
        ]
        self._by_var = {v.arg.name: i for i, v in enumerate(program.scalars)}
        self._by_key: dict[tuple, int] = {}   # (op, a, b, bound) -> the word computing it

    def defs(self) -> tuple[WordDef, ...]:
        return tuple(self.words)

    def copy(self) -> WordTable:
        """A table that grows apart from this one (a segment compiled on trial, segment.py)."""
        twin = copy(self)
        twin.words, twin._by_key = list(self.words), dict(self._by_key)
        return twin

    def operand(self, node: Node, kind: WordKind) -> Operand:
        """A constant, or the word computing `node`."""
        if node.op == Op.CONST:
            return Const(node.arg)
        return WordRef(self.word(node, kind))

    def word(self, node: Node, kind: WordKind) -> int:
        """The word holding scalar expression `node` (a value word, or a derived one)."""
        if node.op == Op.VAR:
            return self._by_var[node.arg.name]
        if node.op == Op.CONST:
            return self._derived(WordOp.COPY, Const(node.arg), None, kind, str(node.arg))
        a, b = (self.operand(s, kind) for s in node.src)
        return self._derived(WordOp(node.op), a, b, kind, describe(node))

    def bounded(self, node: Node, lo: int, hi: int, what: str, kind: WordKind, tensor: str = "") -> int:
        """The word holding `node`, which must lie in [lo, hi) (`what`: the user's text, `tensor`:
        the tensor it indexes, '' for an attribute). A carried value is bounded through a copy:
        the Emit clamps bounded words in place, and a carried value must reach the next call as is."""
        index = self.word(node, kind)
        held = self.words[index]
        if held.bound is None and held.kind is not WordKind.CARRIED:
            self.words[index] = replace(held, bound=(lo, hi), what=what, tensor=tensor)
            return index
        if held.bound == (lo, hi):
            return index
        copy = self._derived(WordOp.COPY, WordRef(index), None, kind, held.name, key_extra=(lo, hi))
        if self.words[copy].bound is None:
            self.words[copy] = replace(self.words[copy], bound=(lo, hi), what=what, tensor=tensor)
        return copy

    def next_value(self, node: Node) -> int:
        """The word holding a carried value's next value (a value word, or a "next" word)."""
        return self.word(node, WordKind.NEXT)

    def offset(self, terms: list[tuple[int, int]]) -> int:
        """The "dma" word sum(word * stride) over `terms` of (word index, stride in words)."""
        parts = [WordRef(w) if stride == 1 else WordRef(self._scaled(w, stride)) for w, stride in terms]
        total = parts[0]
        for part in parts[1:]:
            text = f"{self._text(total)} + {self._text(part)}"
            total = WordRef(self._derived(WordOp.ADD, total, part, WordKind.DMA, text))
        return total.index

    def sunk(self, patch: int | None, sink: int) -> int:
        """The patch word of a state write: a copy of its index's patch word (0 for a write at a
        fixed offset, `patch` None), which a flagged run's Emit sets to `sink` instead (the write
        then lies in the states' sink)."""
        source, name = (Const(0), "0") if patch is None else (WordRef(patch), self.words[patch].name)
        index = self._derived(WordOp.COPY, source, None, WordKind.DMA, name, key_extra=("sink", sink))
        self.words[index] = replace(self.words[index], sink=sink)
        return index

    def _scaled(self, word: int, stride: int) -> int:
        text = f"{self._text(WordRef(word))} * {stride}"
        return self._derived(WordOp.MUL, WordRef(word), Const(stride), WordKind.DMA, text)

    def _text(self, operand: Operand) -> str:
        if isinstance(operand, Const):
            return str(operand.value)
        name = self.words[operand.index].name
        return f"({name})" if " " in name else name

    def _derived(self, op: WordOp, a: Operand, b: Operand | None, kind: WordKind, name: str, key_extra=None) -> int:
        key = (op, a, b, key_extra)
        index = self._by_key.get(key)
        if index is None:
            index = self._by_key[key] = len(self.words)
            self.words.append(WordDef(index, name, kind, op, a, b))
        elif kind is WordKind.CORE and self.words[index].kind is WordKind.DMA:
            self.words[index] = replace(self.words[index], kind=WordKind.CORE)
        return index


# ---- where a host tensor lies, in words ----------------------------------------------------------

@dataclass(frozen=True)
class Access:
    """A host tensor's words: offset + sum(i_d * stride_d) for i_d < size_d over `dims` (outermost
    first, the last with stride 1), plus the value of `patch_word`."""

    offset: int
    dims: tuple[tuple[int, int], ...]
    patch_word: int | None = None

    @property
    def nwords(self) -> int:
        return int(math.prod(size for size, _ in self.dims))


def placement_access(p) -> Access:
    """The words of placement `p`'s tensor: contiguous, or, where `pad_to_block` widened its rows,
    each row at the padded row's stride (only the grid or flow it was padded for touches the
    padding, so it stays zeros)."""
    whole = Access(p.offset, ((nwords(int(math.prod(p.shape)), p.dtype), 1),))
    if p.padded is None or p.padded[1:] == p.shape[1:]:
        return whole
    (rows, width), stride = p.shape, p.padded[1] * p.dtype.itemsize
    if width * p.dtype.itemsize % 4:
        raise PlacementError(
            f"{p.shown or p.name} lies padded to {p.padded} and its rows of {width} {dtypes.name(p.dtype)} "
            "elements are not whole 32-bit words, so only the grid it was padded for can move it: keep it for "
            "that one call, or give it rows of whole words."
        )
    return Access(p.offset, ((rows, stride // 4), (width * p.dtype.itemsize // 4, 1)))


def word_rows(program: Program, padded: dict) -> dict[str, tuple[int, ...]]:
    """The rule `pad_rows_to_words`: a weight, param or state whose rows are not whole 32-bit
    words, used only through views, lies with each row padded to whole words when a view of it
    cannot move as it is and every view can move padded (name -> the shape it lies in); the
    runtime writes and reads the user's region. `padded`: the tensors `pad_to_block` laid out."""
    found = {}
    for memory, seen in viewed_only(program).items():
        shape, itemsize = memory.shape, memory.dtype.itemsize
        if memory.op != Op.MEMORY or memory in padded or len(shape) < 2 or shape[-1] * itemsize % 4 == 0:
            continue
        lies = (*shape[:-1], -(-shape[-1] * itemsize // 4) * 4 // itemsize)
        if not all(dma_moves(v) for v in seen) and all(dma_moves(v, lies, True) for v in seen):
            found[memory.arg.name] = lies
    return found


def word_leads(program: Program, padded: dict, rows: dict) -> dict[str, int]:
    """The rule `pad_lead_to_words`: a host input, weight or param used only through views, some
    starting mid-word (`x[1:]` of bfloat16), lies after the fewest elements of padding that start
    every view on a word, when some do (name -> how many). A state keeps its first word: every
    version of a graph shares its layout. `padded`, `rows`: the tensors the other rules laid out."""
    found = {}
    for base, seen in viewed_only(program).items():
        name = base.arg.name
        if base.op == Op.MEMORY and base.arg.kind is MemoryKind.STATE or base in padded or name in rows or all(dma_moves(v) for v in seen):
            continue
        lead = next((n for n in range(1, 4 // base.dtype.itemsize) if all(dma_moves(v, lead=n) for v in seen)), 0)
        if lead:
            found[name] = lead
    return found


def viewed_only(program: Program) -> dict[Node, list[Node]]:
    """Each input or declared memory `program` uses only through views (never whole, returned
    or carried), with those views."""
    views: dict[Node, list[Node]] = {}
    whole = {*program.outputs, *(node for _, value in program.carry for node in value.src)}
    for call in program.calls:
        for node in call.src:
            if node.op == Op.VIEW and node.src[0].op in (Op.INPUT, Op.MEMORY):
                views.setdefault(node.src[0], []).append(node)
            else:
                whole.add(node)
    return {base: seen for base, seen in views.items() if base not in whole}


def layout_rules(placements) -> list[Decision]:
    """`pad_rows_to_words` and `pad_lead_to_words` as describe() shows them: each tensor they laid out."""
    lines = []
    for p in placements:
        kind, shape, dtype, size = p.kind.value, p.shape, dtypes.name(p.dtype), p.dtype.itemsize
        if p.word_rows:
            lines.append((Rule.PAD_ROWS_TO_WORDS, f"{kind} '{p.name}' {shape} {dtype} lies in {p.padded}: each row of "
                          f"{shape[-1] * size} bytes padded to {p.padded[-1] * size}, whole 32-bit words, so its "
                          f"views move at the padded stride; the host writes and reads its {shape}"))
        if p.lead:
            lines.append((Rule.PAD_LEAD_TO_WORDS, f"{kind} '{p.name}' {shape} {dtype} lies after {p.lead * size} bytes "
                          f"of padding, so every view of it starts on a word; the host writes its {shape} there"))
    return lines


def dma_moves(view: Node, padded: tuple[int, ...] | None = None, word_rows: bool = False, lead: int = 0) -> bool:
    """Whether the DMA moves `view` in whole words as its base lies."""
    return moved_words(view, padded, word_rows, lead) is not None


def moved_words(view: Node, padded: tuple[int, ...] | None = None, word_rows: bool = False, lead: int = 0):
    """`view_words`, or None where it refuses."""
    try:
        return view_words(view, padded, word_rows, lead)
    except PlacementError:
        return None


def nwords(elements: int, dtype: np.dtype) -> int:
    return max(1, -(-elements * np.dtype(dtype).itemsize // 4))


def base_text(node: Node) -> str:
    """How a message names the tensor a view picks from: `input 'x'`, `state 'kv'`, `MatMul(a, w)`."""
    return describe(node) if node.op == Op.CALL else f"{'input' if node.op == Op.INPUT else node.arg.kind} '{node.arg.name}'"


def view_access(view: Node, table: WordTable, p) -> Access:
    """The words of VIEW `view` within placement `p` of its base, as the layout rules laid it out;
    its dynamic indices become bounded "dma" words summed into one patch word."""
    static, dims, steps = view_words(view, p.padded, p.word_rows, p.lead)
    memory = view.src[0]
    terms = [(table.bounded(view.src[axis.dynamic], 0, axis.offsets, describe(view), WordKind.DMA, describe(memory)),
              step) for axis, step in steps]
    first = p.offset + static // 4
    return Access(first, dims, table.offset(terms) if terms else None)


@dataclass(frozen=True)
class Rows:
    """A view lying as rows of whole words at one stride (`stream_view_rows`): its first byte, the
    words from one row to the next (0: a broadcast row), and one row's word dims."""

    first: int
    stride: int
    row: tuple[tuple[int, int], ...]


def row_group(view: Node) -> int:
    """How many of a view's rows (its last axis) make whole 32-bit words together: 1, or 2 or 4
    for rows of 1- or 2-byte elements when its rows divide so (0 when none do)."""
    row_bytes = view.shape[-1] * view.dtype.itemsize if view.shape else 0
    rows = int(math.prod(view.shape[:-1]))
    return next((k for k in (1, 2, 4) if row_bytes and k * row_bytes % 4 == 0 and rows % k == 0), 0)


def view_rows(view: Node, padded: tuple[int, ...] | None = None, word_rows: bool = False, lead: int = 0) -> Rows | None:
    """How a static VIEW's rows (its last axis; `row_group` of them together when one is not
    whole words) lie as its base lies, when each is whole words and every row lies one stride
    after the last; else None."""
    row_bytes = row_group(view) * view.shape[-1] * view.dtype.itemsize if view.shape else 0
    moved = moved_words(view, padded, word_rows, lead) if len(view.src) == 1 and row_bytes else None
    if moved is None:
        return None
    first, dims, _ = moved
    inner, words, outer = [], 1, list(dims)
    while outer and words < row_bytes // 4:
        size, stride = outer.pop()
        share = row_bytes // 4 // words
        if size > share:   # the row ends inside this dimension: its rest goes out, one step of `share`
            if size % share:
                return None
            outer.append((size // share, share * stride))
            size = share
        inner.insert(0, (size, stride))
        words *= size
    outer = [d for d in outer if d[0] > 1]
    if words != row_bytes // 4 or len(outer) > 1:
        return None
    return Rows(first, outer[0][1] if outer else 0, tuple(inner))


def view_words(view: Node, padded: tuple[int, ...] | None = None, word_rows: bool = False, lead: int = 0):
    """(first byte, word dims, (per-call axis, its step in words) ...) of VIEW `view` as its base
    lies (in `padded`, after `lead` elements), or PlacementError when the DMA cannot move it in
    whole words. A run ending where no one's data follows up to the next word (a row's padding,
    `word_rows`, or the base's end) moves to the end of that word."""
    memory, shape = view.src[0], frame(view)
    if padded is not None:
        shape = _padded_frame(view, padded)
    itemsize = memory.dtype.itemsize
    strides = [itemsize * int(math.prod(shape[i + 1:])) for i in range(len(shape))]
    static, steps = lead * itemsize, []
    for number, axis in enumerate(view.arg):
        static += (axis.index if axis.index is not None else axis.start) * strides[number]
        if axis.dynamic is not None:
            _check_step(view, number, view.src[axis.dynamic], strides[number])
            steps.append((axis, strides[number] // 4))
    numbers = {id(a): number for number, a in enumerate(view.arg)}
    picked = [(numbers[id(a)], a.size, a.step * strides[numbers[id(a)]]) for a in kept(view.arg) if a.size > 1]
    row, ends = shape[-1] * itemsize, {(lead + int(math.prod(shape))) * itemsize}
    if padded is not None and len(shape) == len(memory.shape):   # the user's last element, padding after it
        ends.add(lead * itemsize + sum((n - 1) * st for n, st in zip(memory.shape, strides)) + itemsize)

    def free_after(byte: int) -> bool:   # a padded row's end, or the base's (padded or not: nothing after it but padding)
        return (word_rows and byte % row == memory.shape[-1] * itemsize) or (not steps and byte in ends)
    return static, _word_dims(view, static, _merged(picked), itemsize, free_after), steps


def _padded_frame(view: Node, padded: tuple[int, ...]) -> tuple[int, ...]:
    """The shape a view of a padded tensor indexes: the padded one (or, padded after its last row
    only, its own frame: every element lies where it did; so a frame of its rows as they lie,
    wider: `rows_written`)."""
    base = view.src[0].shape
    wider = frame(view)[1:] == padded[1:] and math.prod(frame(view)) > math.prod(base)
    if padded[1:] == base[1:] and frame(view) != base or wider:
        return frame(view)
    if frame(view) != base:
        raise PlacementError(
            f"{describe(view)} reshapes {base_text(view.src[0])}, which lies padded to {padded} in host memory "
            "(pad_to_block): index it in its own shape, or reshape a copy of it."
        )
    return padded


def _merged(kept: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Fold each kept axis into the one outside it when together they are contiguous."""
    merged: list[tuple[int, int, int]] = []
    for number, size, stride in kept:
        if merged and merged[-1][2] == size * stride:
            merged[-1] = (number, merged[-1][1] * size, stride)
        else:
            merged.append((number, size, stride))
    return merged


def _word_dims(view: Node, static: int, merged, itemsize: int, free_after) -> tuple[tuple[int, int], ...]:
    last_axis = len(view.arg) - 1
    if merged and merged[-1][2] == itemsize:
        run_axis, run = merged[-1][0], merged[-1][1] * itemsize
        outer = merged[:-1]
    else:
        run_axis, run, outer = (merged[-1][0] if merged else last_axis), itemsize, merged
    if not outer and run % 4 and static % 4 == 0 and free_after(static + run):   # one run, no one's data after
        run = -(-run // 4) * 4
    if run % 4 or static % 4:
        _refuse_run(view, run_axis, run, static)
    for number, _, stride in outer:
        if stride % 4:
            _refuse_run(view, number, run, static)
    return (*((size, stride // 4) for _, size, stride in outer), (run // 4, 1))


def _check_step(view: Node, axis: int, expr: Node, stride: int):
    if stride % 4:
        name = view.src[0].arg.name
        raise PlacementError(
            f"{describe(view)} indexes axis {axis} of {base_text(view.src[0])} with per-call value "
            f"'{describe(expr)}', but one step along that axis is {stride} bytes and the device's "
            f"DMA offsets count whole 4-byte words. Pad '{name}' so each entry of axis {axis} "
            "spans a multiple of 4 bytes."
        )


def _refuse_run(view: Node, axis: int, run: int, static: int):
    name = describe(view.src[0])
    raise PlacementError(
        f"{describe(view)} moves runs of {run} bytes of {base_text(view.src[0])} ({dtypes.name(view.dtype)}) "
        f"from byte {static} along axis {axis}, and the device's DMA moves whole 4-byte words "
        f"on 4-byte boundaries. Pad or index '{name}' so each contiguous run starts and ends on "
        "a 4-byte boundary."
    )
