"""The layout pass's decisions as typed facts: one small frozen dataclass per kind of padding
decision, recorded once for the design by `pad_to_block` (`facts_of`) from the layout it chose,
each with its Rule and one printer (`__str__`, the describe() line); plan.rules holds
(rule, fact), so tests select and compare facts, never prose. Calls are named by their labels
("MatMul#0"), tensors as describe() names them, shapes as they lie. Also the refusals
(DoesNotFit) of a MatMul with no grid or elementwise calls with no block of whole words, naming
why the layout pass did not pad them."""
from __future__ import annotations

from dataclasses import dataclass

from iron.compiler.fuse import Group, held_bytes
from iron.compiler.layout import (
    Lies,
    best_sides,
    carried,
    lone_product,
    padded_sides,
    result_of,
    sides_as_lying,
    upstream,
    word_rows,
)
from iron.compiler.pad_why import PLAIN, fits_tile, reads_region, stream_unpadded
from iron.compiler.plan import Fill
from iron.compiler.rules import Rule
from iron.compiler.streaming import streamable
from iron.compiler.tiling import MAX_BLOCK, call_sides, choose_grid, core_room, divisors
from iron.errors import DoesNotFit
from iron.ir import (
    Node,
    Op,
    Program,
    call_label,
    describe,
    destination,
    external_inputs,
    nbytes,
    state_of,
    state_written_whole,
)
from iron.kernels.base import Role

Sides = tuple[int, int, int]


def _names(names) -> str:
    return ", ".join(names)


@dataclass(frozen=True)
class PaddedGrid:
    """A MatMul or MatVec computing on padded sides (M, K, N; a MatVec's N is 1): `own` ->
    `sides`, by `rule`: pad_to_block, pad_k_only (M and N its own: its result keeps its shape),
    pad_m_to_words (a MatVec's M to whole words of results), pad_wider (a quantum of K_QUANTUM);
    `fills`: what the padding of A and of B holds (K's must be zeros in both)."""

    group: str
    call: str
    own: Sides
    sides: Sides
    rule: Rule = Rule.PAD_TO_BLOCK
    fills: tuple[Fill | None, Fill | None] = (Fill.ZEROS, Fill.ZEROS)

    def __str__(self) -> str:
        changed = ", ".join(f"{n} {a} -> {b}" for n, a, b in zip("MKN", self.own, self.sides) if a != b)
        fills = ", ".join(f"of {op}: {fill.value}" for op, fill in zip("AB", self.fills) if fill is not None)
        result = "its result keeps its own shape" if self.rule is Rule.PAD_K_ONLY else \
            "its result's padding is computed from zeros, never read as the user's region"
        return f"{self.group}: {self.call} padded ({changed}); padding {fills}; {result}"


@dataclass(frozen=True)
class Unpadded:
    """A MatMul or MatVec whose sides are not multiples of their quanta left on them, and why."""

    group: str
    call: str
    why: str
    rule = Rule.PAD_TO_BLOCK

    def __str__(self) -> str:
        return f"{self.group}: {self.call} is not padded: {self.why}"


STREAMED = {   # how a stream's tensors came to lie padded, by rule
    Rule.PAD_TO_BLOCK: "padded with zeros; the host writes and reads the user's region",
    Rule.PAD_THROUGH_ELEMENTWISE: "as a padded product's result lies, the other inputs padded with zeros; each "
                                  "element of the padding computed from padding, only the user's region read",
    Rule.PAD_PASSED_ON: "as elementwise calls over a padded product's layout left it, each element of the padding "
                        "computed from padding, only the user's region read",
    Rule.PAD_UPSTREAM_ZEROS: "padded with zeros: its kernels keep zeros, so the padding a padded MatMul sums over "
                             "is zeros",
    Rule.PAD_THROUGH_ROWS: "as a padded product's rows lie, each row its own width; only the user's rows read",
    Rule.PAD_THROUGH_ROW_WIDTH: "as a padded product's rows lie, wider: its kernel reduces each row's first (the "
                                "user's) elements only, never the padding",
    Rule.PAD_UPSTREAM_ROWS: "padded with zeros to the layout a padded MatMul reads its result in as A: its kernel "
                            "writes 0 past each row's length, and a row of zeros reduces to a finite row",
}


