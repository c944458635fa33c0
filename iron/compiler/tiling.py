"""Tiling rules: how a large kernel call spreads over many compute tiles. `tile_matmul_over_array`
cuts a MatMul (M, K) x (K, N) into output blocks of m x n over a grid of cores (rows of the
array x columns), each core summing its blocks over K in k-blocks, as whole-array GEMMs on these
devices do: A's row-blocks are shared along a row of cores, B's column-blocks along a column,
both streamed from the host through mem tiles, and each column's C blocks joined on its mem
tile. A MatVec (M, K) x (K,) is the same grid with n = 1: every core owns its own m rows of the
matrix (each column's mem tile splits one stream of rows between its cores), the vector's
k-blocks go to every core, and each column's results are joined on its mem tile; so is a
MatMul whose N is not whole words, with n = N (docs/platform.md sections 2 and 4 for the
channels and memories this counts, section 5 for the DMA limits). Calls streamed in blocks over
whole columns the same way are streaming.py's."""
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
    is_host_tensor,
    nbytes,
)
from iron.kernels.base import Role
from iron.plan import cost
from iron.plan.plan import Tile, TileKind
from iron.plan.rules import Rule

MAX_BLOCK = 256          # a block side, in elements: within a BD dimension's 1023 words either way
TILED_BYTES = 32 * 1024  # a MatMul whose operands and result take more than this is tiled
VECTOR_TILED_BYTES = 512 * 1024  # a MatVec matrix larger than a one-mem-tile split's 4 x 128 KiB
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
        """A MatVec: a vector result."""
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
        """Kernel calls per core."""
        return self.rounds * self.per_round * self.k_blocks

    def work(self, device) -> cost.Work:
        """What the grid does, for the cost model: a core's calls on its blocks (a fused
        expansion's too); A's row-blocks through one shim channel per grid row, sent again for
        each column block a core computes (each core its own rows: one per column); B's
        column-blocks through one per column, sent again each round (a MatVec's vector to every
        core); C's joined blocks through one per column."""
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
        calls = self.calls
        expanded = "" if self.expand is None else \
            f" (its matrix expanded on each core by {self.expand.arg.kernel.__name__} from {self.matrix.dtype.name} blocks)"
        return (f"{shape} {self.call.src[0].dtype.name} -> "
                f"{self.call.dtype.name}{expanded} over {len(self.tiles)} tiles ({len(self.rows)} rows x {len(self.cols)} "
                f"columns of cores): blocks m={self.m} k={self.k} n={self.n} ({self.padding()}), "
                f"{self.rounds * self.per_round} output blocks per core, {self.k_blocks} k-blocks each "
                f"({calls} kernel calls per core), summed in {self.acc.name}"
                + (f"; not more cores: {self.fewer}" if self.fewer else ""))

    def padding(self) -> str:
        """The stated rule for sides that are not whole words."""
        if self.padded is not None:
            pm, pk, pn = self.padded
            return f"pad_to_block: padded with zeros to M = {pm}, K = {pk}" + f", N = {pn}" * (not self.vector)
        why = unaligned(self.call, self.sides)
        if self.vector or why is None:
            return "each divides its side: no padding"
        owned = ", each core its own rows of A and C, B's k-blocks to every core" * self.own_rows
        return f"{why.split(':')[0]}: blocks take whole rows, contiguous and whole words{owned}, no padding"


def estimate_ns(candidate: OnCores, device) -> float:
    """The cost model's estimate of a grid or a stream (its `work`), in nanoseconds: what the
    compiler compares candidates by (a grid's blocks, a stream's block, a padded extent)."""
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


def accumulates_in(call: Node) -> np.dtype:
    """What the k-block sums are kept in: the result's dtype, float32 for a bfloat16 result."""
    return np.dtype(np.float32) if call.dtype == dtypes.bfloat16 else call.dtype


def wants_grid(call: Node, users: tuple[str | Reader, ...], expand: Node | None = None) -> bool:
    """A matrix call of two whole host tensors whose result only the host reads: a MatMul (a
    matrix result) whose operands and result take more than TILED_BYTES, a MatVec (a vector
    result) that `vector_tiles`, or a MatVec whose matrix a fused
    expansion makes of a whole host tensor (its blocks then taking more than that). Not a call
    whose matrix is stored packed (QMatVec's blocks), which no k-block may cut: it streams by rows."""
    kernel = call.arg.kernel
    if kernel.role is not Role.MATRIX or kernel.packed or call.arg.n_inputs != 2 or users != result_users(call):
        return False
    a, b = stored(call, expand), call.src[1]
    if not all(is_host_tensor(x) and x.op != Op.VIEW for x in (a, b)):
        return False
    if len(call.shape) == 1:
        return vector_tiles(a, call.src[0])
    if expand is not None:
        return False
    return nbytes(a) + nbytes(b) + nbytes(call) > TILED_BYTES


