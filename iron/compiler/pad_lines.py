"""What placement says about `pad_to_block`'s layout of a grid or stream it chose: the describe()
lines of the padded sides (and `pad_k_only`, `pad_m_to_words`, `pad_wider`), of a stream's padded
length or rows and the rule its layout came by (`pad_through_elementwise`, `pad_upstream_zeros`,
`pad_through_rows`, `pad_through_row_width`, `pad_upstream_rows`), of `pad_written_by_producer`;
and the refusals (DoesNotFit) of a MatMul with no grid or elementwise calls with no block of
whole words, naming why pad_to_block did not pad them; and the describe() lines of the
design-wide rules (`pad_through_zeros`, `pad_passed_on`, `pad_shared_stream`, `pad_row_region`,
`pad_tile_region`)."""
from __future__ import annotations

from iron.compiler.fuse import (
    Group,
    held_bytes,
)
from iron.compiler.layout import (
    K_QUANTUM,
    ROW_QUANTUM,
    Fill,
    best_sides,
    carried,
    lone_product,
    padded_sides,
    upstream,
    word_rows,
)
from iron.compiler.pad_why import (
    PLAIN,
    fits_tile,
    is_cut_value,
    matrix_unpadded,
    reads_region,
    stream_unpadded,
)
from iron.compiler.rules import Decision, Rule
from iron.compiler.streaming import (
    Flow,
    streamable,
)
from iron.compiler.tiling import (
    MAX_BLOCK,
    Grid,
    call_sides,
    choose_grid,
    core_room,
    divisors,
)
from iron.errors import DoesNotFit
from iron.ir import (
    Node,
    Op,
    Program,
    call_label,
    describe,
    destination,
    external_inputs,
    nbytes,
    state_of,
    state_written_whole,
)
from iron.kernels.base import Role


def grid_padding_rule(program: Program, group: Group, grid: Grid, readers: dict, device,
                      written: frozenset[Node] = frozenset(), zeros: dict | None = None) -> list[Decision]:
    """`pad_to_block`'s decision for a grid as describe() shows it: the sides it padded, or, for
    a grid short of the free cores whose padded sides would be better, why it may not pad them
    (`written`: the operands whose producer writes them padded, not a padded grid; `zeros`: those
    made over a padded layout, and the rule computing their padding's zeros)."""
    call = grid.call
    if grid.padded is None:
        why = matrix_unpadded(call, readers) if grid.fewer else ""
        sides = best_sides(call, device) if why else None
        if sides is None:
            return []
        return [(Rule.PAD_TO_BLOCK, f"{group.name}: {call_label(program, call)} is not padded, though padded to "
                                 f"(M, K, N) = {sides} it would take a better grid: {why}")]
    names = ("M", "K") if grid.vector else ("M", "K", "N")
    sides = ", ".join(f"{name} {side} -> {to}" for name, side, to in zip(names, call_sides(call), grid.padded)
                      if side != to)
    k_padded = call_sides(call)[1] != grid.padded[1]
    computed = "".join(f" ({operand}'s computed from zeros: {(zeros or {}).get(n, rule)})"
                       for operand, rule, n in (("A", Rule.PAD_THROUGH_MATMUL, call.src[0]),
                                                ("B", Rule.PAD_THROUGH_MATMUL_B, call.src[1]))
                       if is_cut_value(n) and n not in written)
    result = f"the state {state_of(destination(call))} it writes whole" if call.arg.writes else "the result"
    if grid.padded[::2] == call_sides(call)[::2]:   # `pad_k_only`
        return [(Rule.PAD_TO_BLOCK, f"{group.name}: {call_label(program, call)} padded with zeros ({sides}) over "
                                 f"{len(grid.tiles)} tiles: A and B lie so in DDR, the host writes the user's region; "
                                 f"K's padding is zeros in both operands{computed}; {result} keeps its own shape "
                                 "(pad_k_only: M and N unpadded, so whoever reads it reads no padding)")]
    return [(Rule.PAD_TO_BLOCK, f"{group.name}: {call_label(program, call)} padded with zeros ({sides}) over "
                             f"{len(grid.tiles)} tiles: A, B and {result} lie so in DDR, the host writes and reads "
                             "the user's region" + "; K's padding is zeros in both operands" * k_padded
                             + computed * k_padded
                             + "; the result's padding is computed from zeros, never read as the user's region"
                             + word_rows_text(call, grid, device) + wider_text(call, grid, device))]