@dataclass(frozen=True)
class PaddedStream:
    """Streamed calls (elementwise, or a row reduction) over tensors lying padded: the result (or
    the rows reduced) of `own` shape lies in `lies`, by `rule` (the keys of STREAMED), in the
    layout of `products` (one or several, `pad_joined`) when they stream over a product's."""

    group: str
    call: str
    own: tuple[int, ...]
    lies: tuple[int, ...]
    rule: Rule = Rule.PAD_TO_BLOCK
    products: tuple[str, ...] = ()

    def __str__(self) -> str:
        layout = f" (the layout of {_names(self.products)})" * bool(self.products)
        return f"{self.group}: {self.call} streams over {self.own} lying padded to {self.lies}{layout}, " \
               f"{STREAMED[self.rule]}"


@dataclass(frozen=True)
class Written:
    """A computed tensor or a state lying padded whose writers (`by`) write its user's region
    only, row by row at the padded stride, so its padding stays the zeros the buffer is made with."""

    tensor: str
    lies: tuple[int, ...]
    by: tuple[str, ...]   # none: a state only the host writes
    rule = Rule.PAD_WRITTEN_BY_PRODUCER

    def __str__(self) -> str:
        return f"{self.tensor} lies padded to {self.lies}, written in its user's region only (by " \
               f"{_names(self.by) or 'the host'}), so its padding stays the zeros the buffer is made with"


@dataclass(frozen=True)
class KeptZeros:
    """Elementwise calls (`by`, and those that passed the layout on to them) over a padded layout
    keep zeros, so the padding of `tensor`, which MatMuls read padded (`read`: "MatMul#2 as A"), is zeros."""

    group: str
    by: tuple[str, ...]
    tensor: str
    lies: tuple[int, ...]
    read: tuple[str, ...]
    rule = Rule.PAD_THROUGH_ZEROS

    def __str__(self) -> str:
        return f"{self.group}: {_names(self.by)} keep zeros, so the padding of {self.tensor} lying padded to " \
               f"{self.lies}, read by {_names(self.read)}, is zeros"


@dataclass(frozen=True)
class SharedStream:
    """An input several streamed groups read (`read`), padded once for them all."""

    tensor: str
    lies: tuple[int, ...]
    read: tuple[str, ...]
    rule = Rule.PAD_SHARED_STREAM

    def __str__(self) -> str:
        return f"{self.tensor} lies padded once to {self.lies} for {_names(self.read)}"


@dataclass(frozen=True)
class Region:
    """Calls reading a padded tensor's user's region only (`rule`: pad_row_region, a row
    reduction of a vector told its length; pad_tile_region, a group fitting a tile, whose DMA
    moves each padded row's first elements)."""

    group: str
    calls: tuple[str, ...]
    tensor: str
    lies: tuple[int, ...]
    rule: Rule = Rule.PAD_TILE_REGION

    def __str__(self) -> str:
        return f"{self.group}: {_names(self.calls)} read {self.tensor} where it lies padded to {self.lies}, its " \
               "user's region only"


@dataclass(frozen=True)
class SharedSides:
    """Products sharing `tensors` (or read as A and B by `pairs`), padded alike to `sides` each
    (in `calls`' order), or left on their own sides (`why`)."""

    tensors: tuple[str, ...]
    calls: tuple[str, ...]
    sides: tuple[Sides, ...]
    pairs: tuple[str, ...] = ()
    why: str = ""
    rule = Rule.PAD_SHARED_INPUT

    def __str__(self) -> str:
        head = f"{_names(self.tensors)} read by {_names(self.calls)}" if self.tensors else \
            f"{_names(self.calls)}, read as A and B by {_names(self.pairs)},"
        if self.why:
            return f"{head} stay unpadded: {self.why}"
        return f"{head} padded alike: " + "; ".join(f"{c} on (M, K, N) = {s}" for c, s in zip(self.calls, self.sides))


# ---- the facts of a design's layout ---------------------------------------------------------------

