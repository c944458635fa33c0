"""The layout of every tensor a design pads: one typed `Lies` per tensor (the shape it lies in and
what fills its padding), decided once per design by `pad_to_block` (pad.py) and read, never
re-derived, by placement, segmentation and allocation; and the mechanism deciding which sides
lie alike: a union-find over (tensor, axis) sides joined through the kernels' index maps
(`Traits.index_map`: a letter shared by two tensors of a call names one side), so a MatMul's A
and result share M, its A and B share K, an elementwise call's tensors share every axis, and a
tensor several calls read joins their sides, whatever the kernel is. Also the padded extents a
call may lie in and how `pad_to_block` ranks them: a MatMul's or MatVec's sides each its own,
padded to its quantum (ROW_QUANTUM per row of cores, K_QUANTUM, ROW_QUANTUM per column), a
MatVec's M to the fewest rows of whole-word results (`pad_m_to_words`), and, when none of those
has a grid, to multiples of K_QUANTUM (`pad_wider`); a streamed length or batch of rows padded to
a quantum per core (`streamed_count`); and which products lie in one layout (`upstream`,
`joined_with`: `pad_joined`)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

from iron.compiler import cost
from iron.compiler.fuse import Group
from iron.compiler.plan import Choice, Fill
from iron.compiler.rules import Rule
from iron.compiler.streaming import choose_flow
from iron.compiler.tiling import TILED_BYTES, call_sides, choose_grid, estimate_ns, vector_tiles
from iron.ir import Node, Op, Program, external_inputs, nbytes, state_written_whole
from iron.kernels.base import Role


@dataclass(frozen=True)
class Lies:
    """One padded tensor's layout: the shape it lies in (the user's region in its first rows and
    columns) and what fills the rest."""

    shape: tuple[int, ...]
    fill: Fill = Fill.ZEROS


@dataclass(frozen=True)
class Layouts:
    """`pad_to_block`'s layout of a design: each padded tensor's `Lies`, the cost model's choices
    of padded extents, the families of products `pad_shared_input` decided (`shared`, described
    before the plan's own lines), and the describe() lines of the other design-wide rules
    (`passed`, after them)."""

    lies: dict[Node, Lies]
    choices: tuple = ()   # (group, Choice) of each padded extent the cost model chose
    shared: tuple = ()    # pad_shared_input's SharedLayouts (pad.py), padded or refused
    passed: tuple = ()

    @property
    def shapes(self) -> dict[Node, tuple[int, ...]]:
        return {n: lie.shape for n, lie in self.lies.items()}


def lies_of(program: Program, placements) -> dict[Node, Lies]:
    """The Lies of each of `program`'s host tensors and outputs whose placement is padded (by
    `pad_to_block` or `pad_rows_to_words`; a segment's Program sees the design's placements: its
    cut values are inputs)."""
    by_name = {p.name: Lies(p.padded, p.fill) for p in placements if p.padded is not None}
    if not by_name:   # most designs: nothing to look up in each probe's calls
        return {}
    found = {n: by_name[f"out{i}"] for i, n in enumerate(program.outputs) if f"out{i}" in by_name}
    for call in program.calls:
        for node in (s.src[0] if s.op == Op.VIEW else s for s in call.src):
            name = node.arg.name if node.op in (Op.INPUT, Op.MEMORY) else None
            if name in by_name:
                found[node] = by_name[name]
    return found


def stream_length(calls, inputs, padded: dict) -> int | None:
    """The elements the streamed inputs of elementwise calls or a row reduction lie in: padded
    (all of them and the result, to as many rows), or their own (the result may lie padded
    alone: `pad_written_by_producer`); None when they lie otherwise."""
    lying = (*inputs, result_of(calls[-1]))
    if not any(n in padded for n in inputs):
        return inputs[0].size
    if not all(n in padded for n in lying) or len({padded[n][0] for n in lying}) != 1:
        return None
    return math.prod(padded[inputs[0]])


# ---- sides joined through index maps --------------------------------------------------------------

Key = str | int   # a map's letter, or a leading axis the map repeats over (counted from the last)


def result_of(call: Node) -> Node:
    """Where a call's result lies: the state it writes whole (out=), or itself."""
    return state_written_whole(call) or call


