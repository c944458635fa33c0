"""Results written whole into a DDR buffer of the compiler's (a THROUGH declaration, placed as a
CUT buffer) and read back once the runtime sequence has waited on the writes, decided before
fusion: a MatVec large enough to tile whose epilogue writes a state (`tile_before_state_write`:
fused, the state write would keep it on one tile), and a result larger than a tile read by
another group (`through_between_groups`)."""
from __future__ import annotations

from dataclasses import replace

from iron.compiler.fuse import joins_expansion, live_calls, role
from iron.compiler.sides import tiled, whole_device_grid
from iron.compiler.tiling import core_room
from iron.ir import (
    Declaration,
    Declared,
    MemoryKind,
    Node,
    Op,
    Program,
    call_label,
    is_host_tensor,
    nbytes,
    tensor_inputs,
)
from iron.kernels.base import Role
from iron.plan.rules import Decision, Rule


def tile_before_state_write(program: Program, device) -> tuple[Program, tuple[Decision, ...]]:
    """`program` with each MatVec the rule takes writing a DDR buffer its readers read, and the
    rule's decisions."""
    taken = [c for c in live_calls(program) if _takes(program, c, device)]
    return write_through(program, taken), tuple((Rule.TILE_BEFORE_STATE_WRITE, _text(program, c)) for c in taken)


def through_between_groups(program: Program, device, padded: frozenset[Node] = frozenset(),
                           groups: tuple = ()) -> tuple[Program, tuple[Decision, ...]]:
    """`through_between_groups`: a result of two or more axes larger than `core_room` is made in
    blocks over many cores, each leaving its column for DDR, and a reader not taking it block by
    block in one group with its maker (`_one_group`; fused in `groups`, an epilogue on a split
    matrix's rows) reads it in blocks from DDR too: so it goes through a DDR buffer within one
    configuration, where a cut would load another. A result laid out `padded`, or one a matrix
    call makes or reads that no grid takes on its own sides (`_in_blocks`), crosses at a cut."""
    room, kept = core_room(device), program.kept
    group_of = {c: g.name for g in groups for c in g.calls}
    taken: dict[Node, list[Node]] = {}
    for reader in live_calls(program):
        for made in tensor_inputs(reader):
            if made.op != Op.CALL or made in kept or made in padded or made.arg.writes or nbytes(made) <= room \
                    or len(made.shape) < 2:   # a vector (a MatVec's) is split by rows or cut, its lanes chosen so
                continue
            fused = made in group_of and group_of.get(made) == group_of.get(reader)   # an epilogue on its rows
            if not fused and not _one_group(made, reader) and _in_blocks(made, device) and _in_blocks(reader, device):
                taken.setdefault(made, []).append(reader)
    return (write_through(program, list(taken)),
            tuple((Rule.THROUGH_BETWEEN_GROUPS, _between_text(program, m, r)) for m, r in taken.items()))


def _one_group(made: Node, reader: Node) -> bool:
    """Whether a reader may take a result larger than a tile in blocks in one group with its
    maker: elementwise calls streamed together, or a matrix call expanding its matrix block by block."""
    both = role(made) is Role.ELEMENTWISE and role(reader) is Role.ELEMENTWISE
    return both or joins_expansion([made], reader)


def _in_blocks(made: Node, device) -> bool:
    """Whether a call makes or reads a result in blocks on its own sides: a matrix call only when
    a grid of blocks dividing them takes the whole device (else it lies padded, or does not fit)."""
    if role(made) is not Role.MATRIX or len(made.shape) != 2:
        return True
    return whole_device_grid(made, device) is not None


def _between_text(program: Program, made: Node, readers: list[Node]) -> str:
    names = ", ".join(dict.fromkeys(call_label(program, r) for r in readers))
    return (f"{call_label(program, made)} ({nbytes(made)} bytes, more than a compute tile holds) writes "
            f"{through_name(program, made)}, a DDR buffer of the compiler's; {names} read{'s' * (len(readers) == 1)} "
            "it back in the same configuration after its writes")


def write_through(program: Program, calls) -> Program:
    """`program` with each of `calls` writing its result whole into a DDR buffer of the
    compiler's and every reader reading that buffer (`program` itself for no calls)."""
    if not calls:
        return program
    buffers = {c: Node(Op.MEMORY, (), c.shape, c.dtype, Declared(MemoryKind.THROUGH, through_name(program, c))) for c in calls}
    memo: dict[Node, Node] = {}

    def rebuilt(node: Node) -> Node:
        if node not in memo:
            src = tuple(buffers[s] if s in buffers else rebuilt(s) for s in node.src)
            if node in buffers:   # the call itself, now writing its buffer whole (out=)
                c = node.arg
                src = (*src[:c.n_inputs], buffers[node], *src[c.n_inputs:])
                memo[node] = Node(Op.CALL, src, node.shape, node.dtype, replace(c, writes=True))
            else:
                same = all(a is b for a, b in zip(src, node.src))
                memo[node] = node if same else Node(node.op, src, node.shape, node.dtype, node.arg)
        return memo[node]

    declared = tuple(Declaration(MemoryKind.THROUGH, b.arg.name, b.shape, b.dtype) for b in buffers.values())
    return replace(program, calls=tuple(rebuilt(c) for c in program.calls),
                   declarations=program.declarations + declared,
                   memories=program.memories + tuple(buffers.values()),
                   inserted=tuple(map(rebuilt, program.inserted)), outputs=tuple(map(rebuilt, program.outputs)),
                   carry=tuple((name, rebuilt(v)) for name, v in program.carry))


def _text(program: Program, call: Node) -> str:
    readers = [call_label(program, r) for r in _readers(program, call)]
    return (f"{call_label(program, call)} {call.src[0].shape} writes its result to {through_name(program, call)}, a DDR "
            f"buffer of the compiler's, over the array (tile_matmul_over_array); {', '.join(readers)} "
            f"read{'s' * (len(readers) == 1)} it back after the grid's writes")


def through_name(program: Program, call: Node) -> str:
    return f"through.{call_label(program, call)}"


def _takes(program: Program, call: Node, device) -> bool:
    """A MatVec of two whole host tensors, writing no state, whose grid is estimated faster than one
    tile (`tiled`: fused with the state write, its group would not split; not a packed matrix's,
    which takes no grid), read only by calls (not the host, not a carried value), one of which
    writes a state."""
    if role(call) is not Role.MATRIX or call.arg.kernel.packed or len(call.shape) != 1 or call.arg.n_inputs != 2 \
            or call.arg.writes:
        return False
    if not all(is_host_tensor(n) and n.op != Op.VIEW for n in call.src[:2]) or not tiled(call, device, split=False):
        return False
    return call not in program.kept and any(r.arg.writes for r in _readers(program, call))


def _readers(program: Program, call: Node) -> list[Node]:
    return [c for c in program.calls if call in c.src]
