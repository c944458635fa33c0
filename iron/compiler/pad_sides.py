"""The padded extents a call may lie in, and how `pad_to_block` ranks them. A MatMul's or MatVec's
sides are tried each its own, padded to its quantum (ROW_QUANTUM per row of cores, K_QUANTUM,
ROW_QUANTUM per column), a MatVec's M to the fewest rows of whole-word results (`pad_m_to_words`),
and, when none of those has a grid, to multiples of K_QUANTUM (`pad_wider`); a streamed length or
batch of rows is padded to a quantum per core (`streamed_count`). A candidate is taken when its
grid or stream on the whole device is `better` than the call's own sides'. Also which products lie
in one layout (`upstream`, `joined_with`: `pad_joined`), and what placement reads back: the
shapes the padded tensors of a Program (a segment's) lie in."""
from __future__ import annotations

import math
from itertools import product

from iron.compiler.fuse import Group
from iron.compiler.streaming import (
    choose_flow,
)
from iron.compiler.tiling import TILED_BYTES, call_sides, choose_grid, vector_tiles
from iron.ir import (
    Node,
    Op,
    Program,
    external_inputs,
    nbytes,
    state_written_whole,
)
from iron.kernels.base import Role

ROW_QUANTUM = 8     # each core's share of M (or of a stream) is padded to a multiple of this many
K_QUANTUM = 32      # K is padded to a multiple of this many elements
FLOW_QUANTUM = 64   # a streamed length is padded to a multiple of this many per core: whole words of int8
FEW_CALLS = 64      # kernel calls per core a grid's own sides may take before fewer are worth padding for


def on_sides(call: Node, sides: tuple[int, int, int]) -> dict[Node, tuple[int, ...]]:
    """The shapes a product's A, B and result lie in on `sides` (M, K, N): (M, K), (K, N) and
    (M, N); a MatVec's B and result are vectors, (K,) and (M,)."""
    (a, b), (m, k, n) = call.src[:2], sides
    return {a: (m, k), b: (k, n)[:len(b.shape)], result_of(call): (m, n)[:len(call.shape)]}


def lone_product(group: Group) -> Node | None:
    """The MatMul or MatVec of two operands, writing no state or a whole one, that `group` is
    alone, if it is one."""
    (call,) = group.calls if len(group.calls) == 1 else (None,)
    if call is None or call.arg.kernel.role is not Role.MATRIX or call.arg.n_inputs != 2:
        return None
    if call.arg.writes and state_written_whole(call) is None:
        return None
    return call


def large(call: Node) -> bool:
    """Whether a MatMul's or MatVec's tensors are too large for one tile, so it tiles."""
    a, b = call.src[:2]
    return vector_tiles(a, a) if len(call.shape) == 1 else \
        nbytes(a) + nbytes(b) + nbytes(call) > TILED_BYTES


def upstream(nodes, group_of: dict) -> tuple[tuple[Node, ...], tuple[Group, ...]]:
    """The padded products whose layout `nodes` lie in when read over it, in the order they are
    read, and the elementwise groups between them: a MatMul alone in its group lies in its own;
    the last result of elementwise calls reading such a layout in theirs (`pad_through_elementwise`,
    passed on to the next reader)."""
    products, groups, seen, todo = [], [], set(), list(reversed(nodes))
    while todo:
        node = todo.pop()
        if node in seen or node.op != Op.CALL or len(node.shape) != 2:
            continue
        seen.add(node)
        group = group_of[node]
        if lone_product(group) is node:
            products.append(node)
        elif group.calls[-1] is node and group.calls[0].arg.kernel.role is Role.ELEMENTWISE:
            groups.append(group)
            todo.extend(reversed(external_inputs(group.calls)))
    return tuple(products), tuple(groups)


def carried(node: Node, group_of: dict) -> bool:
    """Whether `node` lies in a padded product's layout when read over it (`upstream`)."""
    return bool(upstream((node,), group_of)[0])


def joined(calls: tuple[Node, ...], result: Node, group_of: dict) -> tuple[Node, ...]:
    """The products whose layout elementwise `calls` read (`upstream`: directly or through
    elementwise calls over it), `result` lying in one of them, in the order they read them
    (`pad_joined` pads them alike); () when `result` lies in none."""
    products = upstream(external_inputs(calls), group_of)[0]
    return products if set(upstream((result,), group_of)[0]) & set(products) else ()


def joined_with(call: Node, readers: dict, group_of: dict) -> tuple[Node, ...]:
    """The products `pad_joined` pads alike with `call` (itself among them): those the last of
    the elementwise groups reading its layout, one after another, reads (`layout_unshared` lets
    only one group read each of them)."""
    node, found = call, (call,)
    while users := [u for u in readers.get(node, []) if isinstance(u, Node) and u.arg.kernel.role is Role.ELEMENTWISE]:
        calls = group_of[users[0]].calls
        if not (products := joined(calls, node, group_of)):
            break
        node, found = calls[-1], products
    return found if call in found else (call,)


