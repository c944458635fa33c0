"""Sides and extents for the layout pass (layout.py): a call's tensors and the axes its index map
names (a letter two tensors of a call share is one side), a union-find over (tensor, axis) sides
joined through them; the zero-fill lattice, what each tensor's padding holds along each axis
(`Groups.zeros`); and the padded extents the cost model chooses among (`sides_choice`,
`streamed_count`)."""
from __future__ import annotations

import math
from dataclasses import replace
from functools import cached_property
from itertools import product

from iron.compiler.channels import MemChannels
from iron.compiler.fuse import SIZE_LIMIT, Group, held_bytes
from iron.compiler.gather import rows_written
from iron.compiler.matrices import SPLIT_PART_BYTES, Left, split_parts, split_work
from iron.compiler.memo import by_shape
from iron.compiler.readers import Reader
from iron.compiler.streaming import choose_flow, flow_bytes, streamable
from iron.compiler.tiling import call_sides, choose_grid, estimate_ns, large
from iron.ir import Node, Op, external_inputs, is_host_tensor, nbytes, state_written_whole
from iron.kernels.base import Role
from iron.plan import cost
from iron.plan.plan import Choice, Tile, TileKind
from iron.plan.rules import Fill, Rule, ZeroFill

Key = str | int   # a map's letter, or a leading axis the map repeats over (counted from the last)


def result_of(call: Node) -> Node:
    """Where a call's result lies: the state it writes whole (out=), or itself."""
    return state_written_whole(call) or call


def tensors(call: Node) -> list[tuple[Node, tuple[int, ...], tuple[Key, ...]]]:
    """Each tensor input of a call and its result (where it lies), its shape and each axis's key
    (its letter, or a leading axis's place from the last); [] for a kernel with no map."""
    if (m := call.arg.kernel.traits.index_map) is None:
        return []
    ins = call.src[:len(m.inputs)]
    return [(node, shape, (*range(len(shape), len(axes), -1), *axes[max(0, len(axes) - len(shape)):]))
            for node, shape, axes in zip((*ins, result_of(call)), (*(n.shape for n in ins), call.shape), (*m.inputs, m.output))]


def letters(call: Node) -> str:
    """A call's map letters in order of first use: "mkn" for MatMul's (M, K, N), "mk" for MatVec's."""
    m = call.arg.kernel.traits.index_map
    return "".join(dict.fromkeys("".join((*m.inputs, m.output))))


def sides_as_lying(call: Node, shapes: dict[Node, tuple[int, ...]]) -> tuple[int, int, int] | None:
    """(M, K, N) of a matrix call as its tensors lie (`shapes`, else their own), None when two
    tensors give one letter different extents."""
    extent: dict[Key, int] = {}
    for node, shape, keys in tensors(call):
        for key, n in zip(keys, shapes.get(node, shape)):
            if extent.setdefault(key, n) != n:
                return None
    return (*(extent[k] for k in letters(call)), 1)[:3]


class Classes:
    """A union-find."""

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
    """Join the (tensor, axis) sides each letter of `call`'s map names (`only`: those letters)."""
    named: dict = {}
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


def on_sides(call: Node, sides: tuple[int, ...]) -> dict[Node, tuple[int, ...]]:
    """The shapes a call's tensors lie in when its letters take `sides`."""
    extent = dict(zip(letters(call), sides))
    return {node: tuple(extent.get(key, n) for key, n in zip(keys, shape)) for node, shape, keys in tensors(call)}


def lone_product(group: Group) -> Node | None:
    """The MatMul or MatVec of two operands, writing no state or a whole one, `group` is alone."""
    (call,) = group.calls if len(group.calls) == 1 else (None,)
    if call is None or call.arg.kernel.role is not Role.MATRIX or call.arg.n_inputs != 2:
        return None
    return None if call.arg.writes and state_written_whole(call) is None else call


def upstream(nodes, group_of: dict) -> tuple[tuple[Node, ...], tuple[Group, ...]]:
    """The padded products whose layout `nodes` lie in when read over it, in reading order, and
    the elementwise groups between."""
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
    return bool(upstream((node,), group_of)[0])


