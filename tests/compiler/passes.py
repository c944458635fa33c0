"""The input of one compiler pass, made by the passes before it, so a pass's test asserts the
pass's own value (Routes, a group's packed objects, a core's program, the moves) without
compiling the whole design: `placed` (fuse and place), `routed` (and route), `context` (the
lowering Context packing and core programs read). Host tensors lie unpadded (no
`pad_to_block`); the small designs of these tests need none."""
from __future__ import annotations

from iron.compiler.allocate import host_placements
from iron.compiler.fuse import fuse
from iron.compiler.objects import Context
from iron.compiler.place import Layout, place
from iron.compiler.route import Routes, route
from iron.compiler.words import WordTable


def placed(program, device) -> Layout:
    return place(program, fuse(program), device)


def routed(program, device) -> tuple[Layout, Routes]:
    layout = placed(program, device)
    return layout, route(program, layout)


def context(program, device) -> Context:
    layout, routes = routed(program, device)
    return Context(program, device, layout, routes, WordTable(program), host_placements(program))


def outputs(monkeypatch, module, name: str) -> list:
    """Each value `module.name` returns while the test runs, in call order: what a pass decided
    inside `compile_program` (its Routes, its relays) as the pass returned it."""
    made = []
    original = getattr(module, name)

    def recorded(*args, **kwargs):
        made.append(original(*args, **kwargs))
        return made[-1]
    monkeypatch.setattr(module, name, recorded)
    return made
