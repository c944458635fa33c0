"""The device rules of what runs on cores, for `check_plan`: Functions call known kernels with
operands among their parameters; every core is on its own compute tile, acquires and releases
each FIFO port equally per launch, only at its own ends and within the FIFO's depth, and invokes
declared Functions whose pointers stay inside the objects bound to them (by each kernel's C ABI).
`fail` raises the PlanError every rule raises."""
from __future__ import annotations

import numpy as np

from iron.errors import PlanError
from iron.plan.plan import (
    Acquire,
    Imm,
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
    WordOp,
)

FIX = "Rebuild the Plan with iron's compiler, or correct it by hand."


def fail(plan: Plan, problem: str, fix: str = FIX):
    raise PlanError(f"plan {plan.name} on {plan.device.name}: {problem}. {fix}")


def check_unique(plan: Plan, what: str, names: list[str]):
    """`what` (FIFO, function) names that repeat are refused, naming them."""
    if len(set(names)) != len(names):
        fail(plan, f"{what} names repeat: {sorted(n for n in set(names) if names.count(n) > 1)}")


def check_functions(plan: Plan):
    check_unique(plan, "function", [f.name for f in plan.functions])
    for f in plan.functions:
        for step in f.steps:
            _check_abi(plan, f, step)
            for arg in step.args:
                if isinstance(arg, (Ptr, Load)) and arg.source not in f.params:
                    fail(plan, f"function {f.name} reads '{arg.source}', which is not one of its parameters {f.params}")
                if isinstance(arg, Ptr) and arg.block_stride and not f.blocked:
                    fail(plan, f"function {f.name} strides '{arg.source}' by {arg.block_stride} bytes per block "
                                "but takes no block index (it is not blocked)")
            if isinstance(step, ScalarStep) and not isinstance(step.op, WordOp):
                fail(plan, f"function {f.name} has scalar op {step.op!r}; the ops are WordOp's members")


def _check_abi(plan: Plan, f, step):
    """Each argument of the kind its C ABI takes: a kernel call's pointers (one per input and the
    output) are Ptrs, its sizes (one or more) i32 values, its attributes values of their C type; a
    scalar step writes through a Ptr from i32 values. An i32 value is an Imm or a Load."""
    if isinstance(step, KernelStep):
        pointers, attrs = len(step.pointers), [ctype for _, ctype in step.kernel.c_attrs]
        nsizes = len(step.sizes)
        wanted = ["ptr"] * pointers + ["i32"] * nsizes + attrs
        what = f"calls {step.symbol} with ({_kinds(step.args)}); its C ABI takes {pointers} Ptr(s), one i32 " \
               f"size or more and {len(attrs)} attribute(s){' (' + ', '.join(attrs) + ')' if attrs else ''}"
        if nsizes < 1 or not all(map(_takes, wanted, step.args)):
            fail(plan, f"function {f.name} {what}")
        return
    unary = isinstance(step, ScalarStep) and step.op is WordOp.COPY   # copy alone takes one operand
    args = (step.dest, step.a, *(() if unary else (step.b,))) if isinstance(step, ScalarStep) else ()
    if not args or not all(map(_takes, ("ptr", "i32", "i32"), args)):
        fail(plan, f"function {f.name} has a step {type(step).__name__}({_kinds(args)}): a step is a KernelStep, "
                    "or a ScalarStep writing through a Ptr from i32 values (Imm or Load)")


def _takes(ctype: str, arg) -> bool:
    """Whether `arg` is a value of C type `ctype` ("ptr", "i32" or "f32"); an i32 Imm within int32."""
    if ctype == "ptr":
        return isinstance(arg, Ptr)
    if isinstance(arg, Imm) and ctype == "i32":
        return arg.ctype.value == ctype and -2**31 <= int(arg.value) < 2**31
    return (isinstance(arg, Imm) and arg.ctype.value == ctype) or (isinstance(arg, Load) and ctype == "i32")


def _kinds(args) -> str:
    return ", ".join(f"Imm {a.ctype}" if isinstance(a, Imm) else type(a).__name__ for a in args)