def facts_of(program: Program, groups: tuple[Group, ...], lies: dict[Node, Lies], readers: dict,
             device, refused: dict[Node, str]) -> list:
    """The facts of the layout `pad_to_block` chose (`lies`), in program order, and of the products
    it left on their own sides, saying why (`refused`)."""
    label = {c: call_label(program, c) for g in groups for c in g.calls}
    group_of = {c: g for g in groups for c in g.calls}
    shapes = {n: lie.shape for n, lie in lies.items()}
    found = []
    for group in groups:
        first = group.calls[0]
        role = first.arg.kernel.role
        if first in refused:
            found.append(Unpadded(group.name, label[first], refused[first]))
        if role is Role.MATRIX and (sides := sides_as_lying(first, shapes)) and sides != call_sides(first):
            fills = tuple(lies[n].fill if n in lies else None for n in first.src[:2])
            found.append(PaddedGrid(group.name, label[first], call_sides(first), sides,
                                    _grid_rule(first, sides, device), fills))
        elif role in (Role.ELEMENTWISE, Role.ROW_REDUCTION):
            found += _stream_facts(group, lies, readers, group_of, label)
    for node, lie in lies.items():
        writers = _writers(node, lie, program, group_of, label)
        if writers is not None:
            found.append(Written(describe(node), lie.shape, writers))
        users = [u for u in readers.get(node, []) if isinstance(u, Node)]
        if node.op != Op.CALL and len(set(users)) > 1 and all(u.arg.kernel.role is Role.ELEMENTWISE for u in users):
            found.append(SharedStream(describe(node), lie.shape, tuple(label[u] for u in users)))
        found += _region_facts(node, lie.shape, users, group_of, label)
    return found


def _grid_rule(call: Node, sides: Sides, device) -> Rule:
    own = call_sides(call)
    if sides[::2] == own[::2]:
        return Rule.PAD_K_ONLY
    quantum = padded_sides(call, device)
    if len(call.shape) == 1 and sides[0] == word_rows(call) not in (quantum[0], own[0]):
        return Rule.PAD_M_TO_WORDS
    near = (word_rows(call), *own[1:])
    if not all(side in options for side, *options in zip(sides, own, near, quantum)):
        return Rule.PAD_WIDER
    return Rule.PAD_TO_BLOCK


def _stream_facts(group: Group, lies: dict[Node, Lies], readers: dict, group_of: dict, label: dict) -> list:
    """The facts of elementwise calls or a row reduction whose result lies padded and which compute
    over a padded layout (a result its producer writes padded, `Written`, computes on its own)."""
    calls, first = group.calls, group.calls[0]
    result = result_of(calls[-1])
    if result not in lies or lies[result].fill is Fill.WRITTEN:
        return []
    if first.arg.kernel.role is Role.ROW_REDUCTION:
        x = first.src[0]
        if x not in lies:
            return []
        if x.op == Op.CALL:
            how = Rule.PAD_THROUGH_ROW_WIDTH if lies[x].shape[1:] != x.shape[1:] else Rule.PAD_THROUGH_ROWS
        elif any(isinstance(u, Node) and u.arg.kernel.role is Role.MATRIX for u in readers.get(first, [])):
            how = Rule.PAD_UPSTREAM_ROWS
        else:
            how = Rule.PAD_TO_BLOCK
        return [PaddedStream(group.name, label[first], x.shape, lies[x].shape, how)]
    inputs = external_inputs(calls)
    products, passed = upstream(inputs, group_of)
    if len(result.shape) == 1 or not any(n.op == Op.CALL for n in inputs):
        how = Rule.PAD_TO_BLOCK if len(result.shape) == 1 else Rule.PAD_UPSTREAM_ZEROS
    else:   # over a product's layout, or over one elementwise calls passed on
        how = Rule.PAD_PASSED_ON if any(n in lies and n.op == Op.CALL and lone_product(group_of[n]) is None
                                        and carried(n, group_of) for n in inputs) else Rule.PAD_THROUGH_ELEMENTWISE
    found = [PaddedStream(group.name, label[calls[-1]], result.shape, lies[result].shape, how,
                          tuple(label[p] for p in products))]
    read = tuple(f"{label[u]} as {'A' if u.src[0] is result else 'B'}" for u in readers.get(result, [])
                 if isinstance(u, Node) and u.arg.kernel.role is Role.MATRIX)
    if read:
        order = list(group_of)
        makers = sorted({*calls, *(c for g in passed for c in g.calls)}, key=order.index)
        found.append(KeptZeros(group.name, tuple(label[c] for c in makers), describe(result), lies[result].shape, read))
    return found


def _writers(node: Node, lie: Lies, program: Program, group_of: dict, label: dict) -> tuple[str, ...] | None:
    """The calls writing `node`'s user's region only where it lies padded (`Written`): its group
    when its producer writes it (Fill.WRITTEN), or the calls writing a state through views; None
    for a tensor no call writes so."""
    if lie.fill is Fill.WRITTEN and node in group_of:
        return tuple(label[c] for c in group_of[node].calls)
    if node.op == Op.MEMORY and state_of(node) is not None and not any(state_written_whole(c) is node for c in program.calls):
        return tuple(label[c] for c in program.calls if c.arg.writes and destination(c).op == Op.VIEW
                     and destination(c).src[0] is node)
    return None


