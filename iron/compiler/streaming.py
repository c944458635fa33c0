"""Streaming rules: calls over tensors larger than a tile run in blocks over whole columns of cores
(a Flow), each core taking a block per round from its column's mem tile, which joins the results:
elementwise calls in blocks of whole 32-bit words, a row reduction in blocks of whole rows, an
expansion in units it expands alone, a lone Concat piece after piece. Lowered by flow.py."""
from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import islice

from iron.compiler.tiling import OnCores, core_room, estimate_ns, expanded, fastest, word_run
from iron.compiler.words import row_group, view_rows
from iron.ir import (
    Node,
    Op,
    describe,
    destination,
    dynamic_attrs,
    external_inputs,
    frame,
    is_host_tensor,
    storage,
    tensor_inputs,
)
from iron.kernels.base import Role
from iron.plan import cost
from iron.plan.plan import Tile
from iron.plan.rules import Rule

FLOW_BLOCK = 4096   # the most elements of one block
MAX_FLOW_INPUTS = 2  # a compute tile's input DMA channels: one FIFO per input
ROW_WISE = (Role.ROW_REDUCTION, Role.EXPANSION)   # the roles whose calls stream in blocks of whole rows


@dataclass(frozen=True)
class Flow(OnCores):
    """Calls streamed in blocks of `block` elements over `rows` x `cols` cores: core (r, c) runs
    them on blocks (t * len(cols) + c) * len(rows) + r for t < `rounds`; each column's mem tile
    `mems[c]` splits each input between its cores and joins their results. A row reduction's
    blocks are whole rows of `width` (as they lie); a row every row shares (`shared`) and the
    per-call attributes' words go whole to every core once."""

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
        return (self.calls[-1], *self.returned)

    @property
    def size(self) -> int:
        return self.padded or sum(n.size for n in self.pieces or self.inputs[:1])

    @property
    def rounds(self) -> int:
        return self.size // (self.block * len(self.tiles))

    @property
    def per_call(self) -> tuple[tuple[Node, str, Node], ...]:
        """(call, attribute, value) of the per-call attributes, in the order of their words."""
        return tuple((c, name, value) for c in self.calls for name, value in dynamic_attrs(c))

    @property
    def result_block(self) -> int:
        return result_share(self.calls, self.block, self.width)

    def work(self, device) -> cost.Work:
        """For the cost model: each input through a shim channel per column, each result back."""
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
        views = "".join(_streamed_view(n, self.padded is not None) for n in self.inputs if n.op == Op.VIEW)
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
    return unstreamable(calls) is None


def unstreamable(calls, label=lambda c: c.arg.kernel.__name__) -> str | None:
    """Why elementwise calls do not stream in blocks, naming calls by `label`; None when they do:
    over tensors of one element count, reading at most MAX_FLOW_INPUTS host tensors lying in runs
    or rows of whole words (the per-call words count as one more), none writing a state but the
    last (`stream_into_state`)."""
    for c in calls:
        if c.arg.kernel.role is not Role.ELEMENTWISE:
            return (f"{label(c)} is not elementwise ({c.arg.kernel.role.value}): its result's blocks are not "
                    "those of its inputs")
        if c.arg.writes and (c is not calls[-1] or not stream_into_state(calls)):
            return (f"{label(c)} writes {describe(destination(c))}, and only a group's last call streams into a "
                    "state, as one run of whole words it reads only as that view")
    outside = external_inputs(calls)
    words = any(dynamic_attrs(c) for c in calls)
    if len(outside) + words > MAX_FLOW_INPUTS:   # named only when refused: describe() is costly
        fifos = [*map(describe, outside)] + ["the per-call words"] * words
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
    """`stream_into_state`: a last call writing a state streams its blocks back into the state's
    words when those lie in a run or rows of whole words the calls read only as that same view, so
    no core reads words another writes. True when the calls write no state."""
    dest = destination(calls[-1])
    return dest is None or (word_run(dest) is not None or streamed_rows(dest) is not None) and \
        all(n is dest or storage(n) is not storage(dest) for n in external_inputs(calls))


def _streamed_view(n: Node, padded: bool = False) -> str:
    """How a streamed view moves: by rows of whole words, or as one run of words."""
    if word_run(n) is None or padded:
        return (f"; {describe(n)} streamed in blocks of whole rows of {n.shape[-1]} elements by its DMA access "
                "pattern (stream_view_rows)")
    return (f"; {describe(n)} streamed as one run of words from element {word_run(n)} of {describe(n.src[0])} "
            "(stream_contiguous_views)")