def joined_sides(products: tuple[Node, ...], device) -> dict[Node, tuple[int, int, int] | None] | None:
    """The rule `pad_joined`: each of the products one elementwise group reads, on the M and N
    `best_sides` picks for the first (or its own), so that their results lie alike, and on its
    own K or a padded one (`best_sides`; None: its own sides), the first's K too when two of
    them read one operand, which lies padded once; None when some product has no grid so."""
    first = products[0]
    big_m, big_k, big_n = best_sides(first, device) or call_sides(first)
    shared = len({n for p in products for n in p.src[:2]}) < 2 * len(products)   # an operand lies padded alike too
    sides = {p: best_sides(p, device, {0: big_m, 1: big_k, 2: big_n} if shared else {0: big_m, 2: big_n})
             for p in products}
    if any(s is None and p.shape != (big_m, big_n) for p, s in sides.items()):
        return None
    return sides


def whole_device_grid(call: Node, device, padded=None):
    """The grid `choose_grid` gives `call` (on `padded` sides) with the whole device to itself."""
    return choose_grid(call, list(range(device.n_cols)), device.n_cols * len(device.compute_rows), device,
                       device.n_cols * device.shim.dma_out_channels, padded=padded)


def chained(call: Node, lies: dict[Node, tuple[int, int]], device) -> tuple[int, int, int] | None:
    """The sides (M, K, N) of a MatMul reading tensors that lie padded (`lies`: tensor -> shape)
    as its A (M, K) or its B (K, N): its other side its own or padded, whichever grid
    `best_sides` puts first; None when none has a grid (or A's and B's K differ)."""
    fixed: dict[int, int] = {}
    for node, shape in lies.items():
        for at in [at for at, n in zip(((0, 1), (1, 2)), call.src[:2]) if n is node]:   # as A, as B, or both
            for i, side in zip(at, shape):
                if fixed.setdefault(i, side) != side:
                    return None
    return best_sides(call, device, fixed, any_grid=True)


def _ranked(call: Node, device, tried, mine=None) -> list[tuple[tuple, tuple[int, int, int]]]:
    """(rank, sides) of each of the `tried` sides with a grid `better` than `mine` (the call's own
    sides' score; None: any grid): the fewest kernel calls per core, the least work per core,
    the fewest elements moved."""
    scored = []
    for sides in tried:
        score = _grid_score(whole_device_grid(call, device, sides))
        if score is not None and better(score, mine):
            (work, calls), (a, k, b) = score, sides
            scored.append(((calls, work, a * k + k * b + a * b), sides))
    return scored


def best_sides(call: Node, device, fixed: dict[int, int] | None = None,
               any_grid: bool = False) -> tuple[int, int, int] | None:
    """Of the sides (M, K, N) tried, each its own or padded to its quantum (`padded_sides`; when
    none of those has a grid, to the wider quantum of `pad_wider`) but those `fixed` gives
    (index: size), the ones whose grid is `better` than the call's own sides' (`any_grid`, or a
    fixed side not its own: any grid, its own sides too), of the fewest kernel calls per core,
    then the least work per core, then the fewest elements moved; None when none is."""
    own, fixed = call_sides(call), fixed or {}
    near = (word_rows(call), *own[1:])
    for up in (padded_sides(call, device), padded_sides(call, device, wider=True)):
        tried = set(product(*({fixed[i]} if i in fixed else {side, n, u}
                              for i, (side, n, u) in enumerate(zip(own, near, up)))))
        if any_grid or any(own[i] != side for i, side in fixed.items()):
            scored = _ranked(call, device, tried)
        else:
            scored = _ranked(call, device, tried - {own}, _grid_score(whole_device_grid(call, device))) \
                if tried != {own} else []
        if scored:
            return min(scored)[1]
    return None


