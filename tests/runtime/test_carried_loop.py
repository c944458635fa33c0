"""Compiled graphs on the emulator: the seed chapter's Walk as a device loop on npu2 (depth 1, 2,
3) and host-driven on npu1, a tensor-taking first version compiled with feeds=, every refusal
of CarriedLoop with its exact text, and early close."""
import numpy as np
import pytest

import aie_utils
import iron
from iron import Carried, Scratchpad
from iron.designs import Walk, numpy_walk
from iron.errors import IndexOutOfRange, LoopError
from iron.kernels import Add, Copy
from iron.runtime.compiled import versions


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")


def successor(n=16, seed=0):
    return np.random.default_rng(seed).permutation(n).astype(np.int32)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_walk_as_a_device_loop_on_npu2_records_steps_plus_one_transitions(depth):
    succ, steps = successor(), 10
    walk = Walk(succ, steps + 1)
    with aie_utils.using_device("npu2"):
        body = walk.compile()
    assert body.plan.full_elf is True and body.plan.image == "elf"
    loop = iron.CarriedLoop(body, body, depth=depth)
    assert list(loop.run(steps, node=5, steps=0)) == list(range(steps))
    np.testing.assert_array_equal(body.read(walk.trail), numpy_walk(succ, 5, steps + 1))
    assert dict(loop.carry) == {"node": int(numpy_walk(succ, 5, steps + 1)[-1]), "steps": steps + 1}


def test_walk_host_driven_on_npu1_and_no_device_loop_there():
    succ, steps = successor(), 6
    walk = Walk(succ, steps + 1)
    with aie_utils.using_device(aie_utils.from_name("npu1", n_cols=4)):
        body = walk.compile()
    assert body.plan.full_elf is False and body.plan.image == "xclbin" and body.plan.emit is None
    node, count = 2, 0
    for _ in range(steps + 1):
        nxt = body(node=node, steps=count)
        node, count = int(nxt["node"]), int(nxt["steps"])
    np.testing.assert_array_equal(body.read("trail"), numpy_walk(succ, 2, steps + 1))
    with pytest.raises(LoopError) as e:
        iron.CarriedLoop(body, body, depth=2)
    assert str(e.value) == (
        "Walk is compiled for npu1, which has no full ELF: a carried graph has no device loop there. "
        "Only the host-driven path applies: call it and feed the returned Carry back."
    )


def test_compiled_calls_equal_the_reference_and_refuse_out_of_range_before_writing():
    succ = successor(8, 3)
    a, b = Walk(succ, 4), Walk(succ, 4)
    c = a.compile(device="npu2")
    for node, steps in [(1, 0), (4, 1), (7, 3)]:
        assert dict(c(node=node, steps=steps)) == dict(b.reference(node=node, steps=steps))
    np.testing.assert_array_equal(c.read("trail"), b.read("trail"))
    before = c.read("trail")
    with pytest.raises(IndexOutOfRange) as e:
        c(node=1, steps=4)
    assert str(e.value) == (
        "trail[steps] with steps = 4 is out of range: steps must be in 0..3; nothing was written. "
        "Keep steps in range, or make 'trail' larger."
    )
    np.testing.assert_array_equal(c.read("trail"), before)


class Trail(iron.Graph):
    """A walk whose first step jumps to a node given by a tensor (`start`, one element), then
    walks: the first version takes the tensor, the body does not."""

    def __init__(self, succ, steps):
        self.successor = iron.weight(succ)
        self.trail = iron.state((steps,), np.int32, name="trail")

    def body(self, start=None, *, node: Carried[np.int32], steps: Carried[np.int32]):
        nxt = Copy.step(start) if start is not None else Copy.step(self.successor[node])
        Copy.step(nxt, self.trail[steps])
        return iron.carry(node=nxt, steps=steps + 1)


def test_a_tensor_taking_first_version_compiled_with_feeds_starts_the_loop():
    succ, steps = successor(12, 7), 6
    trail = Trail(succ, steps + 1)
    body = trail.compile()
    first = trail.compile(start=((), np.int32), feeds=body)
    loop = iron.CarriedLoop(first, body, depth=2)
    assert list(loop.run(steps, np.array(9, np.int32), node=0, steps=0)) == list(range(steps))
    expect = np.concatenate([[9], numpy_walk(succ, 9, steps)])
    np.testing.assert_array_equal(body.read("trail"), expect)
    with pytest.raises(LoopError) as e:
        iron.CarriedLoop(trail.compile(start=((), np.int32)), body)
    assert str(e.value) == (
        "Trail's first version was not compiled with feeds= this body, so its Emit does not write the "
        "body's scratchpad: compile it as graph.compile(..., feeds=body)."
    )


def test_refusals_name_the_problem_and_the_fix():
    trail = Trail(successor(4), 4)
    body = trail.compile()
    with_tensor = trail.compile(start=((), np.int32))
    with pytest.raises(LoopError) as e:
        iron.CarriedLoop(with_tensor, with_tensor)
    assert str(e.value) == (
        "the body of a CarriedLoop takes no tensor, but Trail takes start: nothing could write it between steps. "
        "Compile a version that takes the tensor as first (feeds=body) and a body without it."
    )
    for depth in (0, -1, 1.5):
        with pytest.raises(LoopError) as e:
            iron.CarriedLoop(body, body, depth=depth)
        assert str(e.value) == f"CarriedLoop depth={depth!r}: depth is how many runs are kept in flight, an int >= 1."

    class Scratch(iron.Graph):
        def __init__(self):
            self.t = iron.weight(np.arange(4, dtype=np.int32))

        def body(self, *, node: Carried[np.int32], k: Scratchpad[np.int32]):
            return iron.carry(node=Copy.step(self.t[iron.min(node + k, 3)]))

    s = Scratch().compile()
    with pytest.raises(LoopError) as e:
        iron.CarriedLoop(s, s)
    assert str(e.value) == (
        "the body of a CarriedLoop cannot take Scratchpad values (k): the host gives them per call, and between "
        "device steps there is no host call. Make them Carried."
    )


def test_closing_the_iterator_early_waits_out_the_runs_in_flight():
    succ, steps = successor(), 12
    walk = Walk(succ, steps + 1)
    body = walk.compile()
    loop = iron.CarriedLoop(body, body, depth=3)
    it = loop.run(steps, node=1, steps=0)
    assert [next(it) for _ in range(4)] == [0, 1, 2, 3]
    it.close()
    launched = body.session.emulator.launches
    done = body.read("trail")
    # first + 4 waited body steps + the runs kept in flight (depth - 1 more started) all completed
    assert launched == 1 + 4 + 2
    np.testing.assert_array_equal(done[: launched], numpy_walk(succ, 1, launched))
    np.testing.assert_array_equal(done[launched:], 0)


def test_a_graph_called_directly_compiles_once_for_its_shapes():
    class Inc(iron.Graph):
        def __init__(self):
            self.one = iron.param(np.ones(8, np.int32))

        def body(self, x):
            return Add.step(x, self.one)

    g = Inc()
    x = np.arange(8, dtype=np.int32)
    np.testing.assert_array_equal(g(x), x + 1)
    np.testing.assert_array_equal(g(x * 2), x * 2 + 1)
    assert len(versions(g).compiled) == 1