def wider_text(call: Node, grid: Grid, device) -> str:
    """`pad_wider`'s choice as describe() shows it: a side padded past its own quantum, because
    the sides padded to it had no grid."""
    narrow = padded_sides(call, device)
    near = (word_rows(call), *call_sides(call)[1:])
    if all(side in sides for side, *sides in zip(grid.padded, call_sides(call), near, narrow)):
        return ""
    return (f"; pad_wider: padded to {narrow} it has no grid (no dividing block within a core and a Dma "
            f"op's repeats), so its sides may pad to multiples of {K_QUANTUM}")


def word_rows_text(call: Node, grid: Grid, device) -> str:
    """`pad_m_to_words`' choice as describe() shows it: a MatVec's M padded to the fewest rows of
    whole-word results instead of ROW_QUANTUM per core, and the bytes of A either way."""
    big_m, big_k = grid.padded[:2]
    up = padded_sides(call, device)[0]
    if not grid.vector or big_m != word_rows(call) or big_m in (up, call.shape[0]):
        return ""
    size = call.src[0].dtype.itemsize
    return (f"; pad_m_to_words: M padded to {big_m}, the fewest rows whose {call.dtype.name} results are whole 32-bit "
            f"words, not {up} ({ROW_QUANTUM} rows per core): A takes {big_m * big_k * size} bytes padded, not "
            f"{up * big_k * size}")


def flow_padding_rule(program: Program, group: Group, flow: Flow, padded: dict,
                      zeros: dict | None = None) -> list[Decision]:
    """`pad_to_block`'s decision for a stream as describe() shows it, when it padded the length
    (a row reduction's: the number of rows, and a padded MatMul result's width it reads,
    `pad_through_row_width`, or its rows a padded MatMul reads as A, `pad_upstream_rows`;
    elementwise calls over a matrix: the layout of the padded MatMul result they read, directly
    or passed on, `pad_through_elementwise`; `zeros`: the tensors made over a padded layout)."""
    if flow.padded is None:
        return []
    call, rows = flow.calls[-1], flow.inputs[0].size // flow.width
    if (zeros or {}).get(call) is Rule.PAD_UPSTREAM_ROWS:
        what = upstream_rows_text(call, flow, padded)
    elif flow.width > 1 and flow.width != flow.inputs[0].shape[1]:
        what = row_width_text(call, flow)
    elif flow.width == 1 and len(call.shape) == 2 and not any(n.op == Op.CALL or is_cut_value(n) for n in flow.inputs):
        what = (f"over {call.shape} elements streams over them padded with zeros to {padded[call]} "
                "(pad_upstream_zeros: its kernels keep zeros, so the padding of the result a padded MatMul reads is "
                "zeros; the inputs and the result lie so in DDR)")
    elif flow.width == 1 and len(call.shape) == 2:
        cut = [n for n in flow.inputs if is_cut_value(n)]
        passed = sum(n in (zeros or {}) for n in cut)   # results elementwise calls made over the layout
        read = ("a padded MatMul's result" if len(cut) == 1 else
                f"pad_joined: {len(cut)} padded MatMul results lying alike") if not passed else \
            ("a result passed on in a padded MatMul's layout (pad_passed_on)" if len(cut) == 1 else
             f"pad_joined: {len(cut)} padded results lying alike, {passed} of them passed on (pad_passed_on)")
        what = (f"over {call.shape} elements streams over them as they lie padded to {padded[call]} "
                f"(pad_through_elementwise: {read}, the other inputs padded with zeros and the result lie so in "
                "DDR; only the user's region of the result is read)")
    elif flow.width > 1 and is_cut_value(flow.inputs[0]):
        what = (f"over {rows} rows of {flow.width} elements streams over them as they lie padded to "
                f"{flow.size // flow.width} rows (pad_through_rows: a padded MatMul's result and the result lie so in "
                f"DDR; only the first {rows} rows of the result are read; its rows keep their width)")
    elif flow.width > 1:
        what = (f"over {rows} rows of {flow.width} elements streams padded with zeros to {flow.size // flow.width} "
                f"rows (the rows and the result lie so in DDR, the host writes and reads the first {rows}; a row's "
                "width is never padded)")
    elif call.arg.writes:   # `stream_into_state` over a whole state
        what = (f"over {call.size} elements streams padded with zeros to {flow.size} elements into the state "
                f"{state_of(destination(call))} (the inputs and the state lie so in DDR, the host writes and reads the "
                f"first {call.size}; the state's padding, written only by these calls, is never read as the user's)")
    else:
        what = (f"over {call.size} elements streams padded with zeros to {flow.size} elements (the inputs and the "
                f"result lie so in DDR, the host writes and reads the first {call.size})")
    return [(Rule.PAD_TO_BLOCK, f"{group.name}: {call_label(program, call)} {what} over {len(flow.tiles)} tiles")]


