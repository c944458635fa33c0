"""Fusion: a Program's live kernel calls, in program order, grouped into one group per core
invocation. A call joins the open group unless one of RULES (`rule(group, call) -> bool`, tried
in order, reading the kernels' declared Roles) says stop; the group then closes, recording it."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from aie_utils.devices import COMPUTE_TILE
from iron.compiler.streaming import streamable
from iron.ir import Node, Op, Program, external_inputs, is_gather, nbytes, storage, tensor_inputs
from iron.kernels.base import Role
from iron.plan.rules import Rule

MAX_INPUTS = 4
SIZE_LIMIT = COMPUTE_TILE.data_memory_bytes // 2
STREAM_OBJECT_BYTES = 16 * 1024   # a streamed matrix holds at most this much in L1 at a time


@dataclass(frozen=True)
class Group:
    """Kernel calls run by one core invocation; `closed_by`: the rule that closed it (None: the end)."""

    name: str
    calls: tuple[Node, ...]
    closed_by: Rule | None


def fuse(program: Program) -> tuple[Group, ...]:
    """The groups of `program`'s live calls, greedy in program order."""
    groups: list[Group] = []
    open_calls: list[Node] = []
    live = live_calls(program)
    met = read_together(live)
    for call in live:
        rule = next((rule for rule, stops in RULES if open_calls and stops(open_calls, call)), None)
        if rule is Rule.UNRELATED_STARTS_GROUP and stream_takes_unrelated(open_calls, call, met):
            rule = None
        if rule is not None:
            groups.append(Group(f"g{len(groups)}", tuple(open_calls), rule))
            open_calls = []
        open_calls.append(call)
    if open_calls:
        groups.append(Group(f"g{len(groups)}", tuple(open_calls), None))
    return tuple(groups)


def live_calls(program: Program) -> list[Node]:
    """The calls whose effect is seen: state writes, outputs, carried elements, and what they use."""
    needed = set(program.kept)
    live = []
    for call in reversed(program.calls):
        if call.arg.writes or call in needed:
            live.append(call)
            needed |= {storage(n) for n in call.src}
    return live[::-1]


def held_bytes(calls: list[Node]) -> int:
    """What a group holds on its tile, estimated: every external input (a matrix at most one
    stream object, shared by a fused expansion's blocks in proportion) and every call's result."""
    return _held_bytes(tuple(calls))