def result_users(call: Node) -> tuple[Reader | None, ...]:
    """Who a grid's result must alone be read by: the host (an output), or no one for a call
    writing a run of a state (out=) that starts on a word, where the grid's C blocks go instead;
    (None,), which no call's users are, for other state writes."""
    if call.arg.writes:
        return () if word_run(destination(call)) is not None else (None,)
    return (Reader.HOST,)


def vector_tiles(stored: Node, matrix: Node) -> bool:
    """`stream_k_blocks`: a MatVec tiles when its matrix as the host holds it (`stored`: a fused
    expansion's blocks) takes more than VECTOR_TILED_BYTES, or a row of the matrix as a core
    computes with it more than VECTOR_ROW_BYTES, as one row and the whole vector is then more
    than a split's tile holds beside its other objects; then its K streams."""
    return nbytes(stored) > VECTOR_TILED_BYTES or nbytes(matrix) // matrix.shape[0] > VECTOR_ROW_BYTES


def call_sides(call: Node) -> tuple[int, int, int]:
    """(M, K, N) of a MatMul (M, K) x (K, N), or of a MatVec (M, K) x (K,) with N = 1."""
    (big_m, big_k), vector = call.src[0].shape, len(call.shape) == 1
    return big_m, big_k, 1 if vector else call.shape[1]


def unaligned(call: Node, sides: tuple[int, int, int]) -> str | None:
    """Why no block of a MatMul of `sides` holds whole 32-bit words, which is all a DMA moves: its K (A's
    rows) or its N (B's and C's rows) is not a multiple of the elements in a word; else None."""
    _, big_k, big_n = sides
    a, out = call.src[0].dtype, call.dtype
    need_k, need_n = 4 // min(4, a.itemsize), 4 // min(4, min(a.itemsize, out.itemsize))
    if big_k % need_k:
        return f"K = {big_k} {a.name} elements of a row of A are not whole 32-bit words: make K a multiple of {need_k}"
    if big_n % need_n:
        return (f"N = {big_n} elements of a row of B and C are not whole 32-bit words: make N a multiple of "
                f"{need_n}")
    return None


def n_not_words(call: Node, big_n: int) -> bool:
    """Whether a MatMul's rows of B or C, `big_n` elements, are not whole 32-bit words."""
    return len(call.shape) == 2 and big_n * min(call.src[1].dtype.itemsize, call.dtype.itemsize) % 4 != 0


def divisors(n: int, word_elements: int) -> list[int]:
    """Block sides for an extent n: divisors up to MAX_BLOCK holding whole 32-bit words."""
    return [d for d in range(1, min(n, MAX_BLOCK) + 1) if n % d == 0 and d % word_elements == 0]


def choose_grid(call: Node, full_columns: list[int], spare: int, device, shim_in: int,
                expand: Node | None = None, padded: tuple[int, int, int] | None = None,
                most_rows: int | None = None) -> Grid | None:
    """`_grid_of`'s grid, kept by the call's structure (memo.py): the layers of a model ask alike."""
    return _grid_of(call, tuple(full_columns), spare, device, shim_in, most_rows, expand, padded)


def _rebound(grid: Grid | None, call: Node, *args) -> Grid | None:
    """A kept grid of another call of the same structure, as this call's (`args[-2]`: its expansion)."""
    return grid and replace(grid, call=call, expand=args[-2])


