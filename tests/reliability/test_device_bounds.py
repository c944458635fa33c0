"""Device-side bounds (issue 12 item 5): in a device loop the Emit computes the next run's
indices, clamps every bounded one into its range before any DMA or core uses it, and counts the
ones that were not in range in a flag word beside the words it writes. After each run the host
reads that flag: the loop stops with IndexOutOfRange naming the step, the user's expression, the
value and the range; the runs in flight are drained and not counted; nothing outside the state's
valid range changes. On the emulator (the same path as the device), through XRT (the pyxrt
stand-in), and the host-driven xclbin path, which still checks before patching."""
import shutil

import numpy as np
import pytest

import iron
from iron import Carried
from iron.compiler.plan import HostRole
from iron.compiler.sources import HEADER, kernel_sources, source_file
from iron.errors import DeviceTimeout, IndexOutOfRange, LoopError, PlanError
from iron.ir import wrap_i32
from iron.kernels import Copy, Softmax
from iron.models.designs import numpy_walk
from iron.runtime.emulator.core import compile_function
from iron.runtime.emulator.kernels import numpy_call
from iron.runtime.emulator.native import NativeLibrary
from tests.runtime import fake_pyxrt

SUCC = np.random.default_rng(12).permutation(16).astype(np.int32)
GUARD = np.array([-7, 99, -1], np.int32)


class Guarded(iron.Graph):
    """The Walk, with a `guard` state placed right after `trail` in the states buffer: a DMA one
    row past trail's end would land on it."""

    def __init__(self, steps: int):
        self.successor = iron.weight(SUCC)
        self.trail = iron.state((steps,), np.int32, name="trail")
        self.guard = iron.state((3,), np.int32, name="guard")

    def body(self, *, node: Carried[np.int32], steps: Carried[np.int32]):
        nxt = Copy.step(self.successor[node], dtype=np.int32)
        Copy.step(nxt, self.trail[steps], dtype=np.int32)
        return iron.carry(node=nxt, steps=steps + 1)


def guarded(steps=6, device="npu2"):
    """A compiled Guarded whose guard holds GUARD and trail -5s, and its states buffer."""
    graph = Guarded(steps)
    body = graph.compile(device=device)
    body.write(graph.guard, GUARD)
    body.write(graph.trail, np.full(steps, -5, np.int32))
    placement = body.plan.placement("guard")
    assert placement.offset == steps     # guard follows trail directly
    return graph, body


def states(body) -> np.ndarray:
    body.read("trail")                   # waits out any run in flight
    return body.session.device_states.words.copy()


def text(step: int, drained: int) -> str:
    ran = (f"before step {step} ran, and the loop stopped: nothing was written by step {step}, and" if not drained
           else "and clamped it to 5, and the loop stopped: "
           + (f"step {step}, already in flight, ran with its" if drained == 1
              else f"steps {step}..{step + drained - 1}, already in flight, ran with their")
           + " indices clamped into range, and")
    return (f"CarriedLoop step {step}: trail[steps] with steps = 6 is out of range: steps must be in 0..5. "
            f"The device's Emit flagged it {ran} loop.transitions and loop.carry describe the runs before "
            f"step {step}. Keep steps in range, or make 'trail' larger.")


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_a_carried_index_leaving_its_range_stops_the_loop_at_that_step(on_emulator, depth):
    graph, body = guarded()
    before = states(body)
    loop = iron.CarriedLoop(body, body, depth=depth)
    seen = []
    with pytest.raises(IndexOutOfRange) as e:
        for index in loop.run(9, node=3, steps=0):
            seen.append(index)
    drained = min(depth - 1, 9 - 5)      # body steps 5.. were in flight when run 4's flag was read
    assert str(e.value) == text(5, drained)
    assert seen == [0, 1, 2, 3, 4]       # step 4 completed and is yielded; then step 5's flag is raised
    walk = numpy_walk(SUCC, 3, 6 + drained)
    assert loop.transitions == 6 and dict(loop.carry) == {"node": int(walk[5]), "steps": 6}
    after = states(body)
    # every element but trail's: unchanged; trail holds the 6 steps that ran, the last element
    # overwritten by the clamped runs in flight (the last one's node)
    expect = before.copy()
    expect[:6] = walk[:6]
    if drained:
        expect[5] = walk[-1]
    np.testing.assert_array_equal(after.view(np.int32), expect.view(np.int32))
    np.testing.assert_array_equal(body.read(graph.guard), GUARD)