@lru_cache(maxsize=4096)   # asked of the same groups by fusion, layout, placement and every probe
def _held_bytes(calls: tuple[Node, ...]) -> int:
    matrices = {c.src[0] for c in calls if role(c) is Role.MATRIX}
    held = {m: min(nbytes(m), STREAM_OBJECT_BYTES) for m in matrices}
    for m in (m for m in matrices if m in calls and role(m) is Role.EXPANSION):
        both = nbytes(m) + nbytes(m.src[0])
        held |= {n: min(nbytes(n), STREAM_OBJECT_BYTES * nbytes(n) // both) for n in (m, m.src[0])}
    return sum(held.get(n, nbytes(n)) for n in (*external_inputs(calls), *calls))


def expansion(calls) -> Node | None:
    """A group's first call when it expands the matrix the second, a matrix call, reads; else None."""
    if len(calls) > 1 and role(calls[0]) is Role.EXPANSION and role(calls[1]) is Role.MATRIX and calls[1].src[0] is calls[0]:
        return calls[0]
    return None


def leading_call(calls) -> Node:
    """A group's leading call: the matrix call after its expansion, else its first call."""
    return calls[1] if expansion(calls) is not None else calls[0]


def stored_matrix(calls) -> Node:
    """The matrix of a group's leading call as read from outside it: its expansion's blocks, or itself."""
    expanded = expansion(calls)
    return expanded.src[0] if expanded is not None else leading_call(calls).src[0]


# ---- the rules ---------------------------------------------------------------------------------

def role(call: Node) -> Role:
    """The Role the called kernel declares."""
    return call.arg.kernel.role


def dequant_before_matvec(group: list[Node], call: Node) -> bool:
    """An expansion (Dequant's blocks to weights) begins a group, which the matrix call reading
    it joins: the blocks stream to the tile as stored, each expanded just before it is used."""
    return role(call) is Role.EXPANSION


def joins_expansion(group: list[Node], call: Node) -> bool:
    """Whether `call` is the matrix call reading as its matrix what the group, one expansion not gathering, makes."""
    return len(group) == 1 and not group[0].arg.kernel.gathers and expansion((*group, call)) is not None


def matrix_op_starts_group(group: list[Node], call: Node) -> bool:
    """A matrix call begins a group (but joins its matrix's expansion); after one, only elementwise calls join."""
    if role(call) is Role.MATRIX:
        return not joins_expansion(group, call)
    has_matrix = any(role(c) is Role.MATRIX for c in group)
    return has_matrix and role(call) is not Role.ELEMENTWISE


def reduction_ends_group(group: list[Node], call: Node) -> bool:
    """After a row reduction (RMSNorm, Softmax, Argmax) the group closes."""
    return role(group[-1]) is Role.ROW_REDUCTION


def state_write_ends_group(group: list[Node], call: Node) -> bool:
    """A call writing a state (out=) closes its group: later readers see the state in host memory."""
    return group[-1].arg.writes


def gather_starts_group(group: list[Node], call: Node) -> bool:
    """A call reading a view through a per-call index starts a group (its DMA is patched per call)."""
    return any(is_gather(n) for n in tensor_inputs(call))


def input_limit(group: list[Node], call: Node) -> bool:
    """A group reads at most MAX_INPUTS (4) distinct tensors it does not compute."""
    return len(external_inputs([*group, call])) > MAX_INPUTS


def size_limit(group: list[Node], call: Node) -> bool:
    """A group holds at most half a compute tile's memory (`held_bytes`), but a group already
    larger that `stream_elementwise` can stream takes further calls it can stream with it, and a
    matrix call joins the expansion of its matrix whatever its size."""
    if joins_expansion(group, call) or held_bytes(group) > SIZE_LIMIT and streamable([*group, call]):
        return False
    return held_bytes([*group, call]) > SIZE_LIMIT


def unrelated_starts_group(group: list[Node], call: Node) -> bool:
    """A call using none of the open group's results starts a new group (it can run beside it)."""
    made = set(group)
    return not any(n in made for n in tensor_inputs(call))


def read_together(calls: list[Node]) -> dict[Node, set[Node]]:
    """Per call, the calls whose results a later call reads together with its result."""
    met: dict[Node, set[Node]] = {}
    for call in calls:
        made = [n for n in tensor_inputs(call) if n.op == Op.CALL]
        for n in made:
            met.setdefault(n, set()).update(m for m in made if m is not n)
    return met


def stream_takes_unrelated(group: list[Node], call: Node, met: dict[Node, set[Node]]) -> bool:
    """`unrelated_starts_group`'s exception: a group larger than SIZE_LIMIT that streams takes a
    call using none of its results when a later call reads both (the skip add's other operand)
    and they still stream together: one stream then reads both inputs in blocks, where two
    would pass a result the size of the stream through DDR."""
    return held_bytes(group) > SIZE_LIMIT and bool(met.get(call, set()) & set(group)) and streamable([*group, call])


RULES = (   # tried in order: the first saying stop closes the group, which records it
    (Rule.DEQUANT_BEFORE_MATVEC, dequant_before_matvec),
    (Rule.MATRIX_OP_STARTS_GROUP, matrix_op_starts_group),
    (Rule.REDUCTION_ENDS_GROUP, reduction_ends_group),
    (Rule.STATE_WRITE_ENDS_GROUP, state_write_ends_group),
    (Rule.GATHER_STARTS_GROUP, gather_starts_group),
    (Rule.INPUT_LIMIT, input_limit),
    (Rule.SIZE_LIMIT, size_limit),
    (Rule.UNRELATED_STARTS_GROUP, unrelated_starts_group),
)