def streamed_rows(node: Node, padded: dict | None = None) -> int | None:
    """`stream_view_rows`: the elements of a row of a host view whose rows lie as whole words one
    stride apart (a step slice, a transpose, a broadcast, a state's interior, a view of a padded
    tensor as `padded` says it lies) but which is not one run of words; else None."""
    if node.op != Op.VIEW or not is_host_tensor(node):
        return None
    lies = (padded or {}).get(storage(node))
    if word_run(node) is not None if lies is None else frame(node) != storage(node).shape:
        return None
    return row_group(node) * node.shape[-1] if view_rows(node, lies) is not None else None


def row_streamable(calls) -> bool:
    """One row reduction or expansion over a batch of rows that `rows_do_not_stream` lets stream."""
    return (len(calls) == 1 and calls[0].arg.kernel.role in ROW_WISE and len(calls[0].src[0].shape) == 2
            and rows_do_not_stream(calls, describe) is None)


def expansion_unit(call: Node) -> int:
    """`stream_expansion_units`: the fewest elements of a row an expansion expands alone by its own
    rule (out_shape; Dequant: one GGUF block)."""
    row = call.src[0].shape[1]
    return next(w for w in range(1, row + 1) if row % w == 0 and expanded(call, w) is not None)


def rows_do_not_stream(calls, label) -> str | None:
    """Why a group holding a row reduction over a batch of rows does not stream in row-blocks,
    naming calls by `label`; None when it does: alone, writing no state or one run of one, reading
    host tensors that stream (and whole rows every row shares), at most MAX_FLOW_INPUTS FIFOs."""
    call = next(c for c in calls if c.arg.kernel.role in ROW_WISE)
    x, *shared = call.src[:call.arg.n_inputs]
    if len(calls) != 1:
        others = ", ".join(label(c) for c in calls if c is not call)
        return f"it is fused with {others}, and a row reduction streams alone, reading host tensors"
    if call.arg.writes and word_run(destination(call)) is None:
        return ("it writes a state (out=) in runs apart, and a streamed row reduction's result goes to the host "
                "or into one run of a state's words")
    if not is_host_tensor(x) or (word_run(x) is None and streamed_rows(x) is None):
        return (f"it reads {describe(x)}, and a streamed row reduction reads host tensors lying in one run of "
                "whole words or in rows of whole words one stride apart (stream_view_rows)")
    for n in shared:
        if not is_host_tensor(n) or n.op == Op.VIEW:
            return f"it reads {describe(n)}, and every row shares a whole host tensor"
        if n.shape != x.shape[1:]:
            return f"it reads {describe(n)} of shape {n.shape}, and every row shares only rows {x.shape[1:]}"
    fifos = ["its row-blocks", *map(describe, shared)] + ["the per-call words"] * bool(dynamic_attrs(call))
    if len(fifos) > MAX_FLOW_INPUTS:
        return (f"each core would take {len(fifos)} FIFOs ({', '.join(fifos)}) but has {MAX_FLOW_INPUTS} "
                "input DMA channels")
    return None


def flow_bytes(calls, block: int, width: int, objects: int = 2, returned: tuple[Node, ...] = ()) -> int:
    """A core's tile memory for blocks of `block` elements (rows of `width`): `objects` of each
    FIFO, and one block of every other call's result."""
    inputs, shared = streamed_inputs(calls)
    result = result_share(calls, block, width)
    held = block * sum(n.dtype.itemsize for n in (*inputs, *returned)) + result * calls[-1].dtype.itemsize
    held += width * sum(n.dtype.itemsize for n in shared) + 4 * sum(len(dynamic_attrs(c)) for c in calls)
    return objects * held + block * sum(c.dtype.itemsize for c in calls[:-1] if c not in returned)


def result_share(calls, block: int, width: int) -> int:
    """The elements of the last call's result a block of `block` elements makes: as many, one per
    row of `width` (Argmax), or an expansion's rows."""
    last = calls[-1]
    if last.arg.kernel.role is Role.EXPANSION:   # rows of `width` when they lie padded wider
        return block * last.shape[1] // max(width, last.src[0].shape[1])
    return block if len(last.shape) == len(streamed_inputs(calls)[0][0].shape) else block // width


