"""How the compiler gathers a view no DMA pattern moves in whole 32-bit words (a step slice,
transpose, broadcast or mid-word slice of 1- or 2-byte elements, or a view of a result picking
many runs), for `copy_view_for_grid` (copies.py): on one core when it fits a tile (Strided),
else by StridedRows over the whole rows it picks from, streamed, or by Strided calls into a DDR
buffer of the compiler's (a THROUGH declaration): a broadcast's unit repeated by the DMA, a
transpose or a view of rows band by band. Each call's access pattern has four dimensions in
elements, as a BD's (docs/platform.md section 2)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from aie_utils.devices import COMPUTE_TILE
from iron.compiler.fuse import SIZE_LIMIT, held_bytes
from iron.compiler.streaming import streamed_rows
from iron.compiler.tiling import TILED_BYTES, word_run
from iron.compiler.words import dma_moves
from iron.ir import (
    Axis,
    Call,
    Declared,
    MemoryKind,
    Node,
    Op,
    contiguous_span,
    element_pattern,
    elements,
    frame,
    is_host_tensor,
    kept,
    kept_shape,
    nbytes,
)
from iron.kernels.registry import copy_kernel, scatter_kernel, strided_kernel

SINGLE_BYTES = COMPUTE_TILE.data_memory_bytes - 2048   # a core's words and result, one object each, beside its stack


def copied(node: Node) -> Node:
    """A Copy call of `node` (the compiler's, as `Copy.step(node)` would record it)."""
    return Node(Op.CALL, (node,), node.shape, node.dtype, Call(copy_kernel(), (), 1, False))


def viewed(base: Node, shape, axes) -> Node:
    return Node(Op.VIEW, (base,), tuple(shape), base.dtype, tuple(axes))


def whole(shape) -> tuple[Axis, ...]:
    """The axes of a view picking all of a tensor of `shape`."""
    return tuple(Axis(start=0, stop=n, extent=n) for n in shape)


def pattern_attrs(offset: int, dims, **named) -> tuple:
    """A Strided family call's static attributes: `named`, the offset and four (size, stride)
    dimensions in elements (`dims` padded with unit ones outside)."""
    dims = [(1, 0)] * (4 - len(dims)) + list(dims)
    attrs = {**named, "offset": offset, **{f"n{d}": n for d, (n, _) in enumerate(dims)},
             **{f"s{d}": st for d, (_, st) in enumerate(dims)}}
    return tuple(sorted(attrs.items()))


@dataclass(frozen=True)
class Written:
    """A view read through a DDR buffer of the compiler's (`read`, a THROUGH memory or a view of
    one) that `calls`, inserted before its first reader, write."""

    read: Node
    calls: tuple[Node, ...]

    @property
    def padded(self) -> bool:   # written in zero-padded rows, so it lies padded in both axes
        return bool(rows_written(self.calls))


def gather_view(view: Node, name: str, width: int | None = None) -> Node | Written:
    """What a view `_gathered_on_core` finds is read through: on one core when it and its tensor
    fit a tile; else (the tensor crossing in DDR) a Copy when the DMA moves it, else the first
    way below that takes it (`name`: the DDR buffer a way writes, if any); a transpose a grid reads
    lying in `width`, its padded side, first by `transposed_bands`, which writes it so."""
    if max(nbytes(view.src[0]), nbytes(view)) <= TILED_BYTES:   # a broadcast may be far larger than its tensor
        return gathered(view)
    if dma_moves(view) and not unpadded_stream(view):
        return copied(view)
    return (width and transposed_bands(view, name, width) or repeated_unit(view, name) or rows_gathered(view)
            or repeated_columns(view) or transposed_bands(view, name) or row_bands(view, name) or copied(view))


def unpadded_stream(view: Node, reader: Node | None = None) -> bool:
    """A view of a host tensor whose elements are not whole 32-bit words (251 x 251 bfloat16) or
    that starts mid-word, larger than a tile or read by a call whose tensors are (`held_bytes`): a
    stream reading it must pad its rows, and a view cannot lie padded (its base's words follow), nor
    does a stream read it after a lead (`pad_lead_to_words`), so it is read through a tensor of the
    compiler's, which may."""
    large = nbytes(view) > TILED_BYTES or reader is not None and held_bytes([reader]) > SIZE_LIMIT
    return view.op == Op.VIEW and is_host_tensor(view) and (nbytes(view) % 4 != 0 or not dma_moves(view)) and large


def repeated_unit(view: Node, name: str) -> Written | None:
    """A broadcast along its outermost axis larger than a tile, of a tensor that fits one, whose
    repeat is not whole 32-bit words (a row of 251 int8 over 256 rows), as its fewest leading
    repeats that are (its unit: 4 rows here) gathered into a DDR buffer of the compiler's, read
    back by the DMA repeating the unit with stride 0 (`stream_view_rows`); else None."""
    axes = view.arg
    outer = kept(axes)[0] if kept(axes) else None
    if outer is None or outer.step != 0 or any(a.order is not None for a in axes):
        return None
    period, itemsize = view.size // outer.size, view.dtype.itemsize
    count = next((k for k in (1, 2, 4) if k * period * itemsize % 4 == 0 and outer.size % k == 0), 0)
    unit = viewed(view.src[0], (count, *kept_shape(axes)[1:]), (replace(a, length=count) if a is outer else a for a in axes))
    if not count or nbytes(view.src[0]) + nbytes(unit) > TILED_BYTES:
        return None
    buffer = Node(Op.MEMORY, (), unit.shape, unit.dtype, Declared(MemoryKind.THROUGH, name))
    repeats = (Axis(start=0, stop=1, length=outer.size // count, extent=1, step=0), *whole(unit.shape))
    return Written(viewed(buffer, view.shape, repeats), (written(view.src[0], buffer, *element_pattern(unit)),))


def rows_gathered(view: Node) -> Node | None:
    """A StridedRows call picking 2-D static `view` row by row from the whole rows of words it
    picks from, which the DMA streams in blocks of rows: a step slice along its tensor's last
    axis (the rows: its tensor, or a view of a host tensor the DMA moves as one run or as rows one
    stride apart), or a transpose (`transposed_rows`); else None."""
    if len(view.shape) != 2 or len(view.src) > 1:
        return None
    base = view.src[0]
    if _transposes(view):
        return transposed_rows(view)
    axes, last = view.arg, view.arg[-1]
    if not last.keeps_axis or last.step < 1 or kept(axes)[-1] is not last:
        return None
    width = frame(view)[-1]
    rows = viewed(base, (view.shape[0], width), (*axes[:-1], replace(last, start=0, stop=width, step=1)))
    if base.shape == rows.shape and contiguous_span(rows) == (0, base.size):
        rows = base
    elif not is_host_tensor(base) or (word_run(rows) is None and streamed_rows(rows) is None):
        return None
    if not _blocks_of_words(view.shape[0], width * view.dtype.itemsize, last.size * view.dtype.itemsize):
        return None
    return _strided_rows(rows, view.shape, width, last.start, [(last.size, last.step)], view)


def repeated_columns(view: Node) -> Node | None:
    """`view`, a column (r, 1) of a host tensor's 1- or 2-byte elements broadcast to (r, c), as a
    StridedRows call over them seen as rows of one word (`per` elements), each giving `per` rows
    of the view; None for any other view, or when r is no multiple of `per`."""
    base, (r, c) = view.src[0], (view.shape + (0,))[:2]
    per = 4 // view.dtype.itemsize
    if len(view.shape) != 2 or not is_host_tensor(base) or base.op == Op.VIEW or base.size != r or r % per:
        return None
    if element_pattern(view) != (0, [(r, 1), (c, 0)]):
        return None
    return _strided_rows(viewed(base, (r // per, per), whole((r // per, per))), (r // per, per * c), per, 0,
                         [(per, 1), (c, 0)], view)


def transposed_bands(view: Node, name: str, width: int | None = None) -> Written | None:
    """`view`, the transpose of a 2-D host tensor x (r, c) whose rows are not whole 32-bit words
    (no columns of words pick it), as bands of x's rows (the most whose words and transpose fit a
    tile, a run the DMA moves), each transposed by a Strided call into its columns of a DDR
    buffer of the compiler's (c, r). When r elements are not whole words either, the buffer's rows
    are padded, the last band placed by a Scatter (the padding keeps the zeros the buffer is made
    with): to `width` when a grid reading it asks so, the buffer then lying in those zero-padded
    rows (`rows_written`), else to whole words and its first r columns picked again (`row_bands`).
    None for any other view."""
    base = view.src[0]
    if len(base.shape) != 2 or not in_ddr(base) or not _transposes(view):
        return None
    (r, c), itemsize = base.shape, base.dtype.itemsize
    per = 4 // itemsize
    step = math.lcm(4 // math.gcd(4, c * itemsize), per)   # rows starting both runs on a word
    band, wide = TILED_BYTES // (2 * c * itemsize) // step * step, max(width or 0, -(-r // per) * per)
    if not band:
        return None
    buffer = Node(Op.MEMORY, (), (c, r) if width else (c, wide), view.dtype, Declared(MemoryKind.THROUGH, name))
    writers = []
    for first in range(0, r, band):
        rows, words = min(band, r - first), min(band, wide - first)
        part = viewed(base, (rows, c), (Axis(start=first, stop=first + rows), Axis(start=0, stop=c)))
        into = viewed(buffer, (c, words), (Axis(start=0, stop=c, extent=width and c),   # its rows as they lie
                                           Axis(start=first, stop=first + words, extent=width and wide)))
        writers.append(written(part, into, 0, [(c, 1), (rows, c)]) if rows == words
                       else written(part, into, 0, [(rows, 1), (c, words)], scatter_kernel()))
    if wide == r or width:
        return Written(buffer, tuple(writers))
    picked = row_bands(viewed(buffer, view.shape, (Axis(start=0, stop=c), Axis(start=0, stop=r))), f"{name}.rows")
    return picked and Written(picked.read, (*writers, *picked.calls))


def row_bands(view: Node, name: str) -> Written | None:
    """A static view of a host tensor x picking in order along its outermost axis (`x[1:]`,
    `x[::2]`, `x[:, 1:]`, `x[::2, ::2]`, a broadcast column or row), as bands of that axis, each
    the most entries (starting and ending on a word) whose result and the whole words of x they
    come from fit half a tile (else a tile, one object of each FIFO): a Strided call per band picks
    them from those words (a run the DMA moves) into a DDR buffer of the compiler's; None for any
    other view."""
    base, axes = view.src[0], view.arg
    if not in_ddr(base) or not view.shape or view.shape != kept_shape(axes) or any(a.order is not None for a in axes):
        return None
    down, (rows, *inner), itemsize = kept(axes)[0], view.shape, view.dtype.itemsize
    per, width = 4 // itemsize, int(np.prod(inner, dtype=np.int64))
    unit = 4 // math.gcd(4, width * itemsize)   # entries of the outermost axis making whole words

    def part(a: int, b: int) -> tuple[Node, int, int]:   # entries a..b-1 of the view, and the whole words they lie in
        axis = replace(down, length=b - a) if down.step == 0 else \
            replace(down, start=down.start + a * down.step, stop=down.start + (b - 1) * down.step + 1)
        picked = viewed(base, (b - a, *inner), (axis if x is down else x for x in axes))
        first, dims = element_pattern(picked)
        last = first + sum((n - 1) * st for n, st in dims)
        return picked, first // per * per, min(-(-(last + 1) // per) * per, base.size)

    def fits(k: int, room: int) -> bool:
        _, lo, hi = part(0, min(k, rows))
        return (hi - lo + min(k, rows) * width) * itemsize <= room
    band = next((band for room in (TILED_BYTES, SINGLE_BYTES)   # two objects of each FIFO, else one
                 if (band := max((k for k in range(unit, rows + unit, unit) if fits(k, room)), default=0))), 0)
    if not band:
        return None
    buffer = Node(Op.MEMORY, (), view.shape, view.dtype, Declared(MemoryKind.THROUGH, name))
    writers = []
    for a in range(0, rows, band):
        b = min(a + band, rows)
        picked, lo, hi = part(a, b)
        first, dims = element_pattern(picked)
        words = viewed(base, (hi - lo,), (Axis(start=lo, stop=hi, extent=base.size),))
        into = viewed(buffer, picked.shape, (Axis(start=a, stop=b), *(Axis(start=0, stop=n) for n in inner)))
        writers.append(written(words, into, first - lo, dims))
    return Written(buffer, tuple(writers))


def rows_written(calls) -> dict[Node, tuple[int, ...]]:
    """The buffers of the compiler's that gathers write in zero-padded rows (`transposed_bands`
    for a grid), each with the shape it lies in: its writers' frame."""
    return {d.src[0]: frame(d) for c in calls if c.arg.writes and (d := c.src[c.arg.n_inputs]).op == Op.VIEW
            and math.prod(frame(d)) > d.src[0].size}


def region(product: Node) -> Node:
    """A copy of a product's region, reading it as it lies (padded, so the grid may pad it): a Copy
    when its rows are whole words, else a StridedRows picking each row's first elements, which
    reads rows padded wider (`picks_rows`)."""
    n = product.shape[-1]
    if n * product.dtype.itemsize % 4 == 0:
        return copied(viewed(product, product.shape, (Axis(start=0, stop=k) for k in product.shape)))
    return _strided_rows(product, product.shape, n, 0, [(n, 1)], product)


def in_ddr(base: Node) -> bool:
    """Whether a view's whole tensor lies in DDR: a host tensor, or a result larger than a tile."""
    return base.op != Op.VIEW and (is_host_tensor(base) or base.op == Op.CALL and nbytes(base) > TILED_BYTES)


def _transposes(view: Node) -> bool:
    """Whether a static view of a 2-D tensor is its transpose."""
    base = view.src[0]
    return len(base.shape) == 2 and view.shape == base.shape[::-1] and \
        np.array_equal(elements(view), np.arange(base.size).reshape(base.shape).T.ravel())


def _blocks_of_words(rows: int, row_bytes: int, result_bytes: int) -> bool:
    """Whether some number of rows dividing `rows` makes whole 32-bit words of both the rows and
    their results: a stream's blocks must (a step slice of a prime number of rows whose result
    rows are not whole words has none)."""
    return any(rows % k == 0 and k * row_bytes % 4 == 0 and k * result_bytes % 4 == 0 for k in (1, 2, 4))


def transposed_rows(view: Node) -> Node | None:
    """`view`, the transpose of a 2-D tensor x (r, c) whose rows are whole words of `per` elements,
    as StridedRows over x seen as (c / per, r * per), each row a column of x's words, transposed
    by the core into `per` rows of the view; None when x's rows are not whole words."""
    base = view.src[0]
    (r, c), per = base.shape, 4 // base.dtype.itemsize
    if c % per or not is_host_tensor(base) and base.op != Op.CALL:
        return None
    axes = (Axis(start=0, stop=r, extent=r, order=1), Axis(start=0, stop=c // per, extent=c // per, order=0),
            Axis(start=0, stop=per, extent=per, order=2))
    columns = viewed(base, (c // per, r * per), axes)
    if base.op != Op.CALL and streamed_rows(columns) is None:
        return None
    return _strided_rows(columns, (c // per, per * r), r * per, 0, [(per, 1), (r, per)], view)


def _strided_rows(rows: Node, shape: tuple[int, ...], width: int, offset: int, dims, view: Node) -> Node:
    """A StridedRows call over `rows` making `shape`, read back in `view`'s shape when it differs."""
    call = Call(strided_kernel(rows=True), pattern_attrs(offset, dims, width=width), 1, False)
    picked = Node(Op.CALL, (rows,), shape, rows.dtype, call)
    return picked if shape == view.shape else viewed(picked, view.shape, whole(view.shape))


def gathered(view: Node) -> Node:
    """A Strided call picking static VIEW `view` from its whole tensor by the view's access
    pattern in elements (at most four dimensions)."""
    offset, dims = element_pattern(view)
    call = Call(strided_kernel(), pattern_attrs(offset, dims, shape=view.shape), 1, False)
    return Node(Op.CALL, (view.src[0],), view.shape, view.dtype, call)


def written(source: Node, into: Node, offset: int, dims, kernel: type | None = None) -> Node:
    """A Strided call picking from `source` by the pattern (offset, dims) into `into`, a view of a
    DDR buffer of the compiler's (or a state's words); or a Scatter (`kernel`) placing `source`'s
    elements there by the pattern."""
    return Node(Op.CALL, (source, into), into.shape, into.dtype,
                Call(kernel or strided_kernel(), pattern_attrs(offset, dims, shape=into.shape), 1, True))