@by_shape(_rebound)
def _grid_of(call: Node, full_columns: tuple[int, ...], spare: int, device, shim_in: int, most_rows: int | None,
             expand: Node | None, padded: tuple[int, int, int] | None) -> Grid | None:
    """`tile_matmul_over_array`: of the grids of rows of cores that divide M and free whole columns that divide N
    (a MatVec: whose cores divide M), within `spare` tiles and `shim_in` shim MM2S channels (one per grid row and
    column; a MatVec one per column and one for the vector), each with, among blocks dividing their sides and
    holding whole words (B's and C's rows, A's k-block; a MatVec's m results) whose objects fit a core's memory
    (block_bytes) and whose moves are one Dma op per round (`_one_dma_per_move`), those of the least estimated
    time (`Grid.work`; then the fewest kernel calls per core, then the largest m x n), the fastest (the most
    cores on a tie; a shape whose `_floor_ns` no block beats is not priced). A MatVec whose matrix a fused expansion makes takes whole
    rows (k = K) when some fit, else k-blocks of whole expansion blocks (`expansion_k_blocks`). None when no block holds whole words (say an
    odd N in bfloat16). A grid of fewer cores than were free says why (`why_not_more`). `padded`:
    the sides `pad_to_block` padded the call to, which the grid computes instead of its own;
    `most_rows`: the rows of cores it may take at most (all the device's when None)."""
    big_m, big_k, big_n = sides = padded or call_sides(call)
    vector = len(call.shape) == 1
    own = vector or n_not_words(call, big_n)
    acc = accumulates_in(call)
    room = core_room(device)
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
                             if (b := _fastest_blocks(call, ms, ks, [1], big_m // (rows * ncols), big_k, 1, acc,
                                                      room, one_op, grid, device, expand)) is not None), None)
            elif vector:
                best = _best_blocks(call, big_m // (rows * ncols), big_k, 1, in_words, 1, acc, room, one_op, grid,
                                    device, out_words)
            elif unaligned(call, sides) is not None:
                best = _whole_row_blocks(call, sides, big_m // (rows * ncols if own else rows), ncols, acc, room,
                                         one_op, grid, device)
            else:
                best = _best_blocks(call, big_m // rows, big_k, big_n // ncols, in_words,
                                    max(in_words, out_words), acc, room, one_op, grid, device)
            if best is not None:
                (m, k, n), choice = best
                found.append(replace(grid, m=m, k=k, n=n, choice=choice))
                weighed.add((rows, ncols))
    if not found:
        return None
    grid = fastest(found)
    weighed.discard((len(grid.rows), len(grid.cols)))
    return replace(grid, fewer=why_not_more(grid, most_rows or len(device.compute_rows), len(full_columns), spare,
                                            shim_in, weighed))


