"""Issue 25 item 15: a CarriedLoop deeper than the driver's 4 runs in flight per hardware
context (amd/IRON's tests queue as many runs as steps): the ring holds `depth` runs, at most 4
are started at once and the loop queues the rest, on the emulator and through XRT alike; depth
is bounded (MAX_DEPTH, each run of the ring holding its own scratchpad)."""
import numpy as np
import pytest

import iron
from iron.compiler.allocate import state_sink
from iron.errors import IndexOutOfRange, LoopError
from iron.models.designs import Walk, numpy_walk
from iron.runtime.loop import MAX_DEPTH
from tests.quotes import quoted
from tests.reliability.conftest import yielded_until
from tests.reliability.test_device_bounds import SUCC as SCATTER_SUCC
from tests.reliability.test_device_bounds import Scatter, guarded, scattered

SUCC = np.random.default_rng(11).permutation(16).astype(np.int32)


def counted(session):
    """Wrap the session's start and wait; the most runs it had started and not waited."""
    start, wait, count = session.start, session.wait, {"now": 0, "most": 0}

    def started(run, words=None):
        start(run, words=words)
        count["now"] += 1
        count["most"] = max(count["most"], count["now"])

    def waited(run):
        wait(run)
        count["now"] -= 1

    session.start, session.wait = started, waited
    return count


def deep_walk(depth, steps):
    walk = Walk(SUCC, steps + 1)
    body = walk.compile(device="npu2")
    return walk, body, iron.CarriedLoop(body, body, depth=depth)


@pytest.mark.parametrize("depth", [5, 8, 11])
def test_a_deep_ring_runs_every_step_with_at_most_4_in_flight_on_the_emulator(on_emulator, depth):
    walk, body, loop = deep_walk(depth, 10)
    count = counted(body.session)
    assert list(loop.run(10, node=2, steps=0)) == list(range(10))
    assert count["most"] == 4 and count["now"] == 0
    np.testing.assert_array_equal(body.read(walk.trail), numpy_walk(SUCC, 2, 11))
    assert dict(loop.carry) == {"node": int(numpy_walk(SUCC, 2, 11)[-1]), "steps": 11}


def test_a_deep_ring_through_xrt_starts_at_most_4_runs_on_the_context(xrt):
    walk, body, loop = deep_walk(11, 10)
    calls = xrt.fake_state.calls
    assert list(loop.run(10, node=2, steps=0)) == list(range(10))   # a fifth start on the context is a ContractViolation
    np.testing.assert_array_equal(body.read(walk.trail), numpy_walk(SUCC, 2, 11))
    started = [c.split(".")[0] for c in calls if c.endswith(".start()")]
    assert len(started) == 11 and len(set(started)) == 11       # first and 10 steps, each on its own run of the ring
    in_flight, most = 0, 0
    for c in calls:
        in_flight += c.endswith(".start()") - (".wait(" in c)
        most = max(most, in_flight)
    assert most == 4 and in_flight == 0


def test_a_deep_ring_stopped_by_an_index_never_starts_the_runs_it_queued(on_emulator):
    graph, body = guarded(8, graph_class=Scatter)     # trail[node]: only the device's Emit sees node
    before = body.read(graph.trail)
    loop = iron.CarriedLoop(body, body, depth=16)
    count = counted(body.session)
    seen, error = yielded_until(IndexOutOfRange, loop.run(12, node=3, steps=0))
    assert seen == [0, 1]
    quoted(error, "CarriedLoop step 2", "trail[node]", "node = 14")
    assert "steps 2..4, already in flight" in str(error)      # 3 in flight when run 2's flag was read
    assert count["most"] == 4 and count["now"] == 0
    assert loop.transitions == 3 and dict(loop.carry) == {"node": 14, "steps": 3}
    np.testing.assert_array_equal(body.read(graph.trail), scattered(before, 3, 3))   # the drained wrote no row
    sink, _ = state_sink(body.plan.placements, True)
    # the sink holds the last drained write (step 4, node 12 -> 2, so SUCC[2]): step 5, queued, never ran
    assert body.session.device_states.words.view(np.int32)[sink] == SCATTER_SUCC[2] == 10


def test_a_deep_ring_stops_before_a_step_the_host_computes_out_of_range(on_emulator):
    walk, body, loop = deep_walk(16, 5)    # a 6-row trail, 12 steps asked
    count = counted(body.session)
    seen, error = yielded_until(IndexOutOfRange, loop.run(12, node=2, steps=0))
    assert seen == [0, 1, 2, 3, 4]
    quoted(error, "CarriedLoop step 5", "trail[steps]", "steps = 6")
    assert "The host computed it before step 5 ran" in str(error)
    assert count["most"] == 4 and count["now"] == 0
    assert loop.transitions == 6 and dict(loop.carry)["steps"] == 6
    np.testing.assert_array_equal(body.read(walk.trail), numpy_walk(SUCC, 2, 6))


def test_depth_is_bounded(on_emulator):
    _, body, _ = deep_walk(MAX_DEPTH, 3)
    with pytest.raises(LoopError) as e:
        iron.CarriedLoop(body, body, depth=MAX_DEPTH + 1)
    assert str(e.value) == (
        f"CarriedLoop depth={MAX_DEPTH + 1}: depth is how many runs the ring holds, an int from 1 to {MAX_DEPTH} "
        "(each holds its own scratchpad); npu2's driver keeps 4 of them in flight per hardware context and the "
        "loop queues the rest.")