def test_the_next_step_is_checked_only_when_it_is_asked_for(on_emulator):
    graph, body = guarded()
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(5, node=3, steps=0)) == [0, 1, 2, 3, 4]     # the last run's Emit flags step 5
    walk = numpy_walk(SUCC, 3, 6)
    assert loop.transitions == 6 and dict(loop.carry) == {"node": int(walk[5]), "steps": 6}
    before = states(body)
    with pytest.raises(IndexOutOfRange) as e:
        list(loop.steps(2))
    assert str(e.value) == text(5, 0)
    np.testing.assert_array_equal(states(body), before)
    assert loop.transitions == 6


def test_a_stopped_loop_refuses_steps_until_it_is_started_again(on_emulator):
    graph, body = guarded()
    loop = iron.CarriedLoop(body, body, depth=2)
    with pytest.raises(IndexOutOfRange):
        list(loop.run(7, node=3, steps=0))
    with pytest.raises(LoopError) as e:
        loop.steps(1)
    assert str(e.value) == ("CarriedLoop.steps(n) cannot continue a loop that stopped (step 5 indexed out of "
                            "range): call loop.start(...) again.")
    assert list(loop.run(3, node=1, steps=0)) == [0, 1, 2]
    np.testing.assert_array_equal(body.read(graph.trail)[:4], numpy_walk(SUCC, 1, 4))
    assert dict(loop.carry) == {"node": int(numpy_walk(SUCC, 1, 4)[-1]), "steps": 4}


def test_a_negative_carried_index_is_clamped_to_the_first_row(on_emulator):
    class Down(Guarded):
        def body(self, *, node: Carried[np.int32], steps: Carried[np.int32]):
            nxt = Copy.step(self.successor[node], dtype=np.int32)
            Copy.step(nxt, self.trail[steps], dtype=np.int32)
            return iron.carry(node=nxt, steps=steps - 1)

    graph = Down(6)
    body = graph.compile(device="npu2")
    body.write(graph.guard, GUARD)
    before = states(body)
    loop = iron.CarriedLoop(body, body, depth=3)
    with pytest.raises(IndexOutOfRange) as e:
        list(loop.run(8, node=3, steps=2))
    assert str(e.value) == (
        "CarriedLoop step 2: trail[steps] with steps = -1 is out of range: steps must be in 0..5. The device's "
        "Emit flagged it and clamped it to 0, and the loop stopped: steps 2..3, already in flight, ran with "
        "their indices clamped into range, and loop.transitions and loop.carry describe the runs before step 2. "
        "Keep steps in range, or make 'trail' larger.")
    assert loop.transitions == 3 and dict(loop.carry)["steps"] == -1
    after = states(body)
    np.testing.assert_array_equal(after[3:], before[3:])      # trail[3:] and guard untouched
    np.testing.assert_array_equal(body.read(graph.guard), GUARD)


# ---- the Emit's arithmetic: exact at the ends of int32, the same in its C++ and on the emulator ----

EXTREMES = [-2**31, -2**31 + 1, -7, -1, 0, 1, 5, 6, 7, 15, 16, 2**31 - 2, 2**31 - 1]
CASES = [(node, steps) for node in EXTREMES for steps in EXTREMES[::3]]


def run_emit(call, plan, node: int, steps: int) -> np.ndarray:
    """The body's Emit on words whose next node is `node` (the element g0 computed) and whose next
    steps is `steps` (this call's word 'steps + 1'); the feedback words it writes."""
    emit_in = np.zeros(len(plan.words), np.int32)
    emit_in[4] = steps
    element = np.array([node], np.int32)
    feedback = np.full(plan.emit.nwords, 12345, np.int32)
    call([emit_in.view(np.uint8), element.view(np.uint8), feedback.view(np.uint8)])
    return feedback


def expected_feedback(node: int, steps: int) -> list[int]:
    """node, steps as they are; their copies clamped into successor's 0..15 and trail's 0..5; steps
    + 1; the flag counting the copies that were clamped."""
    flag = (not 0 <= node < 16) + (not 0 <= steps < 6)
    return [node, steps, min(max(node, 0), 15), min(max(steps, 0), 5), wrap_i32(steps + 1), flag]


