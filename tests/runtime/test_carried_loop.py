"""Compiled graphs on the emulator: the seed chapter's Walk as a device loop on npu2 (depth 1, 2,
3) and host-driven on npu1, a tensor-taking first version compiled with feeds=, every refusal
of CarriedLoop with its exact text, and a loop stopped and resumed: start then steps, leaving the
iterator early, a write or a host call while runs are in flight."""
import numpy as np
import pytest

import aie_utils
import iron
from iron import Carried, Scratchpad
from iron.errors import IndexOutOfRange, LoopError
from iron.kernels import Add, Copy
from iron.models.designs import Walk, numpy_walk
from iron.runtime.compiled import versions
from tests.quotes import quoted


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
    quoted(refusal(iron.CarriedLoop, body, body, depth=2), "Walk", "npu1", "full ELF", "host-driven")


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
    quoted(e.value, "trail[steps]", "steps = 4", "0..3", "nothing was written", "'trail'")
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


def trail_loop(steps, depth):
    """A Trail of `steps` + 1 entries, its body and tensor-taking first version, and their loop."""
    succ = successor(12, 7)
    trail = Trail(succ, steps + 1)
    body = trail.compile()
    first = trail.compile(start=((), np.int32), feeds=body)
    return succ, trail, first, body, iron.CarriedLoop(first, body, depth=depth)


def test_a_tensor_taking_first_version_compiled_with_feeds_starts_the_loop():
    steps = 6
    succ, trail, first, body, loop = trail_loop(steps, depth=2)
    assert list(loop.run(steps, np.array(9, np.int32), node=0, steps=0)) == list(range(steps))
    expect = np.concatenate([[9], numpy_walk(succ, 9, steps)])
    np.testing.assert_array_equal(body.read("trail"), expect)
    quoted(refusal(iron.CarriedLoop, trail.compile(start=((), np.int32)), body), "Trail", "feeds=body")


def refusal(make, *args, **kwargs) -> str:
    """The text of the LoopError `make(*args, **kwargs)` raises."""
    with pytest.raises(LoopError) as e:
        make(*args, **kwargs)
    return str(e.value)


class Scratch(iron.Graph):
    """A body reading a Scratchpad value."""

    def __init__(self):
        self.t = iron.weight(np.arange(4, dtype=np.int32))

    def body(self, *, node: Carried[np.int32], k: Scratchpad[np.int32]):
        return iron.carry(node=Copy.step(self.t[iron.min(node + k, 3)]))


class Logged(Scratch):
    """A body returning an output besides its carry."""

    def body(self, *, node: Carried[np.int32]):
        nxt = Copy.step(self.t[node])
        return Add.step(nxt, nxt), iron.carry(node=nxt)


class Doubled(Scratch):
    """A body returning a value of 40 nested Adds: printed whole it would be 2**40 names long."""

    def body(self, *, node: Carried[np.int32]):
        nxt = Copy.step(self.t[node])
        value = nxt
        for _ in range(40):
            value = Add.step(value, value)
        return value, iron.carry(node=nxt)


def test_a_deep_value_is_named_to_three_calls_deep():
    doubled = Doubled().compile()
    three_deep = "Add(Add(Add(...), Add(...)), Add(Add(...), Add(...)))"
    text = quoted(refusal(iron.CarriedLoop, doubled, doubled), f"returns Add({three_deep}, {three_deep})",
                  "Copy.step(y, out=self.log[steps])", "body.read(...)")
    assert "Add(Add(Add(Add(Add(" not in text


def test_refusals_name_the_problem_and_the_fix():
    trail = Trail(successor(4), 4)
    body = trail.compile()
    with_tensor = trail.compile(start=((), np.int32))
    quoted(refusal(iron.CarriedLoop, with_tensor, with_tensor), "takes no tensor", "Trail takes start", "feeds=body")
    for depth in (0, -1, 1.5, 65, 10**7):
        quoted(refusal(iron.CarriedLoop, body, body, depth=depth), f"depth={depth!r}", "1 to 64")
    s = Scratch().compile()
    quoted(refusal(iron.CarriedLoop, s, s), "Scratchpad values (k)", "Carried", "feeds=body")
    logged = Logged().compile()
    quoted(refusal(iron.CarriedLoop, logged, logged), "returns Add(Copy(t[node]), Copy(t[node]))",
           "Copy.step(y, out=self.log[steps])", "body.read(...)")
    for steps in (-1, 2.0, True):
        quoted(refusal(iron.CarriedLoop(body, body).run, steps, node=0, steps=0), f"run(steps={steps!r})", ">= 0")


# ---- stopping and resuming -------------------------------------------------------------------------

def walk_loop(depth, steps=12, start=1):
    succ = successor()
    walk = Walk(succ, steps + 1)
    body = walk.compile()
    return succ, walk, body, iron.CarriedLoop(body, body, depth=depth)


def reference_carry(succ, start, transitions):
    """The carry after `transitions` runs of the Walk from node `start`, by the reference."""
    walk, carry = Walk(succ, transitions + 1), {"node": start, "steps": 0}
    for _ in range(transitions):
        carry = dict(walk.reference(**carry))
    return carry


