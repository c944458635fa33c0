"""`picture(plans)`: an SVG of where a design landed on the device, one panel per segment (a
Plan is one configuration of the array). Each panel draws every tile of the device by column and
row (shim row at the bottom, as AMD draws the array); a used tile names its group and kernels and
carries a bar of its memory use against its budget (memory.tile_memory); each FIFO is an arrow
from its producer to each consumer, solid for a DMA FIFO and dashed for a shared-memory one; the
Emit tile is outlined and badged. Plain string building, so a browser or any XML parser reads it.
Every drawn element carries data-* attributes (tile, group, fifo, kind) so tests can read the
picture back without parsing geometry.
"""
from __future__ import annotations

from html import escape

from iron.plan.memory import budget, tile_memory
from iron.plan.plan import Plan, Tile, TileKind

TILE_W, TILE_H = 168, 96      # a tile's box
GAP_X, GAP_Y = 56, 48         # between boxes (arrows run through the gaps)
MARGIN, TITLE_H = 24, 34
BAR_H = 8
FILL = {TileKind.SHIM: "#dbe7f3", TileKind.MEM: "#e5dcf2", TileKind.COMPUTE: "#dff0d8"}
UNUSED = "#f4f4f4"
DMA_COLOUR, SHARED_COLOUR, EMIT_COLOUR = "#1f5fa8", "#2e8b3d", "#d9480f"
STYLE = (
    "text{font-family:DejaVu Sans,Arial,sans-serif;fill:#222}"
    ".name{font-size:11px;font-weight:bold}.what{font-size:10px}.title{font-size:15px;font-weight:bold}"
    ".legend{font-size:11px}"
)


def picture(plans: tuple[Plan, ...]) -> str:
    """The SVG of `plans` (the segments of one design, in the order they run), panels side by side."""
    panels, x = [], MARGIN
    for index, plan in enumerate(plans):
        title = "" if len(plans) == 1 else f"segment {index + 1} of {len(plans)}: {plan.name}"
        body, width = _panel(plan, title, x, MARGIN + TITLE_H)
        panels.append(body)
        x += width + MARGIN
    height = MARGIN + TITLE_H + plans[0].device.n_rows * (TILE_H + GAP_Y) + 40
    device = plans[0].device
    legend = _legend(MARGIN, height - 18)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{x}" height="{height}" viewBox="0 0 {x} {height}" '
        f'data-device="{device.name}" data-segments="{len(plans)}">\n'
        f"<style>{STYLE}</style>\n{_markers()}\n"
        f'<rect width="{x}" height="{height}" fill="white"/>\n'
        f'<text class="title" x="{MARGIN}" y="{MARGIN + 4}">{escape(plans[0].name)} on {device.name}</text>\n'
        + "".join(panels) + legend + "</svg>\n"
    )


def _panel(plan: Plan, title: str, left: int, top: int) -> tuple[str, int]:
    """One segment's panel at (left, top): its tiles, then its FIFO arrows over them; and its width."""
    device = plan.device
    width = device.n_cols * (TILE_W + GAP_X) - GAP_X

    def place(col: int, row: int) -> tuple[int, int]:
        return left + col * (TILE_W + GAP_X), top + 18 + (device.n_rows - 1 - row) * (TILE_H + GAP_Y)

    used = {t: t for t in plan.tiles}
    cores = {c.tile: c for c in plan.cores}
    held = tile_memory(plan)
    calls = dict(plan.groups)
    emit = plan.emit.tile if plan.emit is not None else None
    parts = [f'<g class="panel" data-plan="{escape(plan.name)}">\n',
             f'<text class="title" x="{left}" y="{top + 6}">{escape(title)}</text>\n' if title else ""]
    for col in range(device.n_cols):
        for row in range(device.n_rows):
            tile = used.get(_tile_at(device, col, row))
            x, y = place(col, row)
            if tile is None:
                parts.append(_unused(device, col, row, x, y))
            else:
                parts.append(_tile(plan, tile, cores.get(tile), calls, held.get(tile, []), tile == emit, x, y))
    parts += _arrows(plan, {t: place(t.col, t.row) for t in plan.tiles})
    parts.append("</g>\n")
    return "".join(parts), width


def _tile_at(device, col: int, row: int) -> Tile:
    if row == device.shim_row:
        kind = TileKind.SHIM
    elif row == device.mem_row:
        kind = TileKind.MEM
    else:
        kind = TileKind.COMPUTE
    return Tile(col, row, kind)


