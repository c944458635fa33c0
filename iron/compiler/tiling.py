"""Tiling rules: a MatMul (M, K) x (K, N) over a grid of cores (`tile_matmul_over_array`), as
whole-array GEMMs on these devices run: output blocks m x n, each core summing its k-blocks, A's
row-blocks shared along a row of cores and B's column-blocks along a column through mem tiles,
each column's C blocks joined on its mem tile. A MatVec, or a MatMul whose N is not whole words,
is the grid whose cores own their rows (n = 1, or n = N). docs/platform.md sections 2, 4 and 5
give the channels, memories and DMA limits counted; streams over columns are streaming.py's."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from iron import dtypes
from iron.compiler.memo import by_shape
from iron.compiler.readers import Reader
from iron.errors import KernelTypeError
from iron.ir import (
    Node,
    Op,
    contiguous_span,
    destination,
    nbytes,
)
from iron.kernels.base import Role
from iron.plan import cost
from iron.plan.plan import Tile, TileKind
from iron.plan.rules import Rule

MAX_BLOCK = 256          # a block side, in elements: within a BD dimension's 1023 words either way
TILED_BYTES = 32 * 1024  # a MatMul whose operands and result take more than this is tiled
VECTOR_ROW_BYTES = 20 * 1024     # a MatVec row longer than this streams K: a split tile holds the vector and 2 rows


class OnCores:
    """A rule's rectangle of cores: compute rows `rows` of array columns `cols`."""

    rows: tuple[int, ...]
    cols: tuple[int, ...]

    def tile(self, r: int, c: int) -> Tile:
        return Tile(self.cols[c], self.rows[r], TileKind.COMPUTE)

    @property
    def tiles(self) -> tuple[Tile, ...]:
        """Column by column, rows up."""
        return tuple(self.tile(r, c) for c in range(len(self.cols)) for r in range(len(self.rows)))