def test_start_then_steps_any_number_of_times_continues_from_the_last_carry():
    succ, walk, body, loop = walk_loop(depth=2)
    assert loop.carry is None and loop.transitions == 0
    assert loop.start(node=1, steps=0) is loop
    assert list(loop.steps(3)) == [0, 1, 2]
    assert loop.transitions == 4 and dict(loop.carry) == reference_carry(succ, 1, 4)
    assert list(loop.steps(0)) == []
    assert list(loop.steps(5)) == [3, 4, 5, 6, 7]
    assert loop.transitions == 9 and dict(loop.carry) == reference_carry(succ, 1, 9)
    assert body.session.emulator.launches == 9   # first ran once: 1 + 3 + 5 launches
    np.testing.assert_array_equal(body.read("trail")[:9], numpy_walk(succ, 1, 9))
    np.testing.assert_array_equal(body.read("trail")[9:], 0)


def test_run_is_start_then_steps_and_a_second_start_runs_first_again():
    succ, walk, body, loop = walk_loop(depth=3)
    assert list(loop.run(4, node=1, steps=0)) == [0, 1, 2, 3]
    assert list(loop.run(2, node=7, steps=6)) == [0, 1]
    assert loop.transitions == 3 and dict(loop.carry) == {"node": int(numpy_walk(succ, 7, 3)[-1]), "steps": 9}
    trail = body.read("trail")
    np.testing.assert_array_equal(trail[:5], numpy_walk(succ, 1, 5))
    np.testing.assert_array_equal(trail[6:9], numpy_walk(succ, 7, 3))


def test_steps_before_start_and_a_bad_count_are_refused():
    _, _, _, loop = walk_loop(depth=2)
    quoted(refusal(loop.steps, 3), "CarriedLoop.steps(n)", "loop.start(...)", "loop.run(...)")
    loop.start(node=1, steps=0)
    quoted(refusal(loop.steps, -2), "steps(steps=-2)", ">= 0")
    assert loop.transitions == 1


@pytest.mark.parametrize("leave", ["break", "exception", "close"])
def test_leaving_the_iterator_early_waits_out_the_runs_in_flight(leave):
    succ, walk, body, loop = walk_loop(depth=4)

    def consume():
        it = loop.run(12, node=1, steps=0)
        for index in it:
            if index == 3:
                if leave == "close":
                    it.close()
                elif leave == "exception":
                    raise KeyError("stop")
                break

    if leave == "exception":
        with pytest.raises(KeyError):
            consume()
    else:
        consume()
    # the runs in flight when index 3 was yielded (first and body steps 0..3 done, depth - 1 = 3
    # more started) completed before the iterator let go, and nothing else started
    assert body.session.emulator.launches == 1 + 4 + 3
    assert loop.transitions == 8 and dict(loop.carry) == reference_carry(succ, 1, 8)
    np.testing.assert_array_equal(body.read("trail")[:8], numpy_walk(succ, 1, 8))
    np.testing.assert_array_equal(body.read("trail")[8:], 0)
    assert list(loop.steps(2)) == [7, 8]   # and the loop resumes from there
    assert dict(loop.carry) == reference_carry(succ, 1, 10)


def test_leaving_early_does_not_ask_for_a_step_never_launched():
    # a trail of 6 holds first and steps 0..4: left at index 3 with step 4 in flight, step 5 (whose
    # trail index is out of range) was never launched; the loop once stopped on its flag anyway
    succ, walk, body, loop = walk_loop(depth=2, steps=5)
    for index in loop.run(10, node=1, steps=0):
        if index == 3:
            break
    assert loop.transitions == 6 and dict(loop.carry) == reference_carry(succ, 1, 6)
    np.testing.assert_array_equal(body.read("trail"), numpy_walk(succ, 1, 6))
    assert list(loop.steps(0)) == []
    with pytest.raises(IndexOutOfRange) as e:
        list(loop.steps(1))
    quoted(e.value, "step 5", "trail[steps]", "steps = 6", "0..5")


def test_a_write_while_runs_are_in_flight_waits_for_them_and_none_lands_after_it():
    succ, walk, body, loop = walk_loop(depth=3)
    it = loop.run(12, node=1, steps=0)
    assert [next(it) for _ in range(2)] == [0, 1]   # first and steps 0, 1 done; steps 2, 3 in flight
    body.write(walk.trail, np.zeros(13, np.int32))
    assert list(it) == list(range(2, 12))           # the steps that completed during the write still count
    trail, expect = body.read("trail"), numpy_walk(succ, 1, 13)
    np.testing.assert_array_equal(trail[:5], 0)     # first and steps 0..3 ran before the write
    np.testing.assert_array_equal(trail[5:], expect[5:])


def test_a_host_call_of_another_version_waits_out_the_loop_first():
    steps = 8
    succ, trail, first, body, loop = trail_loop(steps, depth=3)
    it = loop.run(steps, np.array(9, np.int32), node=0, steps=0)
    assert [next(it) for _ in range(2)] == [0, 1]   # transitions 3, 4 in flight, writing trail[3], trail[4]
    first(np.array(11, np.int32), node=0, steps=4)  # a host call writing trail[4]
    assert list(it) == list(range(2, steps))
    expect = np.concatenate([[9], numpy_walk(succ, 9, steps)])
    expect[4] = 11
    np.testing.assert_array_equal(body.read("trail"), expect)
    assert loop.transitions == steps + 1 and first.session.emulator.launches == 2


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