def tensors(call: Node) -> list[tuple[Node, tuple[int, ...], tuple[Key, ...]]]:
    """Each tensor input of a call and its result (where it lies, in the call's shape), with its
    shape and the key of each axis: the letter the index map gives it, or, for a leading axis the
    map repeats over, its place from the last axis (so an elementwise call's tensors share every
    axis, and a row broadcast to a matrix's rows shares its last); [] for a kernel with no map."""
    m = call.arg.kernel.traits.index_map
    if m is None:
        return []
    ins = call.src[:len(m.inputs)]
    found = []
    for node, shape, axes in zip((*ins, result_of(call)), (*(n.shape for n in ins), call.shape), (*m.inputs, m.output)):
        lead = len(shape) - len(axes)
        found.append((node, shape, tuple(len(shape) - i if i < lead else axes[i - lead] for i in range(len(shape)))))
    return found


def letters(call: Node) -> str:
    """A call's map letters in order of first use: "mkn" for MatMul's (M, K, N), "mk" for MatVec's."""
    m = call.arg.kernel.traits.index_map
    return "".join(dict.fromkeys("".join((*m.inputs, m.output))))


def on_sides(call: Node, sides: tuple[int, ...]) -> dict[Node, tuple[int, ...]]:
    """The shapes a call's tensors lie in when its map's letters take `sides` (in `letters` order;
    a MatVec's (M, K, 1): its B (K,), its result (M,)); leading axes keep their own."""
    extent = dict(zip(letters(call), sides))
    return {node: tuple(extent.get(key, n) for key, n in zip(keys, shape)) for node, shape, keys in tensors(call)}


def sides_as_lying(call: Node, shapes: dict[Node, tuple[int, ...]]) -> tuple[int, int, int] | None:
    """(M, K, N) of a matrix call as its tensors lie (`shapes`, else their own; N = 1 for a
    MatVec), None when two tensors give one letter different extents: then it takes no grid."""
    extent: dict[Key, int] = {}
    for node, shape, keys in tensors(call):
        for key, n in zip(keys, shapes.get(node, shape)):
            if extent.setdefault(key, n) != n:
                return None
    return (*(extent[k] for k in letters(call)), 1)[:3]


class Classes:
    """A union-find: each item's class, joined by `union`."""

    def __init__(self):
        self.root: dict = {}

    def find(self, item):
        while self.root.get(item, item) != item:
            item = self.root[item]
        return item

    def union(self, a, b):
        self.root.setdefault(a, a)
        self.root[self.find(b)] = self.find(a)


def tie(sides: Classes, call: Node, only: str | None = None):
    """Join in `sides` the (tensor, axis) sides each letter of `call`'s map names (`only`: those
    letters alone): a letter two tensors share is one side."""
    named: dict[Key, tuple[Node, int]] = {}
    for node, _, keys in tensors(call):
        for axis, key in enumerate(keys):
            if only is None or key in only:
                sides.union(named.setdefault(key, (node, axis)), (node, axis))


def side(sides: Classes, call: Node, i: int):
    """The class of the `i`th of a call's letters (M, K, N: 0, 1, 2; a MatVec's N is its own)."""
    if i >= len(letters(call)):
        return call, i
    letter = letters(call)[i]
    return sides.find(next((node, keys.index(letter)) for node, _, keys in tensors(call) if letter in keys))


# ---- the padded extents ---------------------------------------------------------------------------

