"""A version's words are what it uses: the Trail of issue 11, whose Scratchpad `skip` only the
tensor-taking first version reads, as a device loop on npu2 (depth 1, 2, 3) and host-driven on
npu1 and npu2; the body's calls accept `skip` and ignore it, or run without it; a tensor a
version does not read is accepted and ignored the same way. Compiled against the reference."""
import numpy as np
import pytest

import aie_utils
import iron
from iron import Carried, Scratchpad
from iron.errors import ArgumentError, IndexOutOfRange
from iron.kernels import Add, Copy
from tests.quotes import quoted

N = 12


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")


class Trail(iron.Graph):
    """Given `jump`, the step goes to jump[skip]; without it, to successor[node]. Recorded in
    `trail` at the step count."""

    def __init__(self, successor, steps):
        self.successor = iron.weight(successor)
        self.trail = iron.state((steps,), np.int32, name="trail")

    def body(self, jump=None, *, node: Carried[np.int32], steps: Carried[np.int32], skip: Scratchpad[np.int32]):
        if jump is not None:
            nxt = Copy.step(jump[skip])
        else:
            nxt = Copy.step(self.successor[node])
        Copy.step(nxt, out=self.trail[steps])
        return iron.carry(node=nxt, steps=steps + 1)


def tables():
    rng = np.random.default_rng(11)
    return rng.permutation(N).astype(np.int32), rng.permutation(N).astype(np.int32)


def numpy_trail(successor, jump, skip, transitions):
    trail = [int(jump[skip])]
    while len(trail) < transitions:
        trail.append(int(successor[trail[-1]]))
    return np.array(trail, np.int32)


def versions(trail, device):
    with aie_utils.using_device(device):
        body = trail.compile()
        first = trail.compile(jump=((N,), np.int32), feeds=body)
    return first, body


def test_only_the_version_that_reads_skip_has_a_word_for_it():
    successor, _ = tables()
    first, body = versions(Trail(successor, 4), "npu2")
    assert [(w.name, w.kind.value) for w in body.parameters] == [("node", "carried"), ("steps", "carried"),
                                                                 ("node", "dma"), ("steps", "dma"),
                                                                 ("steps", "dma"), ("steps + 1", "next")]
    assert [(w.name, w.kind.value) for w in first.parameters] == [("node", "carried"), ("steps", "carried"),
                                                                  ("skip", "scratchpad"), ("steps", "dma"),
                                                                  ("steps", "dma"), ("steps + 1", "next")]
    assert body.program.unread == ("skip",) and body.program.scratchpad_names == ()
    assert first.program.unread == () and first.program.scratchpad_names == ("skip",)
    assert len(body.plan.emit.target_words) == len(body.plan.words) == 6
    assert len(first.plan.emit.target_words) == 6   # first's Emit writes the body's six words


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_the_trail_runs_as_a_device_loop_from_a_first_version_reading_skip(depth):
    successor, jump = tables()
    steps = 7
    trail = Trail(successor, steps + 1)
    first, body = versions(trail, "npu2")
    loop = iron.CarriedLoop(first, body, depth=depth)
    done = list(loop.run(steps, jump, node=0, steps=0, skip=5))
    assert done == list(range(steps))
    expect = numpy_trail(successor, jump, 5, steps + 1)
    np.testing.assert_array_equal(body.read("trail"), expect)
    assert dict(loop.carry) == {"node": int(expect[-1]), "steps": steps + 1}
    assert loop.transitions == steps + 1
    assert first.session.emulator.launches == 1 and body.session.emulator.launches == steps


@pytest.mark.parametrize("device", ["npu1", "npu2"])
def test_host_driven_the_body_ignores_skip_or_runs_without_it_as_the_reference_does(device):
    successor, jump = tables()
    steps = 5
    trail, reference = Trail(successor, steps + 1), Trail(successor, steps + 1)
    first, body = versions(trail, device)
    nxt = first(jump, node=0, steps=0, skip=3)
    ref = reference.reference(jump, node=0, steps=0, skip=3)
    assert dict(nxt) == dict(ref)
    for k in range(steps):
        if k % 2:
            nxt, ref = body(**nxt, skip=99), reference.reference(**ref, skip=99)   # given, not read: ignored
        else:
            nxt, ref = body(**nxt), reference.reference(**ref)                     # or left out
        assert dict(nxt) == dict(ref)
    expect = numpy_trail(successor, jump, 3, steps + 1)
    np.testing.assert_array_equal(body.read("trail"), expect)
    np.testing.assert_array_equal(reference.read("trail"), expect)


def test_a_version_that_reads_skip_still_needs_it_and_bounds_it():
    successor, jump = tables()
    trail = Trail(successor, 3)
    first, _ = versions(trail, "npu2")
    for call in (first, trail.reference):
        with pytest.raises(ArgumentError) as e:
            call(jump, node=0, steps=0)
        quoted(e.value, "Trail.body", "per-call value(s) skip", "skip=<int>")
        with pytest.raises(IndexOutOfRange) as e:
            call(jump, node=0, steps=0, skip=N)
        quoted(e.value, "jump[skip]", f"skip = {N}", f"0..{N - 1}", "nothing was written", "'jump'")


def test_a_loop_started_without_a_value_first_reads_is_refused_before_anything_runs():
    successor, jump = tables()
    trail = Trail(successor, 4)
    first, body = versions(trail, "npu2")
    loop = iron.CarriedLoop(first, body, depth=2)
    with pytest.raises(ArgumentError) as e:
        loop.run(3, jump, node=0, steps=0)
    quoted(e.value, "Trail.body", "per-call value(s) skip", "skip=<int>")
    assert loop.transitions == 0 and loop.carry is None
    assert first.session.emulator.launches == 0


class Unread(iron.Graph):
    """x + 1, with a tensor y and a Scratchpad k it never reads."""

    def __init__(self):
        self.one = iron.param(np.ones(8, np.int32))

    def body(self, x, y, *, k: Scratchpad[np.int32]):
        return Add.step(x, self.one)


@pytest.mark.parametrize("device", ["npu1", "npu2"])
def test_a_tensor_a_version_does_not_read_is_given_and_ignored(device):
    x, y = np.arange(8, dtype=np.int32), np.full(3, 7, np.int16)
    g = Unread()
    c = g.compile(x=((8,), np.int32), y=((3,), np.int16), device=device)
    assert c.program.unread == ("y", "k") and [n.arg.name for n in c.program.inputs] == ["x"]
    assert [p.name for p in c.plan.placements if p.kind.value == "input"] == ["x"] and c.parameters == ()
    np.testing.assert_array_equal(c(x, y, k=4), x + 1)
    np.testing.assert_array_equal(c(x, np.zeros(5, np.float32)), x + 1)
    np.testing.assert_array_equal(g.reference(x, y, k=4), x + 1)
    np.testing.assert_array_equal(g.reference(x, y), x + 1)