def written_padding_rule(program: Program, group: Group, calls, padded: dict,
                         written: frozenset[Node]) -> list[Decision]:
    """`pad_written_by_producer` as describe() shows it: where a group writes a result lying
    padded for a later padded call, and where a padded grid or stream reads a tensor another
    call writes (another group's result, or a state) in its user's region only."""
    made = [(n, padded[n]) for i, n in enumerate(program.outputs) if n in calls and n in written]
    whole = {state_written_whole(c) for c in calls}   # a state these calls write whole lies in their own layout
    read = [(n, padded[n]) for n in external_inputs(calls) if n in padded and (n in written or state_of(n))
            and n not in whole]
    lines = [f"{group.name}: {call_label(program, n)} writes its result row by row into the user's region of "
             f"{shape}, the padded layout a later padded call reads it in; the padding, never written, stays the "
             "zeros the buffer is made with" for n, shape in made]
    writers = {True: "a state every call writing it writes", False: "another group's result, which that group writes"}
    lines += [f"{group.name}: {describe(n)} lies padded to {shape} for {', '.join(call_label(program, c) for c in calls)}: "
              f"{writers[bool(state_of(n))]} in its user's region only, so its padding stays the zeros the buffer is "
              "made with" for n, shape in read]
    return [(Rule.PAD_WRITTEN_BY_PRODUCER, line) for line in lines]


def upstream_rows_text(call, flow: Flow, padded: dict) -> str:
    """`pad_upstream_rows`'s decision as describe() shows it: a row reduction a padded MatMul
    reads as its A streams over its rows padded with zeros to A's layout."""
    (rows, width), told = flow.inputs[0].shape, ""
    if flow.width != width:
        told = (f"; the kernel reduces each row's first {width} elements only and writes 0 past them, so K's padding "
                "is zeros")
    shared = "".join(f", {describe(n)} padded with zeros" for n in flow.shared if flow.width != width)
    return (f"over {rows} rows of {width} elements streams over them padded with zeros to {padded[call]} "
            f"(pad_upstream_rows: the rows{shared} and the result lie so in DDR, the layout a padded MatMul reads the "
            f"result in as its A{told}; a padded row of zeros reduces to a finite row of M's padding)")


def row_width_text(call, flow: Flow) -> str:
    """`pad_through_row_width`'s decision as describe() shows it: the rows a row reduction
    streams lie padded wider, and its kernel reduces each row's first (the user's) elements."""
    (rows, width), wide = flow.inputs[0].shape, flow.width
    shared = "".join(f", {describe(n)} padded with zeros" for n in flow.shared)
    given = call.arg.attr_dict.get("length") is not None or "length" in call.arg.scalar_attrs
    told = "the length it was given" if given else f"length={width}, the user's width"
    return (f"over {rows} rows of {width} elements streams over them as they lie padded to {flow.size // wide} rows "
            f"of {wide} elements (pad_through_row_width: a padded MatMul's result{shared} and the result lie so in "
            f"DDR; the kernel reduces each row's first elements only ({told}), never the padding; only the user's "
            "region of the result is read)")