ROW_QUANTUM = 8     # each core's share of M (or of a stream) is padded to a multiple of this many
K_QUANTUM = 32      # K is padded to a multiple of this many elements
FLOW_QUANTUM = 64   # a streamed length is padded to a multiple of this many per core: whole words of int8


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
    """The sides (M, K, N) of a MatMul reading tensors that lie padded (`lies`: tensor -> shape,
    each axis fixing the letter its map gives it): its other sides its own or padded, whichever
    grid `best_sides` puts first; None when none has a grid (or two tensors fix one letter apart)."""
    fixed: dict[int, int] = {}
    order = letters(call)
    for node, _, keys in tensors(call):
        for key, extent in zip(keys, lies.get(node, ())):
            if fixed.setdefault(order.index(key), extent) != extent:
                return None
    return best_sides(call, device, fixed, any_grid=True)


def sides_choice(call: Node, device, fixed: dict[int, int] | None = None,
                 any_grid: bool = False) -> tuple[tuple[int, int, int] | None, Choice | None]:
    """The rule `pad_to_block`'s extents of a MatMul or MatVec: among the candidates, each side its
    own (or `fixed`: index -> size), padded to its quantum (`padded_sides`), to the wider quantum
    (`pad_wider`), a MatVec's M to the fewest rows of whole-word results (`pad_m_to_words`), the
    one the cost model estimates fastest by its grid on the whole device (`tiling.estimate_ns`).
    Unless `any_grid` (or a fixed side is not its own), the call's own sides are a candidate too,
    preferred on a tie: when they win, nothing is padded (None, with the Choice saying so). A
    padded grid cutting a side of many elements into one-element k-blocks is no candidate: the
    cost model prices its many tiny objects below what they take. The sides (None when none is)
    and the Choice."""
    own, fixed = call_sides(call), fixed or {}
    options = zip(own, (word_rows(call), *own[1:]), padded_sides(call, device), padded_sides(call, device, wider=True))
    tried = sorted(set(product(*({fixed[i]} if i in fixed else set(sides) for i, sides in enumerate(options)))),
                   key=lambda s: (s != own, s[0] * s[1] + s[1] * s[2] + s[0] * s[2], s))
    unpadded = not any_grid and all(own[i] == side for i, side in fixed.items())
    grids = [(s, g) for s in tried if (g := whole_device_grid(call, device, s)) is not None
             and (g.k > 1 or s[1] == 1 or unpadded and s == own)]
    if not grids:
        return None, None
    (sides, _), choice = cost.choose(Rule.PAD_TO_BLOCK, "padded sides", grids, lambda c: estimate_ns(c[1], device),
                                     lambda c: f"(M, K, N) = {c[0]}")
    return (None if unpadded and sides == own else sides), choice


def best_sides(call: Node, device, fixed: dict[int, int] | None = None,
               any_grid: bool = False) -> tuple[int, int, int] | None:
    """The sides `sides_choice` chooses."""
    return sides_choice(call, device, fixed, any_grid)[0]


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


def streamed_count(calls, device, count: int, quantum: int, width: int = 1) -> int | None:
    """`pad_stream`'s length or `pad_rows`' rows: `count` (elements, or rows of `width`) padded to
    a multiple of `quantum` per core of the device, when the cost model estimates calls streaming
    it so faster than over their own (preferred on a tie); None when it does not."""
    step = quantum * device.n_cols * len(device.compute_rows)
    padded = -(-count // step) * step
    flows = [(p, f) for p in (None, padded * width) if (p is None or padded != count)
             and (f := _flow(calls, device, p, width)) is not None]
    if not flows:
        return None
    best, _ = cost.choose(Rule.PAD_TO_BLOCK, "padded length", flows, lambda f: estimate_ns(f[1], device),
                          lambda f: f"{f[0] or count * width} elements")
    return None if best[0] is None else padded


def _flow(calls, device, padded, width: int = 1):
    return choose_flow(calls, list(range(device.n_cols)), device.n_cols * len(device.compute_rows), device,
                       device.n_cols * device.shim.dma_out_channels, width=width, padded=padded)