def fastest(found: list) -> OnCores:
    """Of grids or streams of several shapes each with its fastest blocks (`choice`), the fastest (the earliest on
    a tie: the most cores come first), its Choice's best rejected the best of its other blocks and shapes."""
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
    """The k-blocks an expansion's rows of `row` stored bytes (K = `big_k` elements once
    expanded) may be cut into: those whose stored bytes are whole 32-bit words, within a BD
    dimension (docs/platform.md section 5), and expand by the expansion's own rule to k elements
    (whole blocks: a Dequant block is never cut)."""
    kernel, attrs = expand.arg.kernel, expand.arg.attr_dict

    def expands_to(k: int, stored: int) -> bool:
        try:
            return kernel.out_shape([(1, stored)], **attrs) == (1, k)
        except KernelTypeError:
            return False
    return [k for k in range(1, big_k + 1) if big_k % k == 0 and k * row % (4 * big_k) == 0
            and k * row // big_k // 4 <= device.shim.max_bd_wrap and expands_to(k, k * row // big_k)]


ONE_ROW_K = ("; one row is not split by rows, and K is not split over cores: each core would need its own K-range "
             "of both the row and the vector, and their partial sums added across cores, which no rule does")


def why_not_more(grid: Grid, most_rows: int, most_cols: int, spare: int, shim_in: int, weighed=frozenset()) -> str:
    """Why a grid has fewer cores than were free, so the rule never takes fewer silently: no
    larger grid divides the sides (blocks divide their sides, padded or not: there is no
    remainder block), or what stops each larger one that does (`_what_stops`; `weighed`: the shapes
    the cost model estimates no faster). "" when the grid took every free core."""
    cores, free = grid.cores, min(most_rows * most_cols, spare)
    if cores >= free:
        return ""
    big_m, _, big_n = grid.sides
    if grid.own_rows:
        side = f"cores dividing M = {big_m} (each core its own rows)"
        larger = [(r, c) for r in range(1, most_rows + 1) for c in range(1, most_cols + 1)
                  if r * c > cores and big_m % (r * c) == 0]
    else:
        side = f"rows of cores dividing M = {big_m} and columns dividing N = {big_n}"
        larger = [(r, c) for r in range(1, most_rows + 1) for c in range(1, most_cols + 1)
                  if r * c > cores and big_m % r == 0 and big_n % c == 0]
    if not larger:
        return (f"no grid of more than {cores} of the {free} free cores has {side}, and blocks divide their "
                "sides (no remainder block; padded only as pad_to_block says)" + ONE_ROW_K * (grid.vector and big_m == 1))
    taken = "are not taken" if weighed & set(larger) else "do not fit"
    return f"the larger grids with {side} {taken}: " + "; ".join(
        f"{r} x {c} {_what_stops(r, c, grid.own_rows, spare, shim_in, weighed)}" for r, c in larger)


def _what_stops(rows: int, cols: int, own_rows: bool, spare: int, shim_in: int, weighed) -> str:
    """What keeps `choose_grid` from a grid of rows x cols cores whose sides divide."""
    channels = cols + 1 if own_rows else rows + cols
    if (rows, cols) in weighed:
        return "is estimated no faster (choices)"
    if rows * cols > spare:
        return f"needs {rows * cols} tiles, the other groups leave {spare}"
    if channels > shim_in:
        return f"needs {channels} shim MM2S channels, the other groups leave {shim_in}"
    return "has no block that fits a core in one DMA op per move"


def _one_dma_per_move(device, rows: int, cols: int, own_rows: bool, big_k: int, big_n: int):
    """Whether blocks m x k x n keep each round's moves one Dma op each (docs/platform.md
    section 5: a repeat of at most 64, other sizes at most 1023 words), so a round never waits
    for buffer descriptors its own moves hold: the rows of C (where cores own their rows: of A)
    a column moves per round, and the repeat of A's and B's blocks; where cores own their rows,
    A's move per round is three sizes (k-blocks, rows, k) with no repeat, so up to 1023 k-blocks
    stream a row of any length (`stream_k_blocks`)."""
    repeat, wrap = device.dma_repeat_max, device.shim.max_bd_wrap

    def fits(m: int, k: int, n: int) -> bool:
        if own_rows:   # A's move: (k-blocks, rows, k), three sizes of at most `wrap`, no repeat
            return rows * m <= wrap and big_k // k <= wrap
        return rows * m <= wrap and big_n // (n * cols) <= repeat
    return fits


def _whole_row_blocks(call, sides, per_row, cols, acc, room, one_op, grid, device):
    """`whole_rows_when_not_words`: a MatMul whose K (A's rows) or N (B's and C's rows) is not
    whole 32-bit words is not cut along that side: its blocks take whole rows, k = K or n = N,
    and enough of them (m, or k for B) that each block is whole words and contiguous, which a
    DMA moves as one run of words. With n = N there are no column blocks: every core of every
    column owns its own rows of A and C (`per_row` each) and B's k-blocks go to every core. Any
    K or N whose blocks fit a core's memory takes the whole grid (a run longer than a BD
    dimension is cut into several Dma ops). No padding, and the host layout unchanged."""
    _, big_k, big_n = sides
    a, b, out = (x.dtype.itemsize for x in (call.src[0], call.src[1], call))
    whole_k, whole_n = big_k * a % 4 != 0, big_n * min(b, out) % 4 != 0
    ks = [big_k] if whole_k else divisors(big_k, 4 // min(4, a))
    ns = [big_n] if whole_n else divisors(big_n // cols, 4 // min(4, min(b, out)))
    per_col = big_n if whole_n else big_n // cols
    ms = [m for m in divisors(per_row, 1) if (m * big_k * a) % 4 == 0 or not whole_k]
    ms = [m for m in ms if (m * big_n * out) % 4 == 0 or not whole_n]
    ks = [k for k in ks if (k * big_n * b) % 4 == 0 or not whole_n]
    return _fastest_blocks(call, ms, ks, ns, per_row, big_k, per_col, acc, room, one_op, grid, device)


def _best_blocks(call, per_row, big_k, per_col, k_words, n_words, acc, room, one_op, grid, device, m_words=1):
    ms, ks, ns = divisors(per_row, m_words), divisors(big_k, k_words), divisors(per_col, n_words)
    return _fastest_blocks(call, ms, ks, ns, per_row, big_k, per_col, acc, room, one_op, grid, device)


def _fastest_blocks(call, ms, ks, ns, per_row, big_k, per_col, acc, room, one_op, grid, device, expand=None):
    """Among blocks whose objects fit a core's memory (block_bytes) in one Dma op per move, those
    of the least estimated time (`Grid.work`); among equal estimates the fewest kernel calls per
    core, then the largest m x n. (the blocks, the Choice) or None when no block fits."""
    fits = [(m, k, n) for m in ms for n in ns for k in ks
            if block_bytes(call, m, k, n, acc, expand) <= room and one_op(m, k, n)]
    if not fits:
        return None
    fits.sort(key=lambda b: ((per_row // b[0]) * (per_col // b[2]) * (big_k // b[1]), -b[0] * b[2]))
    return cost.choose(Rule.TILE_MATMUL_OVER_ARRAY, "blocks", fits, lambda b: estimate_ns(replace(grid, m=b[0], k=b[1], n=b[2]), device),
                       lambda b: f"m={b[0]} k={b[1]} n={b[2]}")


# ---- elementwise calls streamed in blocks ---------------------------------------------------------


def word_run(node: Node) -> int | None:
    """`stream_contiguous_views`: the element a host tensor's words start at in its storage
    when they are one run beginning on a word (a whole tensor: 0; a view without per-call
    indices picking one contiguous run, `x[1:]` of float32 or a reshape), which a DMA streams
    in blocks as it streams a whole tensor; else None (a strided view, or a 16-bit `x[1:]`
    starting mid-word)."""
    if node.op != Op.VIEW:
        return 0
    span = contiguous_span(node)
    if span is None or span[0] * node.dtype.itemsize % 4:
        return None
    return span[0]