def test_the_emit_clamps_and_flags_exactly_at_the_ends_of_int32_on_the_emulator(on_emulator):
    _, body = guarded()
    plan = body.plan
    emit = next(f for f in plan.functions if f.name == "emit")
    assert emit.params == ("emit_in", "g0_out", "feedback")
    bind = compile_function(emit, numpy_call)
    for node, steps in CASES:
        feedback = run_emit(lambda arrays: bind(arrays, 0).run(), plan, node, steps)
        assert feedback[:plan.emit.scratch].tolist() == expected_feedback(node, steps), (node, steps)


def test_the_emits_cpp_computes_the_same_words_as_the_emulator(on_emulator, cache_dir, monkeypatch):
    if shutil.which("g++") is None:
        pytest.skip("the host C++ compiler g++ is not installed (apt-get install g++)")
    monkeypatch.delenv("CXX", raising=False)
    _, body = guarded()
    plan = body.plan
    sources = kernel_sources(plan)
    library = NativeLibrary.load({name: sources[name] for name in (HEADER, source_file("emit"))})
    for node, steps in CASES:
        feedback = run_emit(lambda arrays: library.call("emit", arrays, ("ptr",) * 3), plan, node, steps)
        assert feedback[:plan.emit.scratch].tolist() == expected_feedback(node, steps), (node, steps)


# ---- the host-driven xclbin path: checked before patching, as before ----------------------------

def test_the_host_driven_xclbin_path_refuses_before_anything_runs(on_emulator):
    graph, body = guarded(device="npu1")
    assert body.plan.emit is None and body.plan.image == "xclbin"
    nxt = body(node=3, steps=5)
    before = states(body)
    with pytest.raises(IndexOutOfRange) as e:
        body(**nxt)
    assert str(e.value) == ("trail[steps] with steps = 6 is out of range: steps must be in 0..5; nothing was "
                            "written. Keep steps in range, or make 'trail' larger.")
    np.testing.assert_array_equal(states(body), before)


# ---- through XRT: the flag read after each wait ----------------------------------------------------

def test_through_xrt_the_flag_is_read_after_each_wait_and_the_loop_stops_there(xrt):
    graph, body = guarded()
    before = states(body)
    loop = iron.CarriedLoop(body, body, depth=2)
    calls = xrt.fake_state.calls
    with pytest.raises(IndexOutOfRange) as e:
        list(loop.run(9, node=3, steps=0))
    assert str(e.value) == text(5, 1)
    walk = numpy_walk(SUCC, 3, 7)
    assert loop.transitions == 6 and dict(loop.carry) == {"node": int(walk[5]), "steps": 6}
    expect = before.copy()
    expect[:6] = walk[:6]
    expect[5] = walk[6]                  # step 5, in flight, wrote trail[5] with steps clamped to 5
    np.testing.assert_array_equal(states(body).view(np.int32), expect.view(np.int32))
    # the call order: run k's wait, then the next run's scratchpad synced from the device and read
    # (its flag); the ring's two runs alternate, so 5 waits in, the flagged read stops the loop:
    # the run in flight (step 5) is waited, and nothing starts after
    runs = [c.split(".")[0] for c in calls if c.endswith(".start()")]
    ring = list(dict.fromkeys(runs))
    assert len(ring) == 2 and runs == [ring[k % 2] for k in range(7)]   # first + steps 0..5 started
    waits = [k for k, c in enumerate(calls) if ".wait(" in c]
    flag_reads = [k for k, c in enumerate(calls) if c.endswith(".sync(XCL_BO_SYNC_BO_FROM_DEVICE)")]
    assert len(waits) == 7
    for k, wait in enumerate(waits[:6]):
        scratchpad = scratchpad_of(calls, ring[(k + 1) % 2])
        read = next(j for j in flag_reads if j > wait)
        assert calls[read] == f"{scratchpad}.sync(XCL_BO_SYNC_BO_FROM_DEVICE)"
        assert calls[read + 1].startswith(f"{scratchpad}.read(")
    last_start = max(k for k, c in enumerate(calls) if c.endswith(".start()"))
    flagged = next(j for j in flag_reads if j > waits[5])
    assert last_start < flagged < waits[6]


