"""Issue 25 items 3 and 4: a CarriedLoop stopped by IndexOutOfRange yields every step that
completed, then raises naming the step; an index the host computes from the words (steps + 1)
stops the loop before any run of that step starts, so `transitions`, `carry` and every row of
the trail agree at every depth (an index a kernel computed: test_device_bounds.py). A loop whose
first and body are compiled from two graphs is refused, naming both."""
import numpy as np
import pytest

import iron
from iron.errors import IndexOutOfRange, LoopError
from iron.models.designs import Walk, numpy_walk
from tests.reliability.conftest import yielded_until

SUCC = np.random.default_rng(7).permutation(16).astype(np.int32)


@pytest.mark.parametrize("depth", [1, 2, 3, 4, 8])
def test_a_walk_off_its_trail_yields_every_completed_step_then_raises(on_emulator, depth):
    walk = Walk(SUCC, 10)
    body = walk.compile(device="npu2")
    loop = iron.CarriedLoop(body, body, depth=depth)
    path = numpy_walk(SUCC, 3, 10)
    seen, error = yielded_until(IndexOutOfRange, loop.run(30, node=3, steps=0))
    assert seen == list(range(9))        # step 8 wrote trail[9], the last row
    assert str(error) == (
        "CarriedLoop step 9: trail[steps] with steps = 10 is out of range: steps must be in 0..9. The host computed "
        "it before step 9 ran, and the loop stopped: nothing was written by step 9, and loop.transitions and "
        "loop.carry describe the runs before step 9. Keep steps in range, or make 'trail' larger.")
    assert loop.transitions == 10
    assert dict(loop.carry) == {"node": int(path[9]), "steps": 10}
    np.testing.assert_array_equal(body.read(walk.trail), path)   # trail[9] as step 8 wrote it, at every depth


def test_a_first_version_of_another_graph_is_refused_naming_both(on_emulator):
    a, b = Walk(SUCC, 4), Walk(SUCC, 4)
    body_a, body_b = a.compile(device="npu2"), b.compile(device="npu2")
    with pytest.raises(LoopError) as e:
        a.compile(device="npu2", feeds=body_b)
    assert str(e.value) == (
        f"compile(feeds=...) of Walk graph at {id(a):#x} was given a version of Walk graph at {id(b):#x}: a first "
        "version writes its own graph's states, so it feeds only a body of the same graph. Compile the body from "
        "this graph: body = g.compile(...), first = g.compile(..., feeds=body).")
    with pytest.raises(LoopError) as e:
        iron.CarriedLoop(body_a, body_b)
    assert str(e.value) == (
        f"CarriedLoop's first is compiled from Walk graph at {id(a):#x} and its body from Walk graph at "
        f"{id(b):#x}, two graphs with states of their own: first would write one's and body the other's. "
        "Compile both from one graph: body = g.compile(...), first = g.compile(..., feeds=body).")
    for g, body in ((a, body_a), (b, body_b)):   # nothing ran
        np.testing.assert_array_equal(body.read(g.trail), np.zeros(4, np.int32))
