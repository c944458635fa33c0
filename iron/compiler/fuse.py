"""Fusion: a Program's live kernel calls, in program order, grouped into one group per core
invocation. A call joins the open group unless one of RULES (plain functions `rule(group, call)
-> bool`, tried in order) says stop; the group then closes, recording that rule. Rules read the
kernels' declared Roles, never their classes."""
from __future__ import annotations

from dataclasses import dataclass

from aie_utils.devices import COMPUTE_TILE
from iron.compiler.tiling import streamable
from iron.ir import Node, Op, Program, external_inputs, is_gather, nbytes, storage, tensor_inputs
from iron.kernels.base import Role

MAX_INPUTS = 4
SIZE_LIMIT = COMPUTE_TILE.data_memory_bytes // 2
STREAM_OBJECT_BYTES = 16 * 1024   # a streamed matrix holds at most this much in L1 at a time
END = "end of body"


@dataclass(frozen=True)
class Group:
    """Kernel calls run by one core invocation; `closed_by` is the rule that closed it."""

    name: str
    calls: tuple[Node, ...]
    closed_by: str


def fuse(program: Program) -> tuple[Group, ...]:
    """The groups of `program`'s live calls, greedy in program order."""
    groups: list[Group] = []
    open_calls: list[Node] = []
    for call in live_calls(program):
        rule = next((r for r in RULES if open_calls and r(open_calls, call)), None)
        if rule is not None:
            groups.append(Group(f"g{len(groups)}", tuple(open_calls), rule.__name__))
            open_calls = []
        open_calls.append(call)
    if open_calls:
        groups.append(Group(f"g{len(groups)}", tuple(open_calls), END))
    return tuple(groups)


def live_calls(program: Program) -> list[Node]:
    """The calls whose effect is seen: state writes, outputs, carried elements, and what they use."""
    needed = set(program.outputs)
    needed |= {v.src[0] for _, v in program.carry if v.op == Op.ELEM}
    live = []
    for call in reversed(program.calls):
        if call.arg.writes or call in needed:
            live.append(call)
            needed |= {storage(n) for n in call.src}
    return live[::-1]


def held_bytes(calls: list[Node]) -> int:
    """What a group holds on its tile, estimated: every external input (a matrix operand at most
    one stream object) and every call's result."""
    matrices = {c.src[0] for c in calls if role(c) is Role.MATRIX}
    total = sum(min(nbytes(n), STREAM_OBJECT_BYTES) if n in matrices else nbytes(n)
                for n in external_inputs(calls))
    return total + sum(nbytes(c) for c in calls)


# ---- the rules ---------------------------------------------------------------------------------

def role(call: Node) -> Role:
    """The Role the called kernel declares."""
    return call.arg.kernel.role


def matrix_op_starts_group(group: list[Node], call: Node) -> bool:
    """A matrix call (MatVec, MatMul) begins a new group; after one, only elementwise calls
    (Add, SiLU, Copy, ...) may join, as its epilogue."""
    if role(call) is Role.MATRIX:
        return True
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
    """A group holds at most half a compute tile's memory (inputs and results, see held_bytes),
    but a group already larger than that which `stream_elementwise` can stream in blocks
    takes further elementwise calls it can stream with it."""
    if held_bytes(group) > SIZE_LIMIT and streamable([*group, call]):
        return False
    return held_bytes([*group, call]) > SIZE_LIMIT


def unrelated_starts_group(group: list[Node], call: Node) -> bool:
    """A call using none of the open group's results starts a new group (it can run beside it)."""
    made = set(group)
    return not any(n in made for n in tensor_inputs(call))


RULES = (
    matrix_op_starts_group,
    reduction_ends_group,
    state_write_ends_group,
    gather_starts_group,
    input_limit,
    size_limit,
    unrelated_starts_group,
)
