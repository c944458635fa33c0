"""Reliability cases refuse bad input with a named error and change nothing: `unchanged(...)`
compares every state (the reference's host copy and each compiled version's device copy),
weight and param of the given graphs, and the cache directory, before and after. The cache's
cases build with the host compiler (`native_cache`) or fake mlir-aie tools (`fake_tools`)."""
import shutil
from contextlib import contextmanager

import numpy as np
import pytest

import iron
from iron.frontend.declarations import State
from iron.frontend.trace import find_declarations
from iron.kernels import Copy
from iron.toolchain.build import FLAGS_GET
from tests.fake_toolchain import install_fakes, make_hermetic


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("IRON_CACHE_DIR", str(path))
    return path


@pytest.fixture
def native_cache(tmp_path, monkeypatch):
    if shutil.which("g++") is None:
        pytest.skip("the host C++ compiler g++ is not installed (apt-get install g++)")
    monkeypatch.setenv("IRON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("IRON_CACHE_MAX_BYTES", raising=False)
    return tmp_path / "cache"


@pytest.fixture
def fake_tools(monkeypatch, tmp_path):
    """Fake aiecc and Peano (tests/fake_toolchain.py) that log every run to tmp_path/argv.log."""
    make_hermetic(monkeypatch, tmp_path)
    install_fakes(monkeypatch, tmp_path, FLAGS_GET)
    monkeypatch.delenv("IRON_CACHE_MAX_BYTES", raising=False)
    return tmp_path


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


def yielded_until(error_type, iterator) -> tuple[list, BaseException]:
    """What `iterator` (a loop's steps) yields before it raises `error_type`, and the error."""
    seen = []
    with pytest.raises(error_type) as raised:
        for index in iterator:
            seen.append(index)
    return seen, raised.value


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
