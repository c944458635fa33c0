"""The device rules of what runs on cores, for `check_plan`: Functions call known kernels with
operands among their parameters; every core is on its own compute tile, acquires and releases
each FIFO port equally per launch, only at its own ends and within the FIFO's depth, and invokes
declared Functions whose pointers stay inside the objects bound to them (by each kernel's C ABI).
`fail` raises the PlanError every rule raises."""
from __future__ import annotations

import numpy as np

from iron.compiler.plan import (
    Acquire,
    Invoke,
    KernelStep,
    Load,
    Loop,
    Plan,
    Port,
    Ptr,
    Release,
    ScalarStep,
    TileKind,
    WordDef,
)
from iron.errors import PlanError
from iron.kernels.registry import lookup

FIX = "Rebuild the Plan with iron's compiler, or correct it by hand."


def fail(plan: Plan, problem: str, fix: str = FIX):
    raise PlanError(f"plan {plan.name} on {plan.device.name}: {problem}. {fix}")


def check_functions(plan: Plan):
    names = [f.name for f in plan.functions]
    if len(set(names)) != len(names):
        fail(plan, f"function names repeat: {sorted(n for n in set(names) if names.count(n) > 1)}")
    for f in plan.functions:
        for step in f.steps:
            for arg in _step_args(step):
                if isinstance(arg, (Ptr, Load)) and arg.source not in f.params:
                    fail(plan, f"function {f.name} reads '{arg.source}', which is not one of its parameters {f.params}")
            if isinstance(step, ScalarStep) and step.op not in WordDef.OPS:
                fail(plan, f"function {f.name} has scalar op '{step.op}'; the ops are {', '.join(WordDef.OPS)}")
            if isinstance(step, KernelStep):
                lookup(step.symbol)


def _step_args(step) -> tuple:
    return step.args if isinstance(step, KernelStep) else (step.dest, step.a, step.b)


def check_cores(plan: Plan):
    tiles = [c.tile for c in plan.cores]
    if len(set(tiles)) != len(tiles):
        fail(plan, "two cores run on one tile")
    fifos = {f.name: f for f in plan.fifos}
    functions = {f.name: f for f in plan.functions}
    for core in plan.cores:
        if core.tile.kind is not TileKind.COMPUTE:
            fail(plan, f"the core of {core.group} is on {core.tile.name}, not a compute tile")
        counts: dict[tuple[str, Port], int] = {}
        _walk_program(plan, core, core.program, 1, counts, fifos, functions)
        for (fifo, port), n in counts.items():
            if n:
                fail(plan, f"the core on {core.tile.name} acquires and releases {fifo} ({port}) a different "
                            "number of times per launch")


def _walk_program(plan, core, program, loop_count, counts, fifos, functions, blocks=0):
    """Count each FIFO port's objects per launch and check each Invoke; `blocks` is the count of
    the innermost enclosing Loop (0 outside any), whose index a blocked function takes."""
    for item in program:
        if isinstance(item, Loop):
            if item.count < 1:
                fail(plan, f"a Loop on {core.tile.name} runs {item.count} times")
            _walk_program(plan, core, item.body, loop_count * item.count, counts, fifos, functions, item.count)
        elif isinstance(item, (Acquire, Release)):
            _check_port(plan, core, item, fifos)
            sign = 1 if isinstance(item, Acquire) else -1
            key = (item.fifo, item.port)
            counts[key] = counts.get(key, 0) + sign * item.count * loop_count
        elif isinstance(item, Invoke):
            _check_invoke(plan, core, item, fifos, functions, max(blocks, 1), blocks > 0)
        else:
            fail(plan, f"the core on {core.tile.name} has a {type(item).__name__} in its program")


def _check_port(plan, core, item, fifos):
    f = fifos.get(item.fifo)
    if f is None:
        fail(plan, f"the core on {core.tile.name} uses FIFO {item.fifo}, which the plan does not have")
    end = f.producer == core.tile if item.port is Port.PRODUCE else core.tile in f.consumers
    if not isinstance(item.port, Port) or not end:
        fail(plan, f"the core on {core.tile.name} uses {item.fifo} as {item.port} but is not that end of it")
    if not 1 <= item.count <= f.depth:
        fail(plan, f"the core on {core.tile.name} takes {item.count} objects of {item.fifo} at once; its depth is {f.depth}")


def _check_invoke(plan, core, invoke, fifos, functions, blocks, in_loop):
    f = functions.get(invoke.function)
    if f is None:
        fail(plan, f"the core on {core.tile.name} invokes {invoke.function}, which the plan does not define")
    if len(invoke.objects) != len(f.params) or f.blocked != in_loop:
        fail(plan, f"the core on {core.tile.name} invokes {f.name} with {len(invoke.objects)} object(s) for "
                    f"{len(f.params)} parameter(s){' outside a Loop' if f.blocked else ''}")
    buffers = {b.name: b for b in plan.buffers if b.tile == core.tile}
    sizes = {}
    for param, obj in zip(f.params, invoke.objects):
        held = fifos.get(obj) or buffers.get(obj)
        if held is None or (obj in fifos and core.tile not in (held.producer, *held.consumers)):
            fail(plan, f"the core on {core.tile.name} binds '{obj}' to {f.name}, but it is neither a FIFO of "
                        "that tile nor a buffer on it")
        sizes[param] = held.nbytes
    for step in f.steps:
        _check_extents(plan, f, step, sizes, blocks)


def _check_extents(plan, f, step, sizes, blocks):
    for ptr, nbytes in _extents(step):
        end = ptr.offset + nbytes + getattr(ptr, "block_stride", 0) * (blocks - 1)
        if ptr.offset < 0 or end > sizes[ptr.source]:
            fail(plan, f"function {f.name} touches bytes {ptr.offset}..{end} of '{ptr.source}', which holds "
                        f"{sizes[ptr.source]} bytes")


def _extents(step) -> list[tuple]:
    """(Ptr or Load, bytes it touches) of each memory operand of a step."""
    if isinstance(step, ScalarStep):
        return [(a, 4) for a in (step.dest, step.a, step.b) if isinstance(a, (Ptr, Load))]
    kernel, dtype, out_dtype = lookup(step.symbol)
    pointers = [a for a in step.args if isinstance(a, Ptr)]
    count = len(step.args) - len(pointers) - len(kernel.c_attrs)
    sizes = tuple(int(a.value) for a in step.args[len(pointers): len(pointers) + count])
    in_shapes, out_shape = kernel.abi_shapes(sizes)
    nbytes = [int(np.prod(s)) * dtype.itemsize for s in in_shapes] + [int(np.prod(out_shape)) * out_dtype.itemsize]
    loads = [(a, 4) for a in step.args if isinstance(a, Load)]
    return list(zip(pointers, nbytes)) + loads