def joined(calls: tuple[Node, ...], result: Node, group_of: dict) -> tuple[Node, ...]:
    """The products whose layout elementwise `calls` read, `result` lying in one of them; () when
    it lies in none."""
    products = upstream(external_inputs(calls), group_of)[0]
    return products if set(upstream((result,), group_of)[0]) & set(products) else ()


def joined_with(call: Node, readers: dict, group_of: dict) -> tuple[Node, ...]:
    """The products `pad_joined` pads alike with `call` (itself among them)."""
    node, found = call, (call,)
    while users := [u for u in readers.get(node, []) if isinstance(u, Node) and u.arg.kernel.role is Role.ELEMENTWISE]:
        calls = group_of[users[0]].calls
        if not (products := joined(calls, node, group_of)):
            break
        node, found = calls[-1], products
    return found if call in found else (call,)


# ---- the zero-fill lattice: what each tensor's padding holds ---------------------------------------

class Groups(dict):
    """A design's groups by call, and the zero-fill lattice over them, computed when first read."""

    def __init__(self, groups: tuple[Group, ...]):
        super().__init__((c, g) for g in groups for c in g.calls)
        self.groups = groups

    @cached_property
    def zeros(self) -> dict[Node, ZeroFill]:
        """The zero-fill lattice, one pass in program order: each call's result's `ZeroFill` were it
        computed over inputs lying padded, carried through its index map from its inputs' axes of the
        same letters: a product's axis is ZEROS where the operand naming it is, another call's KEPT
        where every input's is and its kernel keeps zeros, ROWS past a per-call length; else None."""
        found: dict[Node, ZeroFill] = {}
        for call, group in self.items():
            found[call] = zeros_through(call, group, found)
        return found

    @cached_property
    def written(self) -> dict[Node, tuple[int, ...]]:
        return rows_written(self)

    def widths(self, call: Node) -> dict[Node, tuple[int]]:
        """The row width each operand of `call` gathered in zero-padded rows lies in (for `chained`)."""
        return {n: self.written[n][-1:] for n in call.src[:2] if n in self.written}

    def fill(self, node: Node, padded: dict) -> Fill:
        """What `node`'s padding holds as it lies padded (`padded`, the layout): a host tensor's zeros; WRITTEN
        when its group reads nothing padded (`pad_written_by_producer`); else as the lattice says."""
        group = self.get(node)
        if node.op != Op.CALL or group is None:
            return Fill.ZEROS
        return self.zeros[node].fill if any(i in padded for i in external_inputs(group.calls)) else Fill.WRITTEN


def zeros_through(call: Node, group: Group, found: dict) -> ZeroFill:
    kernel, unwritten_why = call.arg.kernel, unwritten(call, group.calls)
    if not (named := tensors(call)):
        return ZeroFill((None,) * len(call.shape), call, unwritten_why)
    product = kernel.role is Role.MATRIX
    kept = product or kernel.keeps_zeros_in(call.arg.attr_dict)
    written = tuple(kernel.traits.length_axes) if kernel.traits.row_length else ()   # zeros written past a length
    zero: dict = {}   # letter -> whether every input naming it holds zeros along it
    unkept = None     # the first input's call mapping zeros to other values
    for node, _, keys in named[:-1]:
        value = found.get(node) or ZeroFill((Fill.ZEROS if is_host_tensor(node) else None,) * len(node.shape))
        for key, fill in zip(keys, value.axes):
            zero[key] = zero.get(key, True) and fill is not None
            unkept = unkept or (value.unkept if fill is None else None)
    axes = tuple(Fill.ROWS if key in written else (Fill.ZEROS if product else Fill.KEPT) if kept and zero.get(key)
                 else None for key in named[-1][2])
    return ZeroFill(axes, (unkept or call) if None in axes else None, unwritten_why)


def summed_unzeroed(node: Node, call: Node, group_of: Groups) -> ZeroFill | None:
    """`node`'s lattice value when the product `call` would sum padding of it that is not zeros."""
    value, dropped = group_of.zeros[node], call.arg.kernel.traits.index_map.dropped
    return value if any(key in dropped and fill is None for n, _, keys in tensors(call) if n is node
                        for key, fill in zip(keys, value.axes)) else None