def scratchpad_of(calls, run: str) -> str:
    return next(c.split(" -> ")[1] for c in calls if c.startswith(f"{run}.get_ctrl_scratchpad_bo()"))


def test_through_xrt_a_run_that_fails_mid_loop_stops_it_and_the_carry_is_what_ran(xrt):
    graph, body = guarded(10)
    loop = iron.CarriedLoop(body, body, depth=3)
    device = xrt.fake_state.on_complete
    completed = []

    def fail_after_four(run):
        device(run)
        completed.append(run)
        if len(completed) == 4:
            xrt.fake_state.wait_state = fake_pyxrt.TIMEOUT

    xrt.fake_state.on_complete = fail_after_four
    with pytest.raises(DeviceTimeout):
        list(loop.run(8, node=3, steps=0))
    walk = numpy_walk(SUCC, 3, 4)
    assert loop.transitions == 4 and dict(loop.carry) == {"node": int(walk[3]), "steps": 4}
    np.testing.assert_array_equal(body.read(graph.trail)[:4], walk)
    with pytest.raises(LoopError) as e:
        loop.steps(1)
    assert str(e.value) == ("CarriedLoop.steps(n) cannot continue a loop that stopped (step 3 failed: DeviceTimeout): "
                            "call loop.start(...) again.")


def test_a_flag_the_host_cannot_explain_is_a_plan_error(xrt):
    """A flag raised while the host finds every index in range (the Emit and the Plan's words
    disagree) stops the loop with PlanError, not a made-up range error."""
    graph, body = guarded()
    feedback = [b.role for b in body.plan.host_buffers].index(HostRole.FEEDBACK)
    device, completed = xrt.fake_state.on_complete, []

    def flag_the_third(run):
        device(run)
        completed.append(run)
        if len(completed) == 3:
            np.frombuffer(run.args[feedback].device_bytes, np.int32)[body.plan.emit.flag] = 1

    xrt.fake_state.on_complete = flag_the_third
    loop = iron.CarriedLoop(body, body, depth=1)
    with pytest.raises(PlanError) as e:
        list(loop.run(4, node=3, steps=0))
    assert str(e.value) == (
        "CarriedLoop step 2: the device's Emit flagged an index of Guarded out of range, but with node = "
        f"{numpy_walk(SUCC, 3, 3)[-1]}, steps = 3 the host finds every index in range: the Emit and the Plan's "
        "words disagree, so the loop stopped. Report it with the Plan (IRON_DEBUG=1 prints it).")
    assert loop.transitions == 3


class Lengths(iron.Graph):
    """A bounded kernel attribute from a carried value: Softmax's valid length n, in 1..8."""

    def __init__(self):
        self.x = iron.weight(np.linspace(0, 1, 8).astype(np.float32))
        self.out = iron.state((8,), np.float32, name="out")

    def body(self, *, n: Carried[np.int32]):
        Copy.step(Softmax.step(self.x, length=n), out=self.out)
        return iron.carry(n=n + 3)


def test_a_bounded_attribute_the_emit_computes_is_clamped_and_flagged_too(on_emulator):
    graph = Lengths()
    body = graph.compile(device="npu2")
    assert [(w.name, str(w.kind), w.bound) for w in body.plan.words] == [
        ("n", "carried", None), ("n", "core", (1, 9)), ("n + 3", "next", None)]
    loop = iron.CarriedLoop(body, body, depth=2)
    with pytest.raises(IndexOutOfRange) as e:
        list(loop.run(5, n=1))
    assert str(e.value) == (
        "CarriedLoop step 2: Softmax length=n with n = 10 is out of range: n must be in 1..8. The device's Emit "
        "flagged it and clamped it to 8, and the loop stopped: step 2, already in flight, ran with its indices "
        "clamped into range, and loop.transitions and loop.carry describe the runs before step 2. Keep n "
        "between 1 and 8.")
    assert loop.transitions == 3 and dict(loop.carry) == {"n": 10}
    x = np.linspace(0, 1, 8)
    np.testing.assert_allclose(body.read(graph.out), np.exp(x) / np.exp(x).sum(), rtol=1e-6)  # length 8 ran
