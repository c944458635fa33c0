"""Reliability cases refuse bad input with a named error and change nothing: `unchanged(...)`
compares every state (the reference's host copy and each compiled version's device copy),
weight and param of the given graphs, and the cache directory, before and after."""
from contextlib import contextmanager

import numpy as np
import pytest

import iron
from iron.frontend.declarations import State
from iron.frontend.trace import find_declarations
from iron.kernels import Copy


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("IRON_CACHE_DIR", str(path))
    return path


@pytest.fixture
def unchanged(cache_dir):
    @contextmanager
    def check(*graphs, compiled=()):
        before = snapshot(graphs, compiled, cache_dir)
        yield
        assert snapshot(graphs, compiled, cache_dir) == before
    return check


def snapshot(graphs, compiled, cache_dir) -> dict:
    seen = {}
    for g in graphs:
        for path, mem in find_declarations(g):
            data = g.read(mem) if isinstance(mem, State) else mem.array
            seen[(type(g).__name__, path)] = (data.shape, data.dtype.str, data.tobytes())
    for c in compiled:
        for path, mem in find_declarations(c.graph):
            if isinstance(mem, State):
                seen[(repr(c), path)] = c.read(mem).tobytes()
    files = sorted((str(p.relative_to(cache_dir)), p.stat().st_size) for p in cache_dir.rglob("*")) if cache_dir.exists() else []
    seen["cache"] = files
    return seen


def hooked(base, name: str, hook):
    """A user kernel computing as library kernel `base` does after calling `hook()` (to fail or
    to let other threads run mid-launch); its C++ is base's with the symbols renamed."""
    source = base.source_text()[1].replace(f"({base.name},", f"({name},").replace(f" {base.name}_##T", f" {name}_##T")

    def compute(*args, **attrs):
        hook()
        return base.compute(*args, **attrs)

    return type(f"Hooked{base.__name__}", (base,), {"name": name, "source": source, "compute": staticmethod(compute)})


class Trail(iron.Graph):
    """A state a failing case elsewhere must leave as it was."""

    def __init__(self):
        self.trail = iron.state((4,), np.int32, name="trail")

    def body(self, x):
        return Copy.step(x, out=self.trail)


@pytest.fixture
def trail():
    g = Trail()
    g.reference(np.array([5, 6, 7, 8], np.int32))
    return g