def unwritten(node: Node, calls: tuple[Node, ...]) -> str:
    """`pad_written_by_producer`: why the group making `node` cannot write it row by row at the padded
    stride; "" when it can."""
    if any(c.arg.kernel.role is Role.MATRIX for c in calls):
        return "made by a MatMul or MatVec, whose grid writes its blocks at its own row stride"
    if len(node.shape) < 2:
        return ""
    if streamable(calls) and held_bytes(list(calls)) > SIZE_LIMIT and flow_bytes(calls, node.shape[1], 1) > SIZE_LIMIT:
        return (f"streamed by elementwise calls in blocks of whole rows when it lies padded, and a block of one row of "
                f"{node.shape[1]} elements takes {flow_bytes(calls, node.shape[1], 1)} bytes, more than {SIZE_LIMIT}")
    if node.shape[1] * node.dtype.itemsize % 4:
        return f"whose rows of {node.shape[1]} {node.dtype.name} elements are not whole 32-bit words, so no DMA " \
               "writes them at a padded row's stride"
    return ""


# ---- the padded extents: candidates, the cost model's choice ---------------------------------------

ROW_QUANTUM = 8     # each core's share of M (or of a stream) is padded to a multiple of this many
K_QUANTUM = 32      # K is padded to a multiple of this many elements
FLOW_QUANTUM = 64   # a streamed length is padded to a multiple of this many per core: whole words of int8


def whole_device_grid(call: Node, device, padded=None, expand: Node | None = None):
    """The grid `call` (on `padded` sides) takes with the whole device to itself."""
    return choose_grid(call, tuple(range(device.n_cols)), device.n_cols * len(device.compute_rows), device,
                       device.n_cols * device.shim.dma_out_channels, None, expand, padded)


def tiled(call: Node, device, expand: Node | None = None, split: bool = True) -> bool:
    """Whether a MatMul or MatVec spreads over a grid when its readers let it: when `large`, or a
    MatVec (not one stored packed, which takes no grid) whose grid `grid_or_split` chooses; `split`:
    whether its group may split (not when fused with a call writing a state)."""
    return large(call, expand) or len(call.shape) == 1 and not call.arg.kernel.packed and (
        choice := grid_or_split(call, expand, device, split and not call.arg.writes)) is not None and \
        choice.rule is Rule.TILE_MATMUL_OVER_ARRAY


@by_shape(lambda choice, *args: choice)
def grid_or_split(call: Node, expand: Node | None, device, split: bool) -> Choice | None:
    """A MatVec whose matrix takes more than SPLIT_PART_BYTES: its grid (with the whole device, on the
    sides `sides_choice` pads it to; a fused expansion's on its own) or its split (`split_parts`,
    alone; one tile when it may not split, or not `split`), whichever is estimated faster, the split
    on a tie (fewer tiles, nothing padded); the Choice, by the chosen one's rule. None when smaller."""
    if nbytes(call.src[0] if expand is None else expand.src[0]) <= SPLIT_PART_BYTES:
        return None
    group = Group("", (call,) if expand is None else (expand, call), None)
    parts = split_parts(group, {call: (Reader.HOST,)}, len(device.compute_tiles) if split else 1,
                        Left(device.n_cols * device.shim.dma_out_channels, ()), MemChannels(device),
                        Tile(0, device.compute_rows[0], TileKind.COMPUTE)).choice
    one = (f"split into {parts.chosen}", parts.chosen_ns) if parts else ("one tile", split_work(group, 1, 1, device).ns(device))
    grid = whole_device_grid(call, device, None if expand else sides_choice(call, device)[0], expand)
    grids = [(f"grid of {len(grid.rows)} x {len(grid.cols)} cores, {grid.choice.chosen}", grid.choice.chosen_ns)] * bool(grid)
    best, choice = cost.choose(Rule.SPLIT_MATRIX_OVER_TILES, "grid or split", [one, *grids], lambda o: o[1], lambda o: o[0])
    return choice if best is one else replace(choice, rule=Rule.TILE_MATMUL_OVER_ARRAY)


def sides_choice(call: Node, device, fixed: dict[int, int] | None = None,
                 any_grid: bool = False) -> tuple[tuple[int, int, int] | None, Choice | None]:
    """A MatMul's or MatVec's padded sides (M, K, N): of the candidates (each side its own or `fixed`,
    its quantum, `word_rows`, the wider quantum), the fastest grid on the whole device. Unless
    `any_grid`, the call's own sides are a candidate, preferred on a tie (None: nothing padded). No
    padded grid takes one-element k-blocks (priced below what they take)."""
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
    return sides_choice(call, device, fixed, any_grid)[0]


