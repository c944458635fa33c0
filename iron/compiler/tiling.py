"""Tiling rules: how a large kernel call spreads over many compute tiles. `tile_matmul_over_array`
cuts a MatMul (M, K) x (K, N) into output blocks of m x n over a grid of cores (rows of the
array x columns), each core summing its blocks over K in k-blocks, as whole-array GEMMs on these
devices do: A's row-blocks are shared along a row of cores, B's column-blocks along a column,
both streamed from the host through mem tiles, and each column's C blocks joined on its mem
tile. A MatVec (M, K) x (K,) is the same grid with n = 1: every core owns its own m rows of the
matrix (each column's mem tile splits one stream of rows between its cores), the vector's
k-blocks go to every core, and each column's results are joined on its mem tile; so is a
MatMul whose N is not whole words, with n = N. `stream_elementwise` runs elementwise calls over tensors larger than a tile in blocks, spread
over whole columns of cores the same way (docs/platform.md sections 2 and 4 for the channels
and memories this counts, section 5 for the DMA limits)."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from iron import dtypes
from iron.compiler import cost
from iron.compiler.plan import Tile, TileKind
from iron.compiler.readers import Reader
from iron.compiler.rules import Rule
from iron.compiler.words import view_rows
from iron.errors import KernelTypeError
from iron.ir import (
    Node,
    Op,
    contiguous_span,
    describe,
    destination,
    dynamic_attrs,
    external_inputs,
    is_host_tensor,
    nbytes,
    storage,
    tensor_inputs,
)
from iron.kernels.base import Role

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
    fewest_calls: int = 0   # the fewest kernel calls per core of any block that fits (pad.py's FEW_CALLS compares these)

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
        b_side = 1 if self.vector else big_n
        if self.own_rows:
            a_channel, b_channel = big_m // cols * big_k * a_item, self.rounds * big_k * b_side * b.dtype.itemsize
            c_channel = big_m // cols * b_side * c.dtype.itemsize
            ddr = cols * (a_channel + c_channel) + b_channel
        else:
            a_channel = big_m // rows * big_k * a_item * self.per_round
            b_channel = self.rounds * big_k * (big_n // cols) * b.dtype.itemsize
            c_channel = big_m * (big_n // cols) * c.dtype.itemsize
            ddr = rows * a_channel + cols * (b_channel + c_channel)
        return cost.Work(self.calls * per_call, int(max(a_channel, b_channel, c_channel)), int(ddr))

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


def estimate_ns(candidate: Grid | Flow, device) -> float:
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
    expansion makes of a whole host tensor (its blocks then taking more than that)."""
    if call.arg.kernel.role is not Role.MATRIX or call.arg.n_inputs != 2 or users != result_users(call):
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
                expand: Node | None = None, padded: tuple[int, int, int] | None = None) -> Grid | None:
    """`tile_matmul_over_array`: the grid using the most rows of cores that divide M and the
    most free whole columns that divide N (a MatVec: whose cores divide M), within `spare`
    tiles and `shim_in` shim MM2S channels (one per grid row and column; a MatVec one per column
    and one for the vector), with, among blocks dividing their sides and holding whole words (B's and C's rows,
    A's k-block; a MatVec's m results) whose objects fit a core's memory (block_bytes) and whose
    moves are one Dma op per round (`_one_dma_per_move`), those of the least estimated time
    (`Grid.work`; then the fewest kernel calls per core, then the largest m x n). A MatVec whose matrix a fused expansion makes takes whole
    rows (k = K) when some fit, else k-blocks of whole expansion blocks (`expansion_k_blocks`). None when no block holds whole words (say an
    odd N in bfloat16). A grid of fewer cores than were free says why (`why_not_more`). `padded`:
    the sides `pad_to_block` padded the call to, which the grid computes instead of its own."""
    big_m, big_k, big_n = sides = padded or call_sides(call)
    vector = len(call.shape) == 1
    own = vector or n_not_words(call, big_n)
    acc = accumulates_in(call)
    room = core_room(device)
    in_words, out_words = 4 // min(4, call.src[0].dtype.itemsize), 4 // min(4, call.dtype.itemsize)
    rows_of = [r for r in range(len(device.compute_rows), 0, -1) if big_m % r == 0]
    for rows in rows_of:
        cols = [c for c in range(min(len(full_columns), spare // rows), 0, -1)
                if (big_m % (rows * c) == 0 if own else big_n % c == 0)
                and (c + 1 if own else rows + c) <= shim_in]
        for ncols in cols:
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
                (m, k, n), choice, fewest = best
                grid = replace(grid, m=m, k=k, n=n, choice=choice, fewest_calls=fewest)
                return replace(grid, fewer=why_not_more(grid, len(device.compute_rows), len(full_columns),
                                                        spare, shim_in))
    return None


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


def why_not_more(grid: Grid, most_rows: int, most_cols: int, spare: int, shim_in: int) -> str:
    """Why a grid has fewer cores than were free, so the rule never takes fewer silently: no
    larger grid divides the sides (blocks divide their sides, padded or not: there is no
    remainder block), or what stops each larger one that does (`_what_stops`). "" when the grid took every
    free core."""
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
    return f"the larger grids with {side} do not fit: " + "; ".join(
        f"{r} x {c} {_what_stops(r, c, grid.own_rows, spare, shim_in)}" for r, c in larger)


def _what_stops(rows: int, cols: int, own_rows: bool, spare: int, shim_in: int) -> str:
    """What keeps `choose_grid` from a grid of rows x cols cores whose sides divide."""
    channels = cols + 1 if own_rows else rows + cols
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
    core, then the largest m x n. (the blocks, the Choice, the fewest kernel calls per core of any
    of them) or None when no block fits."""
    fits = [(m, k, n) for m in ms for n in ns for k in ks
            if block_bytes(call, m, k, n, acc, expand) <= room and one_op(m, k, n)]
    if not fits:
        return None
    def calls(b):
        return (per_row // b[0]) * (per_col // b[2]) * (big_k // b[1])
    fits.sort(key=lambda b: (calls(b), -b[0] * b[2]))
    return (*cost.choose(Rule.TILE_MATMUL_OVER_ARRAY, "blocks", fits, lambda b: estimate_ns(replace(grid, m=b[0], k=b[1], n=b[2]), device),
                         lambda b: f"m={b[0]} k={b[1]} n={b[2]}"), calls(fits[0]))


# ---- elementwise calls streamed in blocks ---------------------------------------------------------

FLOW_BLOCK = 4096   # the most elements of one block
MAX_FLOW_INPUTS = 2  # a compute tile's input DMA channels: one FIFO per input
ROW_WISE = (Role.ROW_REDUCTION, Role.EXPANSION)   # the roles whose calls stream in blocks of whole rows


@dataclass(frozen=True)
class Flow(OnCores):
    """Elementwise calls streamed in blocks of `block` elements over `rows` x `cols` cores:
    core (r, c) runs the calls on blocks (t * len(cols) + c) * len(rows) + r for t < `rounds`;
    each column's mem tile `mems[c]` splits each input's stream between its cores and joins
    their results. A row reduction over a batch of rows of `width` elements streams the same
    way in blocks of whole rows (`stream_row_blocks`): a block of `block // width` rows (`width`:
    as they lie, padded by `pad_through_row_width` or their own); an input every row shares
    (RMSNorm's w, in `shared`, as wide) goes whole to every core once, and so does one object of
    the call's per-call attributes (Softmax's length), when it takes any."""

    calls: tuple[Node, ...]
    inputs: tuple[Node, ...]
    rows: tuple[int, ...]
    cols: tuple[int, ...]
    block: int
    mems: tuple[Tile, ...] = ()
    width: int = 1
    shared: tuple[Node, ...] = ()
    objects: int = 2   # of each FIFO on a core: 1 when one row fills the tile
    padded: int | None = None   # the elements `pad_to_block` padded the tensors to
    returned: tuple[Node, ...] = ()   # earlier calls whose blocks go to the host too (`stream_every_result`)
    pieces: tuple[Node, ...] = ()   # the tensors a Concat joins end to end, streamed in turn (`stream_joined`)
    choice: cost.Choice | None = None   # the block, chosen by estimated time

    @property
    def results(self) -> tuple[Node, ...]:
        """The calls whose blocks each column joins for the host: the last, then those returned."""
        return (self.calls[-1], *self.returned)

    @property
    def size(self) -> int:
        """The elements each input streams: padded, or its own (a join's: all its pieces')."""
        return self.padded or sum(n.size for n in self.pieces or self.inputs[:1])

    @property
    def rounds(self) -> int:
        return self.size // (self.block * len(self.tiles))

    @property
    def per_call(self) -> tuple[tuple[Node, str, Node], ...]:
        """(call, attribute, value) of the calls' per-call attributes, in the order of their
        words in the object every core receives."""
        return tuple((c, name, value) for c in self.calls for name, value in dynamic_attrs(c))

    @property
    def result_block(self) -> int:
        """The result's elements per block: `block`, or one per row for Argmax."""
        return result_share(self.calls, self.block, self.width)

    def work(self, device) -> cost.Work:
        """What the stream does, for the cost model: a core's calls on its blocks, each input
        through one shim channel per column and each result back through one (a row
        reduction's result a share of its rows)."""
        gen, (shapes, out) = cost.generation(device), self.shapes()
        per_block = sum(cost.kernel_cycles(gen, c.arg.kernel.role, c.src[0].dtype, shapes[:c.arg.n_inputs],
                                           out if c is self.calls[-1] else shapes[0], c.dtype) for c in self.calls)
        moved = [self.size * n.dtype.itemsize for n in self.inputs]
        moved += [self.size // self.block * self.result_block * c.dtype.itemsize for c in self.results]
        return cost.Work(self.rounds * per_block, max(moved) // len(self.cols), sum(moved))

    def shapes(self) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
        """A block call's input shapes and result shape."""
        call = self.calls[-1]
        if self.width == 1:
            return [(self.block,)] * call.arg.n_inputs, (self.block,)
        shapes = [(self.block // self.width, self.width), *((self.width,) for _ in self.shared)]
        return shapes, call.arg.kernel.out_shape(shapes, **call.arg.attr_dict)

    def text(self) -> str:
        names = ", ".join(c.arg.kernel.__name__ for c in self.calls)
        where = (f"over {len(self.tiles)} tiles ({len(self.rows)} rows x {len(self.cols)} columns of cores), "
                 f"{self.rounds} blocks per core")
        words = "".join(f", {name}={describe(value)} a per-call word every core receives"
                        for _, name, value in self.per_call)
        if self.width > 1:
            single = ", one object of each FIFO (a row fills the tile: no overlap)" * (self.objects == 1)
            (rows, width), wider = self.inputs[0].shape, f" of {self.width} elements" * (self.width != self.inputs[0].shape[1])
            if self.calls[-1].arg.kernel.role is Role.EXPANSION:
                return (f"{names} over {rows} rows of {width} elements streamed in blocks of {self.block // self.width} "
                        f"units of {self.width} elements, each expanded alone (stream_expansion_units) {where}{single}")
            padding = f" (pad_to_block: padded with zeros to {self.size // self.width} rows{wider})" * (self.padded is not None)
            return (f"{names} over {rows} rows of {width} elements{padding} streamed "
                    f"in row-blocks of {self.block // self.width} rows {where}{words}{single}")
        padding = f" (pad_to_block: padded with zeros to {self.padded})" * (self.padded is not None)
        views = "".join(_streamed_view(n) for n in self.inputs if n.op == Op.VIEW)
        dest = destination(self.calls[-1])
        into = "" if dest is None else (f"; into {describe(dest)} (stream_into_state: each block back where it was "
                                        f"read){_streamed_view(dest) if word_run(dest) is None else ''}")
        also = "".join(f"; {describe(c)} joined for the host too (stream_every_result)" for c in self.returned)
        if self.pieces:
            also += (f"; {' then '.join(map(describe, self.pieces))} copied block by block, each piece's blocks "
                     "in turn (stream_joined)")
        return (f"{names} over {self.calls[-1].size} elements{padding} streamed in blocks of {self.block} "
                f"{where}{words}{views}{into}{also}")


def streamable(calls) -> bool:
    """Whether `stream_elementwise` may stream the calls: `unstreamable` finds nothing against."""
    return unstreamable(calls) is None


def unstreamable(calls, label=lambda c: c.arg.kernel.__name__) -> str | None:
    """Why elementwise calls do not stream in blocks, naming calls by `label`; None when they do:
    elementwise calls (by Role) over tensors of one element count, reading at most
    MAX_FLOW_INPUTS host tensors, with one object of their per-call attributes (a threshold given
    per call, a constant form's per-call value) counted as one more, that each lie in one run of whole words
    (`stream_contiguous_views`), none writing a state but the last, as `stream_into_state` allows."""
    for c in calls:
        if c.arg.kernel.role is not Role.ELEMENTWISE:
            return (f"{label(c)} is not elementwise ({c.arg.kernel.role.value}): its result's blocks are not "
                    "those of its inputs")
        if c.arg.writes and (c is not calls[-1] or not stream_into_state(calls)):
            return (f"{label(c)} writes {describe(destination(c))}, and only a group's last call streams into a "
                    "state, as one run of whole words it reads only as that view")
    outside = external_inputs(calls)
    fifos = [*map(describe, outside)] + ["the per-call words"] * any(dynamic_attrs(c) for c in calls)
    if len(fifos) > MAX_FLOW_INPUTS:
        return (f"it reads {len(fifos)} inputs ({', '.join(fifos)}) but a core has "
                f"{MAX_FLOW_INPUTS} input DMA channels")
    for n in outside:
        if not is_host_tensor(n) or (word_run(n) is None and streamed_rows(n) is None):
            return (f"it reads {describe(n)}, which is not a host tensor lying in one run of whole words or in "
                    "rows of whole words one stride apart")
    size = calls[-1].size
    for c in calls:
        for n in (c, *tensor_inputs(c), *filter(None, [destination(c)])):
            if n.size != size:
                return f"{describe(n)} has {n.size} elements but {label(calls[-1])}'s result {size}"
    return None


def stream_into_state(calls) -> bool:
    """`stream_into_state`: a last call writing a state (out=) streams its result blocks back into
    the state's words when they are one run of whole words the calls read, if at all, only as
    that same view (Accumulate's own destination): each block then goes back where it came from,
    and no core reads words another core writes. True too when the calls write no state."""
    dest = destination(calls[-1])
    if dest is None:
        return True
    if word_run(dest) is None and streamed_rows(dest) is None:
        return False
    return all(n is dest or storage(n) is not storage(dest) for n in external_inputs(calls))


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


def _streamed_view(n: Node) -> str:
    if word_run(n) is None:
        return (f"; {describe(n)} streamed in blocks of whole rows of {n.shape[-1]} elements by its DMA access "
                "pattern (stream_view_rows)")
    return (f"; {describe(n)} streamed as one run of words from element {word_run(n)} of {describe(n.src[0])} "
            "(stream_contiguous_views)")


def streamed_rows(node: Node) -> int | None:
    """`stream_view_rows`: the elements of a row of a host view that is not one run of words but
    whose rows (its last axis) lie as whole words one stride apart (a step slice, a transpose, a
    broadcast, a state's interior), which a stream moves in blocks of whole rows by a DMA access
    pattern; else None."""
    if node.op != Op.VIEW or not is_host_tensor(node) or word_run(node) is not None or view_rows(node) is None:
        return None
    return node.shape[-1]


def row_streamable(calls) -> bool:
    """One row reduction, or one expansion (by Role: Dequant, each row of blocks to a row of
    weights), over a batch of rows that `rows_do_not_stream` finds nothing against."""
    return (len(calls) == 1 and calls[0].arg.kernel.role in ROW_WISE and len(calls[0].src[0].shape) == 2
            and rows_do_not_stream(calls, describe) is None)


def expansion_unit(call: Node) -> int:
    """`stream_expansion_units`: the fewest elements of a row an expansion expands alone (Dequant:
    one GGUF block), found by its own rule (out_shape), so its rows, however long, stream in
    blocks of such units: the rows lie end to end, unit after unit, in host memory."""
    kernel, attrs, row = call.arg.kernel, call.arg.attr_dict, call.src[0].shape[1]

    def expands(width: int) -> bool:
        try:
            kernel.out_shape([(1, width)], **attrs)
        except KernelTypeError:
            return False
        return True
    return next(w for w in range(1, row + 1) if row % w == 0 and expands(w))


def rows_do_not_stream(calls, label) -> str | None:
    """Why a group holding a row reduction over a batch of rows (rows, n) does not stream in
    row-blocks, naming calls by `label`; None when it does: the reduction alone in its group,
    writing no state, reading whole host tensors (the rows, and any row (n,) every row shares,
    RMSNorm's w), each core taking at most MAX_FLOW_INPUTS FIFOs: its row-blocks, each shared
    row, and one object of the per-call attributes (Softmax's length) when it takes any."""
    call = next(c for c in calls if c.arg.kernel.role in ROW_WISE)
    x, *shared = call.src[:call.arg.n_inputs]
    if len(calls) != 1:
        others = ", ".join(label(c) for c in calls if c is not call)
        return f"it is fused with {others}, and a row reduction streams alone, reading host tensors"
    if call.arg.writes:
        return "it writes a state (out=), and a streamed result goes to the host"
    for n in (x, *shared):
        if not is_host_tensor(n) or n.op == Op.VIEW:
            return f"it reads {describe(n)}, and a streamed row reduction reads whole host tensors"
        if n is not x and n.shape != x.shape[1:]:
            return f"it reads {describe(n)} of shape {n.shape}, and every row shares only rows {x.shape[1:]}"
    fifos = ["its row-blocks", *map(describe, shared)] + ["the per-call words"] * bool(dynamic_attrs(call))
    if len(fifos) > MAX_FLOW_INPUTS:
        return (f"each core would take {len(fifos)} FIFOs ({', '.join(fifos)}) but has {MAX_FLOW_INPUTS} "
                "input DMA channels")
    return None


def flow_bytes(calls, block: int, width: int, objects: int = 2, returned: tuple[Node, ...] = ()) -> int:
    """A core's tile memory for blocks of `block` elements (rows of `width`): `objects` of each
    input and of each result (a row reduction's: its share of the block; the `returned` calls'
    too), of each shared row and of the per-call words, and one block of every other call's
    result."""
    inputs, shared = streamed_inputs(calls)
    result = result_share(calls, block, width)
    held = block * sum(n.dtype.itemsize for n in (*inputs, *returned)) + result * calls[-1].dtype.itemsize
    held += width * sum(n.dtype.itemsize for n in shared) + 4 * sum(len(dynamic_attrs(c)) for c in calls)
    return objects * held + block * sum(c.dtype.itemsize for c in calls[:-1] if c not in returned)


def result_share(calls, block: int, width: int) -> int:
    """The elements of the last call's result a block of `block` elements (rows of `width`)
    makes: as many, one per row (Argmax), or an expansion's rows (Dequant: each row of blocks
    a row of weights)."""
    last = calls[-1]
    if last.arg.kernel.role is Role.EXPANSION:
        return block * last.shape[1] // last.src[0].shape[1]
    return block if len(last.shape) == len(streamed_inputs(calls)[0][0].shape) else block // width


def joined_pieces(calls) -> tuple[Node, ...]:
    """`stream_joined`: the host tensors a lone Concat joins end to end (nothing before the axis it
    joins along, so its result is the first's words then the second's), each lying in one run of
    whole words, which one FIFO streams one after the other; () for any other calls."""
    if len(calls) != 1 or not calls[0].arg.kernel.joins:
        return ()
    call, pieces = calls[0], tuple(calls[0].src[:2])
    outer = call.arg.kernel.sizes([n.shape for n in pieces], call.shape)[0]
    if outer != 1 or any(not is_host_tensor(n) or word_run(n) is None for n in pieces):
        return ()
    return pieces


def streamed_inputs(calls) -> tuple[list[Node], list[Node]]:
    """(the inputs streamed in blocks, the rows every row shares) of a Flow's calls; a join
    streams its pieces through one FIFO, which its first piece stands for."""
    if pieces := joined_pieces(calls):
        return [pieces[0]], []
    inputs = external_inputs(calls)
    return [n for n in inputs if n.size == inputs[0].size], [n for n in inputs if n.size != inputs[0].size]


def choose_flow(calls, full_columns: list[int], spare: int, device, shim_in: int, width: int = 1,
                padded: int | None = None, row: int = 1, returned: tuple[Node, ...] = ()) -> Flow | None:
    """`stream_elementwise` (and `stream_row_blocks`, in blocks of whole rows of `width`
    elements): on the most free whole columns (within `spare` tiles and `shim_in`
    shim MM2S channels, one per input and column) and the most
    of their rows whose mem tile can split every input and join the results (an input DMA
    channel per input and core, an output one per input and core plus the result's), blocks of
    the least estimated time (`Flow.work`; then the most elements), at most FLOW_BLOCK, that divide each core's share, hold whole 32-bit
    words and fit a core's memory (flow_bytes) with two objects of each FIFO, or one object
    each (no overlap of moves and work) when a block of one row fits only so (a join's blocks
    dividing each piece's share too: `stream_joined`). None when no block does. `padded`: the elements `pad_to_block` padded the tensors to, streamed instead of theirs.
    `row`: elementwise calls whose result lies in wider rows (`pad_written_by_producer`) take
    blocks of whole rows of that many elements, which each core writes row by row. `returned`:
    earlier calls whose blocks go to the host too, each taking a FIFO per core and a join per
    column (`stream_every_result`)."""
    inputs, shared = streamed_inputs(calls)
    pieces = joined_pieces(calls)
    size = padded or sum(n.size for n in pieces or inputs[:1])
    shim_in -= len(shared) + any(dynamic_attrs(c) for c in calls)   # each shared row, the words: to every core
    mem = device.mem

    def whole_words(b: int) -> bool:   # each input's block, each call's result for it (a row reduction's: a share)
        return all(b * n.dtype.itemsize % 4 == 0 for n in (*inputs, *calls[:-1])) and \
            result_share(calls, b, width) * calls[-1].dtype.itemsize % 4 == 0
    room = core_room(device)
    objects = 2 if width == 1 or flow_bytes(calls, width, width) <= room else 1
    results = 1 + len(returned)
    most_rows = min(len(device.compute_rows), (mem.dma_out_channels - results) // len(inputs),
                    (mem.dma_in_channels - len(inputs)) // results)
    for ncols in range(min(len(full_columns), spare, shim_in // len(inputs)), 0, -1):
        for rows in range(min(most_rows, spare // ncols), 0, -1):
            share = size // (rows * ncols)
            if size % (rows * ncols):
                continue
            blocks = [b for b in range(min(share, max(FLOW_BLOCK, width)), 0, -1)
                      if share % b == 0 and b % (width * row) == 0 and whole_words(b)
                      and all(n.size % (rows * ncols * b) == 0 for n in pieces)
                      and flow_bytes(calls, b, width, objects, returned) <= room]
            if blocks:
                flow = Flow(tuple(calls), tuple(inputs), tuple(device.compute_rows[:rows]),
                            tuple(full_columns[:ncols]), blocks[0], width=width, shared=tuple(shared),
                            objects=objects, padded=padded, returned=returned, pieces=pieces)
                rule = Rule.STREAM_JOINED if pieces else Rule.STREAM_ROW_BLOCKS if width > 1 else Rule.STREAM_ELEMENTWISE
                block, choice = cost.choose(rule, "block", blocks, lambda b, flow=flow: estimate_ns(replace(flow, block=b), device),
                                            lambda b: f"{b} elements")
                return replace(flow, block=block, choice=choice)
    return None