def _unused(device, col: int, row: int, x: int, y: int) -> str:
    tile = _tile_at(device, col, row)
    return (f'<g class="tile unused" data-tile="{tile.name}">'
            f'<rect x="{x}" y="{y}" width="{TILE_W}" height="{TILE_H}" rx="6" fill="{UNUSED}" stroke="#ccc"/>'
            f'<text class="what" x="{x + 8}" y="{y + 16}" fill="#999">{tile.name}</text></g>\n')


def _tile(plan: Plan, tile: Tile, core, calls: dict, held: list, is_emit: bool, x: int, y: int) -> str:
    """A used tile: its name, group and kernels (a core), or its kind; its memory bar; the Emit badge."""
    group = core.group if core is not None else ""
    lines = [tile.name + (f"  {group}" if group and not is_emit else "")]
    if is_emit:
        lines.append("Emit: next call's words")
    elif core is not None:
        lines += _wrap(", ".join(calls.get(group, ())), 3)
    else:
        lines.append(f"{tile.kind} tile")
    stroke, width = (EMIT_COLOUR, 3) if is_emit else ("#555", 1)
    badge = ' data-emit="true"' if is_emit else ""
    out = [f'<g class="tile used" data-tile="{tile.name}" data-kind="{tile.kind}" data-group="{escape(group)}"{badge}>',
           f'<title>{escape(_tooltip(tile, group, calls, held, plan))}</title>',
           f'<rect x="{x}" y="{y}" width="{TILE_W}" height="{TILE_H}" rx="6" fill="{FILL[tile.kind]}" '
           f'stroke="{stroke}" stroke-width="{width}"/>']
    for k, line in enumerate(lines):
        css = "name" if k == 0 else "what"
        out.append(f'<text class="{css}" x="{x + 8}" y="{y + 16 + 13 * k}">{escape(line)}</text>')
    if is_emit:
        out.append(f'<text class="name" x="{x + TILE_W - 40}" y="{y + 16}" fill="{EMIT_COLOUR}">EMIT</text>')
    if tile.kind is not TileKind.SHIM:
        out.append(_memory_bar(plan, tile, held, x + 8, y + TILE_H - 22))
    out.append("</g>\n")
    return "".join(out)


def _wrap(text: str, lines: int, width: int = 27) -> list[str]:
    """`text` in at most `lines` lines of `width` characters, cut at ", " (the last one ends in
    an ellipsis when something is left over)."""
    out, line = [], ""
    for word in text.split(", ") if text else []:
        piece = word if not line else f"{line}, {word}"
        if len(piece) <= width or not line:
            line = piece
            continue
        out.append(line + ",")
        line = word
    if line:
        out.append(line)
    if len(out) > lines:
        out = out[: lines - 1] + [out[lines - 1].rstrip(",") + " ..."]
    return out


def _memory_bar(plan: Plan, tile: Tile, held: list, x: int, y: int) -> str:
    used, total = sum(n for _, n in held), budget(plan, tile)
    share = used / total
    colour = "#c92a2a" if share > 0.9 else "#e8890c" if share > 0.7 else "#2f9e44"
    inner = TILE_W - 16
    return (f'<g class="memory" data-used="{used}" data-budget="{total}">'
            f'<rect x="{x}" y="{y}" width="{inner}" height="{BAR_H}" fill="white" stroke="#888"/>'
            f'<rect x="{x}" y="{y}" width="{inner * min(share, 1):.1f}" height="{BAR_H}" fill="{colour}"/>'
            f'<text class="what" x="{x}" y="{y + BAR_H + 11}">{_kib(used)} / {_kib(total)} KiB</text></g>')


def _kib(n: int) -> str:
    return f"{n / 1024:.1f}".rstrip("0").rstrip(".")


def _tooltip(tile: Tile, group: str, calls: dict, held: list, plan: Plan) -> str:
    lines = [tile.name + (f" (group {group}: {', '.join(calls.get(group, ()))})" if group else "")]
    lines += [f"{name}: {n} bytes" for name, n in held]
    return "\n".join(lines)