def check_cores(plan: Plan):
    tiles = [c.tile for c in plan.cores]
    if len(set(tiles)) != len(tiles):
        fail(plan, "two cores run on one tile")
    fifos = {f.name: f for f in plan.fifos}
    functions = {f.name: f for f in plan.functions}
    for core in plan.cores:
        if core.tile.kind is not TileKind.COMPUTE:
            fail(plan, f"the core of {core.group} is on {core.tile.name}, not a compute tile")
        _walk_program(plan, core, core.program, fifos, functions)
        for (fifo, port), n in _held_after(plan, core, core.program, {}, fifos).items():
            if n:   # what a launch leaves held: acquired and released unequally
                fail(plan, f"the core on {core.tile.name} acquires and releases {fifo} ({port}) a different "
                            "number of times per launch")


def _walk_program(plan, core, program, fifos, functions, blocks=0):
    """Check each step's FIFO port and each Invoke; `blocks` is the count of the innermost
    enclosing Loop (0 outside any), whose index a blocked function takes."""
    for item in program:
        if isinstance(item, Loop):
            if item.count < 1:
                fail(plan, f"a Loop on {core.tile.name} runs {item.count} times")
            _walk_program(plan, core, item.body, fifos, functions, item.count)
        elif isinstance(item, (Acquire, Release)):
            _check_port(plan, core, item, fifos)
        elif isinstance(item, Invoke):
            _check_invoke(plan, core, item, fifos, functions, max(blocks, 1), blocks > 0)
        else:
            fail(plan, f"the core on {core.tile.name} has a {type(item).__name__} in its program")


def _held_after(plan, core, program, held: dict, fifos) -> dict:
    """The objects the core holds per FIFO port after `program`, starting from `held`: a Release
    of more than it holds, or an Invoke binding a FIFO of which it holds no object, is refused.
    A Loop changes the holdings by the same amount every iteration, so its first and last
    iterations are the ones that can go lowest."""
    for item in program:
        if isinstance(item, Loop):
            once = _held_after(plan, core, item.body, dict(held), fifos)
            step = {key: n - held.get(key, 0) for key, n in once.items()}
            last = {key: held.get(key, 0) + (item.count - 1) * n for key, n in step.items()}
            _held_after(plan, core, item.body, last, fifos)
            held = {key: held.get(key, 0) + item.count * n for key, n in step.items()}
        elif isinstance(item, Acquire):
            held[(item.fifo, item.port)] = held.get((item.fifo, item.port), 0) + item.count
        elif isinstance(item, Release):
            have = held.get((item.fifo, item.port), 0)
            if item.count > have:
                fail(plan, f"the core on {core.tile.name} releases {item.count} object(s) of {item.fifo} "
                            f"({item.port}) while holding {have}")
            held[(item.fifo, item.port)] = have - item.count
        else:
            empty = [o for o in item.objects if o in fifos and not any(held.get((o, p), 0) for p in Port)]
            if empty:
                fail(plan, f"the core on {core.tile.name} invokes {item.function} on {empty[0]} without "
                            "holding an object of it")
    return held


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
    if len(invoke.objects) != len(f.params) or f.blocked and not in_loop:   # an unblocked one may loop (repeat.py)
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
    """(Ptr or Load, bytes it touches) of each memory operand of a step; a kernel's pointers only
    when its sizes are Imms (a size Loaded per call is known at run time only)."""
    loads = [(a, 4) for a in step.args if isinstance(a, Load) or isinstance(step, ScalarStep) and isinstance(a, Ptr)]
    if isinstance(step, ScalarStep):
        return loads
    if not all(isinstance(a, Imm) for a in step.sizes):
        return loads
    in_shapes, out_shape = step.kernel.abi_shapes(tuple(int(a.value) for a in step.sizes))
    nbytes = [int(np.prod(s)) * step.dtype.itemsize for s in in_shapes] + [int(np.prod(out_shape)) * step.out.itemsize]
    return list(zip(step.pointers, nbytes)) + loads