def check_some_grid(program: Program, call: Node, device, unpadded: str) -> None:
    """A MatMul whose B and result do not fit a tile and for which `tile_matmul_over_array` finds
    no grid even with the whole device to itself is DoesNotFit here, naming the call and why,
    instead of failing later as one tile's buffers: its blocks divide its sides (no padding or
    remainder block), so a side with no divisor but small ones (a prime) has none that moves."""
    room = core_room(device)
    held = nbytes(call.src[1]) + nbytes(call)
    if len(call.shape) != 2 or held <= room:
        return
    columns = list(range(device.n_cols))
    if choose_grid(call, columns, device.n_cols * len(device.compute_rows), device,
                   device.n_cols * device.shim.dma_out_channels) is not None:
        return
    (big_m, big_k), big_n = call.src[0].shape, call.shape[1]
    sides = (("M", big_m), ("K", big_k), ("N", big_n))
    largest = ", ".join(f"{name} = {side}: {max(divisors(side, 1))}" for name, side in sides)
    padded = ", ".join(f"{name} = {-(-side // 32) * 32}" for name, side in sides)
    raise DoesNotFit(
        f"{program.name}: {call_label(program, call)} ({big_m}, {big_k}) x ({big_k}, {big_n}) {call.dtype.name}: B "
        f"and the result take {held} bytes, more than a compute tile's {room}, and tile_matmul_over_array finds "
        f"no grid of cores for it even on the whole {device.name}: its blocks divide their sides (at most "
        f"{MAX_BLOCK} elements, no padding or remainder block) and must fit a core and move in one DMA op "
        f"each, and the largest dividing blocks are {largest}; pad_to_block did not pad it: "
        f"{unpadded or why_no_padded_grid(call, device)}. Pad the "
        f"matrices with zeros to sides with larger divisors ({padded}), or cut the call into several."
    )


def why_no_padded_grid(call: Node, device) -> str:
    """Why a call `pad_to_block` may pad here has no padded grid: none of its padded sides has one,
    or the design reads or makes its tensors elsewhere (the rule decides for the whole design, a
    segment's Program sees its cut values as host tensors)."""
    if best_sides(call, device) is None:
        return "no padded sides have a grid either"
    return "the design reads its result or makes its operands elsewhere (another segment)"