def joined_pieces(calls) -> tuple[Node, ...]:
    """`stream_joined`: the host tensors, each one run of whole words, a lone Concat joins end to
    end (nothing before its axis); () for any other calls."""
    if len(calls) != 1 or not calls[0].arg.kernel.joins:
        return ()
    call, pieces = calls[0], tuple(calls[0].src[:2])
    outer = call.arg.kernel.sizes([n.shape for n in pieces], call.shape)[0]
    return () if outer != 1 or any(not is_host_tensor(n) or word_run(n) is None for n in pieces) else pieces


def streamed_inputs(calls) -> tuple[list[Node], list[Node]]:
    """(the inputs streamed in blocks, the rows every row shares); a join's first piece stands for
    its pieces."""
    if pieces := joined_pieces(calls):
        return [pieces[0]], []
    inputs = external_inputs(calls)
    return [n for n in inputs if n.size == inputs[0].size], [n for n in inputs if n.size != inputs[0].size]


def choose_flow(calls, full_columns: list[int], spare: int, device, shim_in: int, width: int = 1,
                padded: int | None = None, row: int = 1, returned: tuple[Node, ...] = (),
                most_rows: int | None = None) -> Flow | None:
    """`stream_elementwise` (`stream_row_blocks`: rows of `width`): of the shapes of free whole columns
    and rows within `spare` tiles, `shim_in` shim MM2S channels and the mem tiles' channels, the
    least estimated time (the most columns, then rows, on a tie), each with its fastest block
    (`Flow.work`; then the largest) of at most FLOW_BLOCK elements dividing each core's share, of
    whole words, fitting a core (flow_bytes) with two objects of each FIFO, or one when only so the
    least block fits. None when no block does. `padded`: the padded length; `row`: blocks of whole
    rows of that many elements; `returned`: earlier results the host reads too."""
    inputs, shared = streamed_inputs(calls)
    base = Flow(tuple(calls), tuple(inputs), (), (), 1, width=width, shared=tuple(shared), padded=padded,
                returned=returned, pieces=joined_pieces(calls))
    size, pieces = base.size, base.pieces
    shim_in -= len(shared) + any(dynamic_attrs(c) for c in calls)   # each shared row, the words: to every core
    mem = device.mem

    def whole_words(b: int) -> bool:   # each input's block, each call's result for it (a row reduction's: a share)
        return all(b * n.dtype.itemsize % 4 == 0 for n in (*inputs, *calls[:-1])) and \
            result_share(calls, b, width) * calls[-1].dtype.itemsize % 4 == 0
    room = core_room(device)
    unit = width * row   # the fewest elements a block holds: a row, or whole rows of `row`
    least = next((k * unit for k in (1, 2, 4) if whole_words(k * unit)), unit)   # ... of whole words
    objects = 2 if unit == 1 or flow_bytes(calls, least, width) <= room else 1
    results = 1 + len(returned)
    most_rows = min(most_rows or len(device.compute_rows), (mem.dma_out_channels - results) // len(inputs),
                    (mem.dma_in_channels - len(inputs)) // results)
    found = []
    rule = Rule.STREAM_JOINED if pieces else Rule.STREAM_ROW_BLOCKS if width > 1 else Rule.STREAM_ELEMENTWISE
    for ncols in range(min(len(full_columns), spare, shim_in // len(inputs)), 0, -1):
        for rows in (r for r in range(min(most_rows, spare // ncols), 0, -1) if size % (r * ncols) == 0):
            share = size // (rows * ncols)
            most = min(share, max(FLOW_BLOCK, least))
            flow = replace(base, rows=tuple(device.compute_rows[:rows]), cols=tuple(full_columns[:ncols]), block=most,
                           objects=objects)
            # a larger block is never slower: a shape whose largest does not beat the fastest so far is not
            # priced further, and its two largest blocks are its choice
            if found and estimate_ns(flow, device) >= min(f.choice.chosen_ns for f in found):
                continue
            blocks = list(islice((b for b in range(most, 0, -1) if share % b == 0 and b % (width * row) == 0
                                  and whole_words(b) and all(n.size % (rows * ncols * b) == 0 for n in pieces)
                                  and flow_bytes(calls, b, width, objects, returned) <= room), 2))
            if blocks:
                block, choice = cost.choose(rule, "block", blocks, lambda b, flow=flow: estimate_ns(replace(flow, block=b), device),
                                            lambda b: f"{b} elements")
                found.append(replace(flow, block=block, choice=choice))
    return fastest(found) if found else None