def _region_facts(node: Node, lies: tuple[int, ...], users: list[Node], group_of: dict, label: dict) -> list:
    """`pad_row_region` and `pad_tile_region`: the readers of `node` that read its user's region only."""
    rowed = [u for u in users if u.arg.kernel.role is Role.ROW_REDUCTION and reads_region(u, node)]
    found = [Region(group_of[u].name, (label[u],), describe(node), lies, Rule.PAD_ROW_REGION) for u in rowed]
    small = [u for u in dict.fromkeys(users) if node.op == Op.CALL and u.arg.kernel.role not in PLAIN
             and u not in rowed and fits_tile(group_of[u], node)]
    for g in dict.fromkeys(group_of[u] for u in small):
        found.append(Region(g.name, tuple(label[u] for u in small if u in g.calls), describe(node), lies))
    return found


# ---- refusals -------------------------------------------------------------------------------------

def check_some_grid(program: Program, call: Node, device, unpadded: str) -> None:
    """A MatMul whose B and result do not fit a tile and for which `tile_matmul_over_array` finds
    no grid even with the whole device to itself is DoesNotFit here, naming the call and why the
    layout pass did not pad it (`unpadded`), instead of failing later as one tile's buffers: its
    blocks divide its sides, so a side with no divisor but small ones (a prime) has none that moves."""
    room = core_room(device)
    held = nbytes(call.src[1]) + nbytes(call)
    if len(call.shape) != 2 or held <= room:
        return
    if choose_grid(call, list(range(device.n_cols)), device.n_cols * len(device.compute_rows), device,
                   device.n_cols * device.shim.dma_out_channels) is not None:
        return
    (big_m, big_k), big_n = call.src[0].shape, call.shape[1]
    sides = (("M", big_m), ("K", big_k), ("N", big_n))
    largest = ", ".join(f"{name} = {side}: {max(divisors(side, 1))}" for name, side in sides)
    padded = ", ".join(f"{name} = {-(-side // 32) * 32}" for name, side in sides)
    raise DoesNotFit(
        f"{program.name}: {call_label(program, call)} ({big_m}, {big_k}) x ({big_k}, {big_n}) {call.dtype.name}: B "
        f"and the result take {held} bytes, more than a compute tile's {room}, and tile_matmul_over_array finds "
        f"no grid of cores for it even on the whole {device.name}: its blocks divide their sides (at most "
        f"{MAX_BLOCK} elements, no padding or remainder block) and must fit a core and move in one DMA op "
        f"each, and the largest dividing blocks are {largest}; pad_to_block did not pad it: "
        f"{unpadded or why_no_padded_grid(call, device)}. Pad the "
        f"matrices with zeros to sides with larger divisors ({padded}), or cut the call into several."
    )


def why_no_padded_grid(call: Node, device) -> str:
    """Why a call the layout pass may pad here has no padded grid: none of its padded sides has
    one, or the design reads or makes its tensors elsewhere (a segment sees its cut values as host
    tensors)."""
    if best_sides(call, device) is None:
        return "no padded sides have a grid either"
    return "the design reads its result or makes its operands elsewhere (another segment)"


def check_whole_words(program: Program, calls, device, readers: dict) -> None:
    """Elementwise calls too large for a tile whose element count no block of whole 32-bit words
    divides (an odd count of 16-bit elements, say), so `stream_elementwise` has no block for them
    even on the whole device, are DoesNotFit here, naming the call and the padding."""
    room = core_room(device)
    size = external_inputs(calls)[0].size
    per_word = max(4 // min(4, n.dtype.itemsize) for n in (*external_inputs(calls), *calls))
    if not streamable(calls) or held_bytes(list(calls)) <= room or size % per_word == 0:
        return
    raise DoesNotFit(
        f"{program.name}: {', '.join(call_label(program, c) for c in calls)} over {size} "
        f"{calls[-1].dtype.name} elements take {held_bytes(list(calls))} bytes, more than a compute tile's {room}, "
        f"and stream_elementwise cuts them into blocks that divide {size} and hold whole 32-bit words ({per_word} "
        f"elements each), of which {size} has none, and pad_to_block did not pad them: "
        f"{stream_unpadded(calls, readers) or 'no padded length streams either'}. Pad the "
        f"tensors to {-(-size // per_word) * per_word} elements, or cut the calls in two."
    )