def word_rows(call: Node) -> int:
    """`pad_m_to_words`: a MatVec's M padded to the fewest rows of whole-word results; a MatMul's own M."""
    per_word = 4 // min(4, call.dtype.itemsize) if len(call.shape) == 1 else 1
    return -(-call_sides(call)[0] // per_word) * per_word


def padded_sides(call: Node, device, wider: bool = False) -> tuple[int, int, int]:
    """The sides padded to ROW_QUANTUM per row of cores (M; a MatVec's per core), K_QUANTUM (K),
    ROW_QUANTUM per column (N); `wider` (`pad_wider`), to multiples of K_QUANTUM too (2053 -> 2080,
    not 2056 = 8 x 257)."""
    rows, cols = len(device.compute_rows), device.n_cols
    vector = len(call.shape) == 1
    quanta = (ROW_QUANTUM * (rows * cols if vector else rows), K_QUANTUM, 1 if vector else ROW_QUANTUM * cols)
    if wider:
        quanta = tuple(q if q == 1 else math.lcm(q, K_QUANTUM) for q in quanta)
    return tuple(-(-side // q) * q for side, q in zip(call_sides(call), quanta))


def chained(call: Node, lies: dict[Node, tuple[int, int]], device) -> tuple[int, int, int] | None:
    """The sides of a MatMul reading tensors that lie padded (each axis fixing its letter; a shorter
    lie, its last axes), its others as `best_sides` picks; None when none has a grid."""
    fixed: dict[int, int] = {}
    order = letters(call)
    for node, _, keys in tensors(call):
        for key, extent in zip(keys[::-1], lies.get(node, ())[::-1]):
            if fixed.setdefault(order.index(key), extent) != extent:
                return None
    return best_sides(call, device, fixed, any_grid=True)


def joined_sides(products: tuple[Node, ...], device) -> dict[Node, tuple[int, int, int] | None] | None:
    """`pad_joined`: each product one elementwise group reads on the M and N `best_sides` picks for
    the first, its K its own or padded (the first's, when two read one operand); None when some has
    no grid so."""
    first = products[0]
    big_m, big_k, big_n = best_sides(first, device) or call_sides(first)
    shared = len({n for p in products for n in p.src[:2]}) < 2 * len(products)   # an operand lies padded alike too
    sides = {p: best_sides(p, device, {0: big_m, 1: big_k, 2: big_n} if shared else {0: big_m, 2: big_n})
             for p in products}
    return None if any(s is None and p.shape != (big_m, big_n) for p, s in sides.items()) else sides


def streamed_count(calls, device, count: int, quantum: int, width: int = 1) -> int | None:
    """A stream's length (or rows of `width`) padded to `quantum` per core or to whole words, when
    the cost model estimates it faster than its own (preferred on a tie)."""
    step = quantum * device.n_cols * len(device.compute_rows)
    itemsize = min(n.dtype.itemsize for c in calls for n in (c, *c.src))
    unit = 4 // math.gcd(4, width * itemsize) if width > 1 else 0
    counts = dict.fromkeys(-(-count // s) * s for s in (step, unit) if s)
    blocks_of = 1 if calls[0].arg.kernel.role is Role.ELEMENTWISE else width   # an elementwise stream's rows are elements
    flows = [(p, f) for p in (None, *(c * width for c in counts if c != count))
             if (f := choose_flow(calls, list(range(device.n_cols)), device.n_cols * len(device.compute_rows), device,
                                  device.n_cols * device.shim.dma_out_channels, width=blocks_of, padded=p)) is not None]
    if not flows:
        return None
    best, _ = cost.choose(Rule.PAD_TO_BLOCK, "padded length", flows, lambda f: estimate_ns(f[1], device),
                          lambda f: f"{f[0] or count * width} elements")
    return None if best[0] is None else best[0] // width


def extent_rule(call: Node, sides: tuple[int, int, int], device) -> Rule:
    """The candidate rule padded sides of `call` came by."""
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