def _arrows(plan: Plan, boxes: dict) -> list[str]:
    """One arrow per FIFO and consumer. Neighbouring tiles are joined straight; any other pair
    by a path through the gaps (the producer's column gap, then the row gap beside the consumer),
    so no arrow crosses a tile; each routed arrow has its own lane in its column gap."""
    out, lanes, pairs = [], {}, {}
    for fifo in plan.fifos:
        for consumer in fifo.consumers:
            pairs.setdefault(frozenset((fifo.producer, consumer)), []).append((fifo, consumer))
    for members in pairs.values():
        for k, (fifo, consumer) in enumerate(members):
            spread = (k - (len(members) - 1) / 2) * 8
            p, c = fifo.producer, consumer
            if abs(p.col - c.col) + abs(p.row - c.row) == 1:
                points = _straight(boxes[p], boxes[c], spread)
            else:
                lane = lanes[p.col] = lanes.get(p.col, -1) + 1
                points = _routed(boxes[p], boxes[c], ((lane % 9) - 4) * 4.5, spread)
            out.append(_arrow(fifo, consumer, points))
    return out


def _straight(a: tuple, b: tuple, spread: float) -> list[tuple[float, float]]:
    """Between the facing edges of neighbouring boxes (x, y of their top-left corners)."""
    (ax, ay), (bx, by) = a, b
    if ax == bx:   # one above the other
        x = ax + TILE_W / 2 + spread
        return [(x, ay if by < ay else ay + TILE_H), (x, by + TILE_H if by < ay else by)]
    y = ay + TILE_H / 2 + spread
    return [(ax + TILE_W if bx > ax else ax, y), (bx if bx > ax else bx + TILE_W, y)]


def _routed(a: tuple, b: tuple, lane: float, spread: float) -> list[tuple[float, float]]:
    """Out of box a's right edge into its column gap, along it to the row gap beside box b (the
    side facing a), along that gap to b's middle, and into b; or, in one column, straight back
    in from the gap to b's right edge."""
    (ax, ay), (bx, by) = a, b
    gap_x = ax + TILE_W + GAP_X / 2 + lane
    start = (ax + TILE_W, ay + TILE_H / 2 + spread + lane / 2)
    if ax == bx:
        y = by + TILE_H / 2 + spread + lane / 2
        return [start, (gap_x, start[1]), (gap_x, y), (bx + TILE_W, y)]
    below = by < ay or (by == ay)   # b above a on the page (or level): come in through its bottom
    gap_y = (by + TILE_H + GAP_Y / 2 if below else by - GAP_Y / 2) + lane / 2
    x = bx + TILE_W / 2 + spread + lane
    return [start, (gap_x, start[1]), (gap_x, gap_y), (x, gap_y), (x, by + TILE_H if below else by)]


def _arrow(fifo, consumer: Tile, points: list) -> str:
    kind = "shared" if fifo.shared_memory else "dma"
    colour = SHARED_COLOUR if fifo.shared_memory else DMA_COLOUR
    dash = ' stroke-dasharray="5,3"' if fifo.shared_memory else ""
    how = "shared memory" if fifo.shared_memory else "DMA"
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return (f'<g class="fifo {kind}" data-fifo="{escape(str(fifo.name))}" data-from="{fifo.producer.name}" '
            f'data-to="{consumer.name}"><title>{escape(str(fifo.name))}: {fifo.producer.name} -&gt; {consumer.name}, '
            f'{how}, depth {fifo.depth}, {fifo.nbytes} bytes</title>'
            f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5"{dash} '
            f'marker-end="url(#head-{kind})"/></g>\n')


def _markers() -> str:
    heads = "".join(
        f'<marker id="head-{kind}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
        for kind, colour in (("dma", DMA_COLOUR), ("shared", SHARED_COLOUR)))
    return f"<defs>{heads}</defs>"


def _legend(x: int, y: int) -> str:
    return (f'<g class="legend">'
            f'<line x1="{x}" y1="{y - 4}" x2="{x + 30}" y2="{y - 4}" stroke="{DMA_COLOUR}" stroke-width="1.6" '
            f'marker-end="url(#head-dma)"/><text class="legend" x="{x + 36}" y="{y}">DMA FIFO</text>'
            f'<line x1="{x + 120}" y1="{y - 4}" x2="{x + 150}" y2="{y - 4}" stroke="{SHARED_COLOUR}" '
            f'stroke-width="1.6" stroke-dasharray="5,3" marker-end="url(#head-shared)"/>'
            f'<text class="legend" x="{x + 156}" y="{y}">shared-memory FIFO</text>'
            f'<rect x="{x + 300}" y="{y - 10}" width="14" height="12" fill="white" stroke="{EMIT_COLOUR}" '
            f'stroke-width="3"/><text class="legend" x="{x + 320}" y="{y}">Emit tile</text>'
            f'<text class="legend" x="{x + 410}" y="{y}">bar: tile memory used / budget</text></g>\n')
