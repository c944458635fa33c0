"""Issue 25 item 2: a kernel call that fails, or a Ctrl-C while a kernel computes, does not break
the compiled graph: the error propagates as itself (KeyboardInterrupt too), the session loads the
design again (as a new hardware context would), so the next call, and `graph.compile()` again,
works; a loop stopped by either keeps `transitions` and `carry` exact and starts again."""
import numpy as np
import pytest

import iron
from iron import Carried
from iron.errors import DeviceTimeout, LoopError
from iron.kernels import Add, Copy
from iron.models.designs import Walk, numpy_walk
from tests.reliability.conftest import hooked, yielded_until
from tests.runtime import fake_pyxrt

FAULTS: list = []   # [calls to let pass, error]: the kernel raises `error` on the call after them


def maybe_fail():
    if FAULTS:
        FAULTS[0] -= 1
        if FAULTS[0] < 0:
            error = FAULTS[1]
            FAULTS.clear()
            raise error


@pytest.fixture(autouse=True)
def no_faults():
    yield
    FAULTS.clear()


FlakyAdd = hooked(Add, "flaky_add", maybe_fail)
FlakyCopy = hooked(Copy, "flaky_copy", maybe_fail)


class Sum(iron.Graph):
    def body(self, a, b):
        return FlakyAdd.step(a, b)


class FlakyWalk(Walk):
    def body(self, *, node: Carried[np.int32], steps: Carried[np.int32]):
        nxt = FlakyCopy.step(self.successor[node], dtype=np.int32)
        Copy.step(nxt, self.trail[steps], dtype=np.int32)
        return iron.carry(node=nxt, steps=steps + 1)


A, B = np.arange(16, dtype=np.int32), np.full(16, 7, np.int32)
ERRORS = [RuntimeError("the kernel failed once"), KeyboardInterrupt()]


@pytest.mark.parametrize("device", ["npu2", "npu1"])
@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_after_a_failed_or_interrupted_call_the_next_call_works(on_emulator, device, error):
    g = Sum()
    compiled = g.compile(((16,), np.int32), ((16,), np.int32), device=device)
    np.testing.assert_array_equal(compiled(A, B), A + B)
    FAULTS[:] = [0, error]
    with pytest.raises(type(error)) as raised:
        compiled(A, B)
    assert raised.value is error
    np.testing.assert_array_equal(compiled(A + 1, B), A + 1 + B)
    again = g.compile(((16,), np.int32), ((16,), np.int32), device=device)
    assert again is compiled
    np.testing.assert_array_equal(again(A, B + 2), A + B + 2)
    np.testing.assert_array_equal(g.reference(A, B), A + B)


@pytest.mark.parametrize("depth", [1, 3, 6])
@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_a_loop_stopped_by_a_failed_or_interrupted_run_keeps_carry_and_transitions(on_emulator, depth, error):
    succ = np.random.default_rng(2).permutation(16).astype(np.int32)
    walk = FlakyWalk(succ, 12)
    body = walk.compile(device="npu2")
    loop = iron.CarriedLoop(body, body, depth=depth)
    path = numpy_walk(succ, 3, 11)
    FAULTS[:] = [5, error]           # transitions 0..4 run; transition 5 (step 4) raises
    seen, raised = yielded_until(type(error), loop.run(10, node=3, steps=0))
    assert raised is error
    assert seen == [0, 1, 2, 3]
    assert loop.transitions == 5
    assert dict(loop.carry) == {"node": int(path[4]), "steps": 5}
    np.testing.assert_array_equal(body.read(walk.trail), [*path[:5], *[0] * 7])   # no run in flight wrote a row
    with pytest.raises(LoopError) as refused:
        loop.steps(1)
    assert str(refused.value) == (f"CarriedLoop.steps(n) cannot continue a loop that stopped (step 4 failed: "
                                  f"{type(error).__name__}): call loop.start(...) again.")
    assert list(loop.run(10, node=3, steps=0)) == list(range(10))
    assert loop.transitions == 11 and dict(loop.carry) == {"node": int(path[10]), "steps": 11}
    np.testing.assert_array_equal(body.read(walk.trail)[:11], path)
    assert dict(body(node=3, steps=11)) == {"node": int(succ[3]), "steps": 12}


# ---- through XRT: a timed-out or interrupted run, then a new hardware context ----------------------

def test_through_xrt_a_timed_out_call_leaves_the_next_call_working(xrt):
    g = Sum()
    compiled = g.compile(((16,), np.int32), ((16,), np.int32), device="npu2")
    np.testing.assert_array_equal(compiled(A, B), A + B)
    contexts = sum(c.startswith("hw_context(") for c in xrt.fake_state.calls)
    xrt.fake_state.wait_state = fake_pyxrt.TIMEOUT
    with pytest.raises(DeviceTimeout):
        compiled(A, B)
    xrt.fake_state.wait_state = fake_pyxrt.COMPLETED
    np.testing.assert_array_equal(compiled(A + 3, B), A + 3 + B)
    assert sum(c.startswith("hw_context(") for c in xrt.fake_state.calls) == contexts + 1


def test_through_xrt_ctrl_c_in_a_loop_propagates_and_the_loop_starts_again(xrt):
    succ = np.random.default_rng(2).permutation(16).astype(np.int32)
    walk = Walk(succ, 12)
    body = walk.compile(device="npu2")
    loop = iron.CarriedLoop(body, body, depth=3)
    device, completed = xrt.fake_state.on_complete, []

    def interrupt_the_fifth(run):
        device(run)
        completed.append(run)
        if len(completed) == 5:
            raise KeyboardInterrupt

    xrt.fake_state.on_complete = interrupt_the_fifth
    with pytest.raises(KeyboardInterrupt):
        list(loop.run(10, node=3, steps=0))
    path = numpy_walk(succ, 3, 11)
    assert loop.transitions == 4 and dict(loop.carry) == {"node": int(path[3]), "steps": 4}
    xrt.fake_state.on_complete = device
    assert list(loop.run(10, node=3, steps=0)) == list(range(10))
    np.testing.assert_array_equal(body.read(walk.trail)[:11], path)
    assert dict(loop.carry) == {"node": int(path[10]), "steps": 11}