def word_rows(call: Node) -> int:
    """The rule `pad_m_to_words`: a MatVec's M padded to the fewest rows whose results are whole
    32-bit words (a 1-row bfloat16 MatVec: 2 rows, not a multiple of ROW_QUANTUM per core), tried
    beside `padded_sides`; a MatMul's own M."""
    per_word = 4 // min(4, call.dtype.itemsize) if len(call.shape) == 1 else 1
    return -(-call_sides(call)[0] // per_word) * per_word


def padded_sides(call: Node, device, wider: bool = False) -> tuple[int, int, int]:
    """The call's sides padded to a multiple of ROW_QUANTUM per row of cores (M; a MatVec's: per
    core), of K_QUANTUM (K) and of ROW_QUANTUM per column (N); `wider` (the rule `pad_wider`),
    each quantum but a MatVec's N rounded up to a multiple of K_QUANTUM, for the sides a narrow
    quantum leaves with no dividing block (on one column N = 2053 pads to 2056 = 8 x 257, whose
    blocks of at most 8 take more rounds than a Dma op repeats; 2080 = 32 x 65 has blocks)."""
    rows, cols = len(device.compute_rows), device.n_cols
    vector = len(call.shape) == 1
    quanta = (ROW_QUANTUM * (rows * cols if vector else rows), K_QUANTUM, 1 if vector else ROW_QUANTUM * cols)
    if wider:
        quanta = tuple(q if q == 1 else math.lcm(q, K_QUANTUM) for q in quanta)
    return tuple(-(-side // q) * q for side, q in zip(call_sides(call), quanta))


def better(padded: tuple[float, int], mine: tuple[float, int] | None) -> bool:
    """Whether a padded grid or stream scoring `padded` (elements of work per core, padding
    included; kernel calls per core) is worth it over the call's own sides, `mine`: they have
    none, or more work per core (the padded one takes more cores than its padding costs), or
    more than FEW_CALLS kernel calls per core, at least twice the padded one's."""
    return mine is None or padded[0] < mine[0] or FEW_CALLS < mine[1] >= 2 * padded[1]


def _grid_score(grid) -> tuple[float, int] | None:
    if grid is None:
        return None
    return math.prod(grid.sides) / grid.cores, grid.fewest_calls


def streamed_count(calls, device, count: int, quantum: int, width: int = 1) -> int | None:
    """`pad_stream`'s length or `pad_rows`' rows: `count` (elements, or rows of `width`) padded to
    a multiple of `quantum` per core of the device, when calls streaming it so score `better`
    (blocks count as kernel calls) than over their own; None when they do not."""
    step = quantum * device.n_cols * len(device.compute_rows)
    padded = -(-count // step) * step
    score = _flow_score(calls, device, padded * width, width)
    return padded if padded != count and score and better(score, _flow_score(calls, device, None, width)) else None


def _flow_score(calls, device, padded, width: int = 1) -> tuple[float, int] | None:
    flow = choose_flow(calls, list(range(device.n_cols)), device.n_cols * len(device.compute_rows), device,
                       device.n_cols * device.shim.dma_out_channels, width=width, padded=padded)
    return None if flow is None else (flow.size / len(flow.tiles), flow.rounds)


def padded_nodes(program: Program, placements) -> dict[Node, tuple[int, ...]]:
    """The padded shape of each of `program`'s host tensors and outputs whose placement is padded
    (a segment's Program sees the design's placements: its cut values are inputs)."""
    by_name = {p.name: p.padded for p in placements if p.padded is not None}
    if not by_name:   # most designs: nothing to look up in each probe's calls
        return {}
    found = {n: by_name[f"out{i}"] for i, n in enumerate(program.outputs) if f"out{i}" in by_name}
    for call in program.calls:
        for node in (s.src[0] if s.op == Op.VIEW else s for s in call.src):
            name = node.arg.name if node.op in (Op.INPUT, Op.MEMORY) else None
            if name in by_name:
                found[node] = by_name[name]
    return found


def producer_written_nodes(program: Program, placements) -> frozenset[Node]:
    """The values crossing into `program` (a segment's) or out of it whose producer writes them
    where they lie padded (`pad_written_by_producer`, Placement.producer_writes)."""
    return frozenset(placed(program, {p.name for p in placements if p.producer_writes}))


def zeros_made_nodes(program: Program, placements) -> dict[Node, str]:
    """The values crossing into or out of `program` (a segment's) that calls made over a padded
    layout, and the rule computing their padding's zeros (Placement.zeros_rule)."""
    rules = {p.name: p.zeros_rule for p in placements if p.zeros_rule}
    return {n: rules[name] for n, name in placed(program, set(rules)).items()}


def placed(program: Program, names: set[str]) -> dict[Node, str]:
    """`program`'s outputs and inputs placed under `names`, with their placement's name."""
    if not names:
        return {}
    found = {n: f"out{i}" for i, n in enumerate(program.outputs) if f"out{i}" in names}
    return found | {n: n.arg.name for n in program.inputs if n.arg.name in names}


def result_of(call: Node) -> Node:
    """Where a matrix call's result lies: the state it writes whole (out=), or itself."""
    return state_written_whole(call) or call


def grid_sides(call: Node, padded: dict) -> tuple[int, int, int] | None:
    """(M, K, N) of a matrix call as its operands and result lie (N = 1 for a MatVec), None when
    they lie inconsistently (one padded for another rule): then it takes no grid."""
    result = result_of(call)   # a state written whole: its elements, in the call's shape unless padded
    lies = {n: padded.get(n, n.shape) for n in call.src[:2]} | {result: padded.get(result, call.shape)}
    sides = (*lies[call.src[0]], lies[call.src[1]][-1] if len(call.shape) == 2 else 1)
    return sides if all(lies[n] == shape for n, shape in on_sides(call, sides).items()) else None


def stream_length(calls, inputs, padded: dict) -> int | None:
    """The elements the streamed inputs of elementwise calls or a row reduction lie in: padded
    (all of them and the result, to as many rows), or their own (the result may lie padded
    alone: `pad_written_by_producer`); None when they lie otherwise."""
    tensors = (*inputs, result_of(calls[-1]))
    if not any(n in padded for n in inputs):
        return inputs[0].size
    if not all(n in padded for n in tensors) or len({padded[n][0] for n in tensors}) != 1:
        return None
    return math.prod(padded[inputs[0]])