def check_whole_words(program: Program, calls, device, readers: dict) -> None:
    """Elementwise calls too large for a tile whose element count no block of whole 32-bit words
    divides (an odd count of 16-bit elements, say), so `stream_elementwise` has no block for them
    even on the whole device, are DoesNotFit here, naming the call and the padding, instead of
    failing later as one tile's buffers."""
    room = core_room(device)
    size = external_inputs(calls)[0].size
    per_word = max(4 // min(4, n.dtype.itemsize) for n in (*external_inputs(calls), *calls))
    if not streamable(calls) or held_bytes(list(calls)) <= room or size % per_word == 0:
        return
    raise DoesNotFit(
        f"{program.name}: {', '.join(call_label(program, c) for c in calls)} over {size} "
        f"{calls[-1].dtype.name} elements take {held_bytes(list(calls))} bytes, more than a compute tile's {room}, "
        f"and stream_elementwise cuts them into blocks that divide {size} and hold whole 32-bit words ({per_word} "
        f"elements each), of which {size} has none, and pad_to_block did not pad them: "
        f"{stream_unpadded(calls, readers) or 'no padded length streams either'}. Pad the "
        f"tensors to {-(-size // per_word) * per_word} elements, or cut the calls in two."
    )


def zeros_rules(program: Program, groups: tuple[Group, ...], lies: dict, readers: dict,
                group_of: dict) -> list[Decision]:
    """`pad_through_zeros` as describe() shows it, once for the design: each elementwise group
    over a padded layout (`lies`) whose result a MatMul reads padded, its padding zeros its kernels
    kept (and those of the elementwise calls that passed the layout on to it, `upstream`)."""
    order = {call: i for i, call in enumerate(group_of)}
    lines = []
    for group in groups:
        last = group.calls[-1]
        users = [u for u in readers.get(last, []) if isinstance(u, Node) and u.arg.kernel.role is Role.MATRIX]
        if last not in lies or lies[last].fill is Fill.WRITTEN or not users \
                or group.calls[0].arg.kernel.role is not Role.ELEMENTWISE:
            continue
        sums = ", ".join(f"{call_label(program, u)} reads it as its padded {'A' if u.src[0] is last else 'B'}"
                         for u in users)
        made = (*(c for g in upstream(external_inputs(group.calls), group_of)[1] for c in g.calls), *group.calls)
        labels = ", ".join(call_label(program, c) for c in sorted(made, key=order.get))
        lines.append((Rule.PAD_THROUGH_ZEROS, f"{group.name}: {labels} keeps zeros, so the padding of "
                      f"{describe(last)} as it lies padded to {lies[last].shape} is zeros, computed from zeros: "
                      f"{sums}"))
    return lines


def passed_rules(program: Program, groups: tuple[Group, ...], padded: dict, group_of: dict) -> list[Decision]:
    """`pad_passed_on` as describe() shows it, once for the design: each elementwise group that
    streams over the result of elementwise calls which streamed over a padded product's layout
    (`pad_through_elementwise`), so it lies in that layout too, and the products it is theirs."""
    lines = []
    for group in groups:
        calls = group.calls
        passed = [n for n in external_inputs(calls) if n in padded and n.op == Op.CALL
                  and lone_product(group_of[n]) is None and carried(n, group_of)]
        if not passed or calls[0].arg.kernel.role is not Role.ELEMENTWISE:
            continue
        labels = ", ".join(call_label(program, c) for c in calls)
        makers = ", ".join(call_label(program, c) for n in passed for c in group_of[n].calls)
        products = upstream(external_inputs(calls), group_of)[0]
        joined_text = " (pad_joined: they lie alike)" * (len(products) > 1)
        lines.append((Rule.PAD_PASSED_ON, f"{group.name}: {labels} streams over {', '.join(map(describe, passed))} as "
                      f"{makers} left it, padded to {padded[passed[0]]} in the layout of "
                      f"{', '.join(call_label(program, p) for p in products)}{joined_text}: the padded layout "
                      "passes on from elementwise calls to the next, each element of the padding computed from "
                      "padding"))
    return lines


def region_rules(program: Program, groups: tuple[Group, ...], padded: dict, readers: dict,
                 group_of: dict) -> list[Decision]:
    """`pad_shared_stream`, `pad_row_region` and `pad_tile_region` as describe() shows them, once
    for the design: each input several streamed groups read lying padded once for them, each row
    reduction reading a padded vector's user's region only (`reads_region`), and each group that
    fits a tile reading a padded result's (`fits_tile`)."""
    lines = []
    for node, shape in padded.items():
        users = [u for u in readers.get(node, []) if isinstance(u, Node)]
        if node.op != Op.CALL and len(set(users)) > 1 and all(u.arg.kernel.role is Role.ELEMENTWISE for u in users):
            labels = ", ".join(call_label(program, u) for u in users)
            lines.append((Rule.PAD_SHARED_STREAM, f"{describe(node)} lies padded once to {shape} for {labels}, each group "
                          "streaming over it padded alike"))
        rowed = [u for u in users if u.arg.kernel.role is Role.ROW_REDUCTION and reads_region(u, node)]
        for u in rowed:
            lines.append((Rule.PAD_ROW_REGION, f"{call_label(program, u)} reads {describe(node)} where it lies padded "
                          f"to {shape}, its user's region only: the first {node.size} elements, the kernel told "
                          f"length={u.arg.attr_dict.get('length') or node.size}, so the padding is never reduced"))
        small = [u for u in dict.fromkeys(users) if node.op == Op.CALL and u.arg.kernel.role not in PLAIN
                 and u not in rowed and fits_tile(group_of[u], node)]
        for g in dict.fromkeys(group_of[u] for u in small):
            labels = ", ".join(call_label(program, u) for u in small if u in g.calls)
            lines.append((Rule.PAD_TILE_REGION, f"{g.name}: {labels} read {describe(node)} where it lies padded to {shape}, "
                          f"its user's region only: the group fits a tile, so a DMA moves the first {node.shape[-1]} "
                          "elements of each padded row and its kernels never see the padding"))
    return lines
