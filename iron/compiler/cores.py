"""What each core of a group runs: a Function of its kernel calls and the copies exporting their
results, a `<part>_block` Function of a streamed matrix's leading call, and the core program
acquiring the part's objects around them."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from iron.compiler.fuse import leading_call
from iron.compiler.objects import (
    Context,
    Part,
    attr_word,
    call_step,
    consumed,
    copy_step,
    gather,
    holding,
    read,
)
from iron.ir import Node, destination, dynamic_attrs, is_computed_view
from iron.plan.fifos import Stem, fifo_id
from iron.plan.plan import (
    Core,
    Function,
    Invoke,
    Load,
    Loop,
    Ptr,
    WordRef,
)


def core_of(ctx: Context, part: Part) -> tuple[list[Function], Core]:
    main = _main_steps(ctx, part)
    block = _block_function(ctx, part)
    ins = ([part.in_fifo] if ctx.routes.has(part.in_fifo) else []) + consumed(ctx, part)
    outs = [f for f in (part.fifo(Stem.HOST), part.fifo(Stem.OUT), fifo_id(part.group, Stem.PART, part.number))
            if ctx.routes.has(f)]   # a part FIFO only when the group is split
    objects = [*ins, *outs, *(b.name for b in part.buffers)]
    functions, steps = [], []
    if block is not None:
        w = part.w_fifo
        params = _params(block.steps, [*objects, w])
        functions.append(replace(block, params=params))
        steps.append(Loop(part.stream.blocks, holding((w,), (), (Invoke(block.name, params),))))
    if main:
        params = _params(main, objects)
        functions.append(Function(part.prefix, params, tuple(main)))
        steps.append(Invoke(part.prefix, params))
    return functions, Core(part.tile, part.group, holding(ins, outs, steps), ctx.device.compute.default_stack_bytes)


def one_core_per_tile(cores: list[Core]) -> list[Core]:
    """The cores on one tile (`share_core_in_iteration`) made one, running their programs in turn."""
    merged: dict = {}
    for core in cores:
        first = merged.get(core.tile)
        merged[core.tile] = core if first is None else replace(
            first, program=first.program + core.program, also=(*first.also, *core.groups))
    return list(merged.values())


def _params(steps, objects: list) -> tuple:
    """The objects the steps touch, in `objects` order."""
    used = {arg.source for step in steps for arg in step.args if isinstance(arg, (Ptr, Load))}
    return tuple(o for o in objects if o in used)


def _main_steps(ctx: Context, part: Part) -> list:
    """The group's calls but those `<part>_block` runs, then the copies exporting results."""
    calls = part.site.group.calls
    streamed = (part.stream.expand, leading_call(calls)) if part.stream is not None else ()
    return [step for call in calls if call not in streamed for step in _call_steps(ctx, part, call)] + part.copies


def _call_steps(ctx: Context, part: Part, call: Node) -> list:
    sources, sliced, dest = call.src[: call.arg.n_inputs], part.split, Ptr(*part.homes[call])
    steps = [step for n in sources if is_computed_view(n) for step in gather(ctx, part, n)]
    if call.arg.writes and call.arg.kernel.accumulates:   # the state, summed into in place
        view = destination(call)
        steps.append(copy_step(view.dtype, view.size, read(ctx, part, view, False), dest))
    ptrs = [*(read(ctx, part, n, sliced) for n in sources), dest]
    shapes = [(part.count,) if sliced else n.shape for n in sources]
    return [*steps, call_step(call, ptrs, shapes, (part.count,) if sliced else call.shape, _attr_loads(ctx, part, call))]


def _attr_loads(ctx: Context, part: Part, call: Node) -> dict[str, Load]:
    """Each per-call attribute's word, in the part's `_in` or where a carrier relays it."""
    loads = {}
    for name, expr in dynamic_attrs(call):
        key = WordRef(attr_word(ctx, call, name, expr))
        where = ctx.relayed.get((part.group, key))
        loads[name] = Load(*where) if where else Load(part.in_fifo, part.ins.offsets[key])
    return loads


def _block_function(ctx: Context, part: Part) -> Function | None:
    """`<part>_block`: the leading matrix call on one streamed block of rows, after its fused
    expansion (`dequant_before_matvec`) into a Buffer."""
    if part.stream is None:
        return None
    s, call = part.stream, leading_call(part.site.group.calls)
    x = call.src[1]
    row_out = int(np.prod(call.shape[1:], dtype=np.int64)) * call.dtype.itemsize
    home = Ptr(*part.homes[call])
    steps = gather(ctx, part, x) if is_computed_view(x) else []
    block = Ptr(part.w_fifo, 0)
    if s.expand is not None:
        expanded = Ptr(*part.homes[s.expand])
        steps.append(call_step(s.expand, [block, expanded], [(s.rows, *s.matrix.shape[1:])],
                               (s.rows, *s.expand.shape[1:]), _attr_loads(ctx, part, s.expand)))
        block = expanded
    ptrs = [block, read(ctx, part, x, False), Ptr(home.source, home.offset, block_stride=s.rows * row_out)]
    shapes = [(s.rows, *call.src[0].shape[1:]), x.shape]
    steps.append(call_step(call, ptrs, shapes, (s.rows, *call.shape[1:]), _attr_loads(ctx, part, call)))
    return Function(f"{part.prefix}_block", (), tuple(steps), blocked=True)