@dataclass(frozen=True)
class Grid(OnCores):
    """A MatMul over `rows` x `cols` cores (compute rows, array columns): core (r, c) computes
    the output blocks (i * len(rows) + r, j * len(cols) + c) of m x n elements, summing over
    K in k-blocks into `acc` (float32 for a bfloat16 result, rounded once at the end). A's
    row-blocks for grid row r pass through mem tile `a_mems[r]`, B's column-blocks and the
    joined C blocks of grid column c through `c_mems[c]`."""

    call: Node
    rows: tuple[int, ...]
    cols: tuple[int, ...]
    m: int
    k: int
    n: int
    acc: np.dtype
    a_mems: tuple[Tile, ...] = ()
    c_mems: tuple[Tile, ...] = ()
    expand: Node | None = None
    fewer: str = ""   # why not more cores, when fewer than were free (`why_not_more`)
    padded: tuple[int, int, int] | None = None   # (M, K, N) as `pad_to_block` padded them
    choice: cost.Choice | None = None   # the blocks, chosen by estimated time

    @property
    def sides(self) -> tuple[int, int, int]:
        """(M, K, N) as the grid computes them (N = 1 for a MatVec): padded, or the call's."""
        return self.padded or call_sides(self.call)

    @property
    def matrix(self) -> Node:
        """A as the host holds it: the blocks a fused expansion (`dequant_before_matvec`) expands
        on each core, or A itself."""
        return stored(self.call, self.expand)

    @property
    def a_block_bytes(self) -> int:
        """The bytes of one core's block of A (m rows of a k-block) as it is moved."""
        return self.m * self.k * nbytes(self.matrix) // self.call.src[0].size

    @property
    def vector(self) -> bool:
        return len(self.call.shape) == 1

    @property
    def own_rows(self) -> bool:
        """Every core owns its own rows of A and C, B's k-blocks (a MatVec's vector) going to
        every core and no column blocks: a MatVec, or a MatMul whose N is not whole words
        (`whole_rows_when_not_words`)."""
        return self.vector or n_not_words(self.call, self.sides[2])

    @property
    def cores(self) -> int:
        return len(self.rows) * len(self.cols)

    @property
    def rounds(self) -> int:
        """Row-block rounds: how many output block rows each core computes."""
        return self.sides[0] // (self.m * (self.cores if self.own_rows else len(self.rows)))

    @property
    def per_round(self) -> int:
        """Output blocks each core computes per round (one per column block it owns)."""
        return 1 if self.own_rows else self.sides[2] // (self.n * len(self.cols))

    @property
    def k_blocks(self) -> int:
        return self.sides[1] // self.k

    @property
    def calls(self) -> int:
        return self.rounds * self.per_round * self.k_blocks

    def work(self, device) -> cost.Work:
        """For the cost model: A's row-blocks through a shim channel per grid row, again for each
        column block a core computes; B's column-blocks through one per column, again each round;
        C's joined blocks through one per column (cores owning their rows: A's per column)."""
        gen, (big_m, big_k, big_n) = cost.generation(device), self.sides
        a, b, c = self.call.src[0], self.call.src[1], self.call
        block = [(self.m, self.k), (self.k,) if self.vector else (self.k, self.n)]
        per_call = cost.kernel_cycles(gen, Role.MATRIX, a.dtype, block, (self.m,) if self.vector else (self.m, self.n),
                                      self.acc)
        if self.expand is not None:
            stored_block = [(self.a_block_bytes // self.matrix.dtype.itemsize,)]
            per_call += cost.kernel_cycles(gen, Role.EXPANSION, self.matrix.dtype, stored_block, (self.m, self.k), a.dtype)
        rows, cols, a_item = len(self.rows), len(self.cols), nbytes(self.matrix) / a.size
        b_side, rounds, per_round = 1 if self.vector else big_n, self.rounds, self.per_round   # each asked once: many blocks are priced
        if self.own_rows:
            a_channel, b_channel = big_m // cols * big_k * a_item, rounds * big_k * b_side * b.dtype.itemsize
            c_channel = big_m // cols * b_side * c.dtype.itemsize
            ddr = cols * (a_channel + c_channel) + b_channel
        else:
            a_channel = big_m // rows * big_k * a_item * per_round
            b_channel = rounds * big_k * (big_n // cols) * b.dtype.itemsize
            c_channel = big_m * (big_n // cols) * c.dtype.itemsize
            ddr = rows * a_channel + cols * (b_channel + c_channel)
        return cost.Work(rounds * per_round * self.k_blocks * per_call, int(max(a_channel, b_channel, c_channel)),
                         int(ddr), int(cols * c_channel), rounds * per_round)

    def text(self) -> str:
        (big_m, big_k) = self.call.src[0].shape
        shape = f"MatVec ({big_m}, {big_k}) x ({big_k},)" if self.vector else \
            f"MatMul ({big_m}, {big_k}) x ({big_k}, {self.call.shape[1]})"
        expanded = "" if self.expand is None else \
            f" (its matrix expanded on each core by {self.expand.arg.kernel.__name__} from {self.matrix.dtype.name} blocks)"
        return (f"{shape} {self.call.src[0].dtype.name} -> "
                f"{self.call.dtype.name}{expanded} over {len(self.tiles)} tiles ({len(self.rows)} rows x {len(self.cols)} "
                f"columns of cores): blocks m={self.m} k={self.k} n={self.n} ({self.padding()}), "
                f"{self.rounds * self.per_round} output blocks per core, {self.k_blocks} k-blocks each "
                f"({self.calls} kernel calls per core), summed in {self.acc.name}"
                + (f"; not more cores: {self.fewer}" if self.fewer else ""))

    def padding(self) -> str:
        if self.padded is not None:
            pm, pk, pn = self.padded
            return f"pad_to_block: padded with zeros to M = {pm}, K = {pk}" + f", N = {pn}" * (not self.vector)
        why = unaligned(self.call, self.sides)
        if self.vector or why is None:
            return "each divides its side: no padding"
        owned = ", each core its own rows of A and C, B's k-blocks to every core" * self.own_rows
        return f"{why}: blocks take whole rows, contiguous and whole words{owned}, no padding"


def estimate_ns(candidate: OnCores, device) -> float:
    return candidate.work(device).ns(device)


def core_room(device) -> int:
    """What a compute tile's data memory holds for buffers: all of it but the core's stack."""
    return device.compute.data_memory_bytes - device.compute.default_stack_bytes


def block_bytes(call: Node, m: int, k: int, n: int, acc: np.dtype, expand: Node | None = None) -> int:
    """A core's tile memory for blocks m x k x n (n = 1 for a MatVec): two objects each of A (as
    moved: a fused expansion's blocks), B and C, A's block expanded, the product of one k-block,
    and a float32 sum when the result is rounded at the end."""
    it, out = call.src[0].dtype.itemsize, call.dtype.itemsize
    a_block = m * k * nbytes(stored(call, expand)) // call.src[0].size
    held = 2 * (a_block + k * n * it) + 2 * m * n * out + m * n * acc.itemsize
    held += m * k * it if expand is not None else 0
    return held + (m * n * acc.itemsize if acc != call.dtype else 0)


def stored(call: Node, expand: Node | None) -> Node:
    """A matrix call's matrix as the host holds it: the blocks `expand` reads, or the matrix."""
    return expand.src[0] if expand is not None else call.src[0]


def large(call: Node, expand: Node | None = None) -> bool:
    """Whether a MatMul's or MatVec's tensors are too large for one tile, so it tiles: a MatVec a row of
    whose matrix takes more than VECTOR_ROW_BYTES (`stream_k_blocks`: one row and the whole vector are then
    more than a split's tile holds beside its other objects), a MatMul (no expansion fused) whose
    operands and result take more than TILED_BYTES."""
    if len(call.shape) == 1:
        return nbytes(call.src[0]) // call.src[0].shape[0] > VECTOR_ROW_BYTES
    return expand is None and nbytes(stored(call, expand)) + nbytes(call.src[1]) + nbytes(call) > TILED_BYTES


def result_users(call: Node) -> tuple[Reader | None, ...]:
    """Who a grid's result must alone be read by: the host (an output), or no one for a call
    writing a run of a state (out=) that starts on a word, where the grid's C blocks go instead;
    (None,), which no call's users are, for other state writes."""
    if call.arg.writes:
        return () if word_run(destination(call)) is not None else (None,)
    return (Reader.HOST,)


def call_sides(call: Node) -> tuple[int, int, int]:
    """(M, K, N) of a MatMul (M, K) x (K, N), or of a MatVec (M, K) x (K,) with N = 1."""
    (big_m, big_k), vector = call.src[0].shape, len(call.shape) == 1
    return big_m, big_k, 1 if vector else call.shape[1]


def unaligned(call: Node, sides: tuple[int, int, int]) -> str | None:
    """Why no block of a MatMul of `sides` holds whole 32-bit words, all a DMA moves; else None."""
    _, big_k, big_n = sides
    a, out = call.src[0].dtype, call.dtype
    if big_k % (4 // min(4, a.itemsize)):
        return f"K = {big_k} {a.name} elements of a row of A are not whole 32-bit words"
    if big_n % (4 // min(4, a.itemsize, out.itemsize)):
        return f"N = {big_n} elements of a row of B and C are not whole 32-bit words"
    return None


def n_not_words(call: Node, big_n: int) -> bool:
    """Whether a MatMul's rows of B or C, `big_n` elements, are not whole 32-bit words."""
    return len(call.shape) == 2 and big_n * min(call.src[1].dtype.itemsize, call.dtype.itemsize) % 4 != 0


def divisors(n: int, word_elements: int) -> list[int]:
    """Block sides for an extent n: divisors up to MAX_BLOCK holding whole 32-bit words."""
    return [d for d in range(1, min(n, MAX_BLOCK) + 1) if n % d == 0 and d % word_elements == 0]


def _rebound(grid: Grid | None, call: Node, *args) -> Grid | None:
    """A kept grid of another call of the same structure, as this call's (`args[-2]`: its expansion)."""
    return grid and replace(grid, call=call, expand=args[-2])


@by_shape(_rebound)
def choose_grid(call: Node, full_columns: tuple[int, ...], spare: int, device, shim_in: int, most_rows: int | None,
                expand: Node | None, padded: tuple[int, int, int] | None) -> Grid | None:
    """`tile_matmul_over_array`, kept by the call's structure (memo.py): of the grids of rows of cores dividing M and free whole columns dividing N
    (cores owning their rows: dividing M) within `spare` tiles and `shim_in` shim MM2S channels, each with its
    fastest blocks (`_fastest_blocks`), the fastest (the most cores on a tie; a shape whose `_floor_ns` no
    block beats is not priced). A fused expansion's matrix takes whole rows (k = K) when some fit, else whole
    expansion blocks. None when no block holds whole words. `padded`: the sides `pad_to_block` chose;
    `most_rows`: the rows of cores it may take at most (all when None)."""
    big_m, big_k, big_n = sides = padded or call_sides(call)
    vector = len(call.shape) == 1
    own = vector or n_not_words(call, big_n)
    acc = np.dtype(np.float32) if call.dtype == dtypes.bfloat16 else call.dtype   # k-block sums rounded once
    in_words, out_words = 4 // min(4, call.src[0].dtype.itemsize), 4 // min(4, call.dtype.itemsize)
    rows_of = [r for r in range(most_rows or len(device.compute_rows), 0, -1) if big_m % r == 0]
    found, weighed = [], set()   # grids with their blocks; the shapes priced or no faster by their floor
    for rows in rows_of:
        cols = [c for c in range(min(len(full_columns), spare // rows), 0, -1)
                if (big_m % (rows * c) == 0 if own else big_n % c == 0)
                and (c + 1 if own else rows + c) <= shim_in]
        for ncols in cols:
            if found and _floor_ns(call, sides, rows, ncols, own, expand, device) >= min(g.choice.chosen_ns for g in found):
                weighed.add((rows, ncols))
                continue
            one_op = _one_dma_per_move(device, rows, ncols, own, big_k, big_n)
            grid = Grid(call, tuple(device.compute_rows[:rows]), tuple(full_columns[:ncols]), 1, 1, 1, acc,
                        expand=expand, padded=padded)
            if vector and expand is not None:
                row = nbytes(expand.src[0]) // big_m   # an expanded row's blocks, in bytes
                ms = [m for m in divisors(big_m // (rows * ncols), out_words) if m * row % 4 == 0]
                best = next((b for ks in ([big_k], expansion_k_blocks(expand, big_k, row, device))
                             if (b := _fastest_blocks(grid, ms, ks, [1], one_op, device)) is not None), None)
            elif vector:
                best = _fastest_blocks(grid, divisors(big_m // (rows * ncols), out_words), divisors(big_k, in_words),
                                       [1], one_op, device)
            elif unaligned(call, sides) is not None:
                best = _whole_row_blocks(grid, big_m // (rows * ncols if own else rows), ncols, one_op, device)
            else:
                best = _fastest_blocks(grid, divisors(big_m // rows, 1), divisors(big_k, in_words),
                                       divisors(big_n // ncols, max(in_words, out_words)), one_op, device)
            if best is not None:
                found.append(replace(best[0], choice=best[1]))
                weighed.add((rows, ncols))
    if not found:
        return None
    grid = fastest(found)
    weighed.discard((len(grid.rows), len(grid.cols)))
    return replace(grid, fewer=why_not_more(grid, most_rows or len(device.compute_rows), len(full_columns), spare,
                                            shim_in, weighed))


def fastest(found: list) -> OnCores:
    """Of grids or streams of several shapes each with its fastest blocks (`choice`), the fastest (the earliest on
    a tie), its Choice's best rejected the best of its other blocks and shapes."""
    best = min(found, key=lambda g: g.choice.chosen_ns)
    rival = min((g for g in found if g is not best), key=lambda g: g.choice.chosen_ns, default=None)
    if rival is None or best.choice.rejected_ns is not None and best.choice.rejected_ns <= rival.choice.chosen_ns:
        return best
    label = f"{rival.choice.chosen} on {len(rival.rows)} x {len(rival.cols)} cores"
    return replace(best, choice=replace(best.choice, rejected=label, rejected_ns=rival.choice.chosen_ns))


def _floor_ns(call: Node, sides: tuple, rows: int, cols: int, own: bool, expand: Node | None, device) -> float:
    """What no grid of rows x cols cores on `sides` beats (`Grid.work`, blocks of MAX_BLOCK): its MACs at the peak
    and its matrix through the load units, shared evenly; A sent once per column block, B per row block, C once."""
    gen, (big_m, big_k, big_n) = cost.generation(device), sides
    a, b, c = nbytes(stored(call, expand)) / call.src[0].size, call.src[1].dtype.itemsize, call.dtype.itemsize
    core = max(big_m * big_k * big_n / gen.macs[call.src[0].dtype.name], big_m * big_k * a / gen.load_bytes)
    rounds = max(1.0, big_m / (MAX_BLOCK * (rows * cols if own else rows)))
    ddr = big_m * big_k * a * (1 if own else max(1.0, big_n / (MAX_BLOCK * cols))) + big_n * (big_k * b * rounds + big_m * c)
    return max(cost.ns(device, core / (rows * cols)), cost.ddr_ns(gen, ddr))


def expansion_k_blocks(expand: Node, big_k: int, row: int, device) -> list[int]:
    """The k-blocks an expansion's rows of `row` stored bytes (K = `big_k` once expanded) may be cut
    into: whole 32-bit words within a BD dimension that its own rule expands alone (a whole Dequant block)."""
    return [k for k in range(1, big_k + 1) if big_k % k == 0 and k * row % (4 * big_k) == 0
            and k * row // big_k // 4 <= device.shim.max_bd_wrap and expanded(expand, k * row // big_k) == (1, k)]


def expanded(expand: Node, stored: int) -> tuple[int, ...] | None:
    """The shape an expansion's own rule makes of one row of `stored` elements; None when it refuses
    them (part of a block)."""
    try:
        return expand.arg.kernel.out_shape([(1, stored)], **expand.arg.attr_dict)
    except KernelTypeError:
        return None


ONE_ROW_K = ("; one row is not split by rows, and K is not split over cores: each core would need its own K-range "
             "of both the row and the vector, and their partial sums added across cores, which no rule does")


def why_not_more(grid: Grid, most_rows: int, most_cols: int, spare: int, shim_in: int, weighed=frozenset()) -> str:
    """Why a grid has fewer cores than were free: no larger grid divides the sides, or what stops each larger
    one that does (`weighed`: the shapes estimated no faster); "" when it took every free core."""
    cores, free = grid.cores, min(most_rows * most_cols, spare)
    if cores >= free:
        return ""
    big_m, _, big_n = grid.sides
    own = grid.own_rows
    side = f"cores dividing M = {big_m} (each core its own rows)" if own else \
        f"rows of cores dividing M = {big_m} and columns dividing N = {big_n}"
    larger = [(r, c) for r in range(1, most_rows + 1) for c in range(1, most_cols + 1)
              if r * c > cores and (big_m % (r * c) == 0 if own else big_m % r == 0 and big_n % c == 0)]
    if not larger:
        return (f"no grid of more than {cores} of the {free} free cores has {side}, and blocks divide their "
                "sides (no remainder block; padded only as pad_to_block says)" + ONE_ROW_K * (grid.vector and big_m == 1))
    taken = "are not taken" if weighed & set(larger) else "do not fit"
    return f"the larger grids with {side} {taken}: " + "; ".join(
        f"{r} x {c} {_what_stops(r, c, own, spare, shim_in, weighed)}" for r, c in larger)


def _what_stops(rows: int, cols: int, own_rows: bool, spare: int, shim_in: int, weighed) -> str:
    channels = cols + 1 if own_rows else rows + cols
    if (rows, cols) in weighed:
        return "is estimated no faster (choices)"
    if rows * cols > spare:
        return f"needs {rows * cols} tiles, the other groups leave {spare}"
    if channels > shim_in:
        return f"needs {channels} shim MM2S channels, the other groups leave {shim_in}"
    return "has no block that fits a core in one DMA op per move"


def _one_dma_per_move(device, rows: int, cols: int, own_rows: bool, big_k: int, big_n: int):
    """Whether blocks m x k x n keep each round's moves one Dma op each (docs/platform.md section 5:
    a repeat of at most 64, other sizes at most 1023 words), so a round never waits for buffer
    descriptors its own moves hold; cores owning their rows move A as (k-blocks, rows, k), no repeat."""
    repeat, wrap = device.dma_repeat_max, device.shim.max_bd_wrap

    def fits(m: int, k: int, n: int) -> bool:
        if own_rows:
            return rows * m <= wrap and big_k // k <= wrap
        return rows * m <= wrap and big_n // (n * cols) <= repeat
    return fits


def _whole_row_blocks(grid: Grid, per_row: int, cols: int, one_op, device):
    """`whole_rows_when_not_words`: a MatMul whose K or N is not whole 32-bit words is not cut along
    that side (k = K or n = N), and takes enough rows (m, or k for B) that each block is one
    contiguous run of whole words. With n = N every core owns its rows of A and C (`per_row`)."""
    (_, big_k, big_n), call = grid.sides, grid.call
    a, b, out = (x.dtype.itemsize for x in (call.src[0], call.src[1], call))
    whole_k, whole_n = big_k * a % 4 != 0, big_n * min(b, out) % 4 != 0
    ks = [big_k] if whole_k else divisors(big_k, 4 // min(4, a))
    ns = [big_n] if whole_n else divisors(big_n // cols, 4 // min(4, min(b, out)))
    ms = [m for m in divisors(per_row, 1) if (m * big_k * a) % 4 == 0 or not whole_k]
    ms = [m for m in ms if (m * big_n * out) % 4 == 0 or not whole_n]
    ks = [k for k in ks if (k * big_n * b) % 4 == 0 or not whole_n]
    return _fastest_blocks(grid, ms, ks, ns, one_op, device)


def _fastest_blocks(grid: Grid, ms, ks, ns, one_op, device) -> tuple[Grid, cost.Choice] | None:
    """`grid` with, of blocks fitting a core's memory (block_bytes) in one Dma op per move, the least
    estimated time (`Grid.work`), then the fewest kernel calls per core, then the largest m x n, and
    the Choice; None when none fits."""
    room = core_room(device)
    fits = [replace(grid, m=m, k=k, n=n) for m in ms for n in ns for k in ks
            if block_bytes(grid.call, m, k, n, grid.acc, grid.expand) <= room and one_op(m, k, n)]
    if not fits:
        return None
    fits.sort(key=lambda g: (g.calls, -g.m * g.n))
    return cost.choose(Rule.TILE_MATMUL_OVER_ARRAY, "blocks", fits, lambda g: estimate_ns(g, device),
                       lambda g: f"m={g.m} k={g.k} n={g.n}")


# ---- elementwise calls streamed in blocks ---------------------------------------------------------


def word_run(node: Node) -> int | None:
    """`stream_contiguous_views`: the element a host tensor's words start at in its storage when
    they are one run beginning on a word (a whole tensor: 0; `x[1:]` of float32, a reshape); else
    None (a strided view, a 16-bit `x[1:]`)."""
    if node.op != Op.VIEW:
        return 0
    span = contiguous_span(node)
    return None if span is None or span[0] * node.dtype.itemsize % 4 else span[0]


