"""Device-side bounds (issue 12 item 5): in a device loop the Emit computes the next run's
indices, clamps every bounded one into its range before any DMA or core uses it, and counts the
ones that were not in range in a flag word beside the words it writes. After each run the host
reads that flag: the loop stops with IndexOutOfRange naming the step, the user's expression, the
value and the range; the runs in flight are drained and not counted, and their writes through a
clamped index go to the states' sink after the user's states: every row stays as the completed
steps wrote it. So do a drained run's writes of a whole state and at a fixed offset: a flagged run
writes no state. On the emulator (the same path as the device), through XRT (the pyxrt
stand-in), and the host-driven xclbin path, which still checks before patching."""
import re
import shutil

import numpy as np
import pytest

import iron
from iron import Carried
from iron.compiler.allocate import state_sink
from iron.errors import DeviceTimeout, IndexOutOfRange, LoopError, PlanError
from iron.ir import wrap_i32
from iron.kernels import Add, Copy, Softmax
from iron.models.designs import numpy_walk
from iron.plan.fifos import EMIT_IN, FEEDBACK, FifoId, Stem
from iron.plan.mlir import ALLOWED_OPS
from iron.plan.plan import Const, Direction, Dma, HostRole, WordOp, WordRef
from iron.plan.sources import HEADER, kernel_sources, source_file
from iron.runtime.emulator.core import compile_function
from iron.runtime.emulator.kernels import numpy_call
from iron.runtime.emulator.native import NativeLibrary
from tests.plan.test_mlir import op_names
from tests.quotes import quoted
from tests.reliability.conftest import yielded_until
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


class Scatter(Guarded):
    """Each step writes at the row its node names: an index a kernel computed (the gathered
    node), which only the device's Emit sees before the step runs."""

    def body(self, *, node: Carried[np.int32], steps: Carried[np.int32]):
        nxt = Copy.step(self.successor[node], dtype=np.int32)
        Copy.step(nxt, self.trail[node], dtype=np.int32)
        return iron.carry(node=nxt, steps=steps + 1)


class Stamped(Scatter):
    """Scatter, also writing a state whole (`count`, one more each step) and one at a fixed row
    (`last[1]`, the new count) in every step: writes with no per-call index, which a drained
    run must not make either."""

    def __init__(self, steps: int):
        super().__init__(steps)
        self.count = iron.state((4,), np.int32, name="count")
        self.last = iron.state((3, 4), np.int32, name="last")

    def body(self, *, node: Carried[np.int32], steps: Carried[np.int32]):
        nxt = Copy.step(self.successor[node], dtype=np.int32)
        Copy.step(nxt, self.trail[node], dtype=np.int32)
        count = Add.step(self.count, 1, out=self.count)
        Copy.step(count, out=self.last[1])
        return iron.carry(node=nxt, steps=steps + 1)


def scattered(trail: np.ndarray, start: int, runs: int) -> np.ndarray:
    """`trail` after `runs` Scatter steps from `start` (every row index in range)."""
    trail, node = trail.copy(), start
    for _ in range(runs):
        trail[node] = SUCC[node]
        node = int(SUCC[node])
    return trail


def guarded(steps=6, device="npu2", graph_class=Guarded):
    """A compiled Guarded whose guard holds GUARD and trail -5s, and its states buffer."""
    graph = graph_class(steps)
    body = graph.compile(device=device)
    body.write(graph.guard, GUARD)
    body.write(graph.trail, np.full(steps, -5, np.int32))
    placement = body.plan.placement("guard")
    assert placement.offset == steps     # guard follows trail directly
    return graph, body


def states(body) -> np.ndarray:
    """The user's states (trail, guard) as the states buffer holds them, without the sink after them."""
    body.read("trail")                   # waits out any run in flight
    sink, _ = state_sink(body.plan.placements, body.plan.full_elf)
    return body.session.device_states.words[:sink].copy()


def text(step: int, drained: int, by_host: bool = False, what: str = "trail[steps] with steps", value: int = 6,
         top: int = 5, fix: str = "steps") -> str:
    ran = (f"before step {step} ran, and the loop stopped: nothing was written by step {step}, and" if not drained
           else f"and clamped it to {top}, and the loop stopped: "
           + (f"step {step}, already in flight, ran with its indices clamped into range and its" if drained == 1
              else f"steps {step}..{step + drained - 1}, already in flight, ran with their indices clamped into "
              "range and their")
           + " state writes sent to a sink, not into a state, and")
    who = "The host computed it" if by_host else "The device's Emit flagged it"
    return (f"CarriedLoop step {step}: {what} = {value} is out of range: {fix} must be in 0..{top}. "
            f"{who} {ran} loop.transitions and loop.carry describe the runs before "
            f"step {step}. Keep {fix} in range, or make 'trail' larger.")


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_an_index_the_host_computes_out_of_range_stops_the_loop_before_that_step(on_emulator, depth):
    """`steps` is computed by the words alone (steps + 1), so the host knows, before starting
    step 5, that it writes trail[6]: it starts no run for it, yields the steps before it and
    raises; every row stays as the completed steps wrote it, at every depth."""
    graph, body = guarded()
    before = states(body)
    loop = iron.CarriedLoop(body, body, depth=depth)
    seen, error = yielded_until(IndexOutOfRange, loop.run(9, node=3, steps=0))
    assert str(error) == text(5, 0, by_host=True)
    assert seen == [0, 1, 2, 3, 4]       # step 4 completed and is yielded; then step 5's error is raised
    walk = numpy_walk(SUCC, 3, 6)
    assert loop.transitions == 6 and dict(loop.carry) == {"node": int(walk[5]), "steps": 6}
    expect = before.copy()
    expect[:6] = walk                    # the 6 steps that ran, and nothing else
    np.testing.assert_array_equal(states(body).view(np.int32), expect.view(np.int32))
    np.testing.assert_array_equal(body.read(graph.guard), GUARD)


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_an_index_a_kernel_computed_is_flagged_by_the_device_and_the_loop_stops_there(on_emulator, depth):
    """trail[node], node gathered by a kernel: only the device's Emit sees it, flags it and
    clamps it; the runs already in flight run clamped, are not counted, and write into the
    states' sink (each flags the next: a gathered node may be back in range), so every row of
    trail and guard stays as steps 0..2 wrote it, at every depth."""
    graph, body = guarded(8, graph_class=Scatter)
    before = states(body)
    loop = iron.CarriedLoop(body, body, depth=depth)
    seen, error = yielded_until(IndexOutOfRange, loop.run(9, node=3, steps=0))
    drained = depth - 1                  # body steps 2.. were in flight when run 2's flag was read
    assert str(error) == text(2, drained, what="trail[node] with node", value=14, top=7, fix="node")
    assert seen == [0, 1]                # nodes 3, 5, 7 wrote their rows; node 14 is past trail's end
    assert loop.transitions == 3 and dict(loop.carry) == {"node": 14, "steps": 3}
    expect = before.copy()
    expect[:8] = scattered(before[:8].view(np.int32), 3, 3)   # rows 3, 5, 7 and nothing else
    np.testing.assert_array_equal(states(body).view(np.int32), expect.view(np.int32))
    np.testing.assert_array_equal(body.read(graph.trail), [-5, -5, -5, 5, -5, 7, -5, 14])
    np.testing.assert_array_equal(body.read(graph.guard), GUARD)


STAMPED = ("trail", "guard", "count", "last")


def stamped_reference(calls: int) -> dict[str, np.ndarray]:
    """Every state of a Stamped(8) after `calls` reference() calls from node 3, its states as
    `guarded` sets them."""
    graph = Stamped(8)
    graph.write(graph.guard, GUARD)
    graph.write(graph.trail, np.full(8, -5, np.int32))
    carry = {"node": 3, "steps": 0}
    for _ in range(calls):
        carry = dict(graph.reference(**carry))
    return {name: graph.read(name) for name in STAMPED}


@pytest.mark.parametrize("depth", [2, 4])
def test_a_drained_run_writes_no_state_whole_at_a_fixed_row_or_through_its_index(on_emulator, depth):
    """Runs 3.. are in flight when run 2's flag stops the loop: none of them writes count (whole),
    last[1] (a fixed row) or trail[node] (clamped): every element of every state is what the
    3 completed calls of reference() leave, and transitions and carry say 3."""
    graph, body = guarded(8, graph_class=Stamped)
    loop = iron.CarriedLoop(body, body, depth=depth)
    seen, error = yielded_until(IndexOutOfRange, loop.run(9, node=3, steps=0))
    assert str(error) == text(2, depth - 1, what="trail[node] with node", value=14, top=7, fix="node")
    assert seen == [0, 1]
    assert loop.transitions == 3 and dict(loop.carry) == {"node": 14, "steps": 3}
    expect = stamped_reference(3)
    for name in STAMPED:
        np.testing.assert_array_equal(body.read(name), expect[name], err_msg=name)
    np.testing.assert_array_equal(body.read("count"), [3, 3, 3, 3])      # not 3 + the drained runs
    assert list(loop.run(2, node=1, steps=0)) == [0, 1]                  # and it starts again from there
    np.testing.assert_array_equal(body.read("count"), [6, 6, 6, 6])


def test_on_npu1_the_host_refuses_the_out_of_range_call_before_it_writes_anything(on_emulator):
    """npu1 has no full ELF: no device loop, no Emit, no sink; fed back host-driven, the call
    whose node the previous call returned out of range is refused before it runs."""
    graph, body = guarded(8, device="npu1", graph_class=Stamped)
    assert body.plan.emit is None and [w.sink for w in body.plan.words] == [None] * len(body.plan.words)
    carry = {"node": 3, "steps": 0}
    for _ in range(3):
        carry = dict(body(**carry))
    assert carry == {"node": 14, "steps": 3}
    with pytest.raises(IndexOutOfRange) as e:
        body(**carry)
    quoted(e.value, "trail[node]", "node = 14", "0..7", "'trail'")
    expect = stamped_reference(3)
    for name in STAMPED:
        np.testing.assert_array_equal(body.read(name), expect[name], err_msg=name)


def test_every_state_write_has_a_patch_word_the_emit_points_at_the_sink(on_emulator):
    """Each write into the states buffer (trail[node], count whole, last[1]) has a patch word:
    trail's copies its clamped row, the fixed ones are 0; each `sink` is the sink's first word
    less its state's, so a flagged write lies in the sink as it would in its state. The MLIR
    holds only the ops of docs/platform.md section 3, and an `iron.patch` line per state write
    naming its word."""
    _, body = guarded(8, graph_class=Stamped)
    plan = body.plan
    at = {p.name: p.offset for p in plan.placements}
    assert (at["trail"], at["guard"], at["count"], at["last"]) == (0, 8, 11, 15)
    assert state_sink(plan.placements, plan.full_elf) == (27, 12)       # the largest state: last's 12 words
    assert plan.host_buffer(HostRole.STATES).nwords == 39
    sunk = [(w.index, w.name, w.a, w.sink) for w in plan.words if w.sink is not None]
    assert sunk == [(4, "node", WordRef(3), 27 - 0), (5, "0", Const(0), 27 - 11), (6, "0", Const(0), 27 - 15)]
    writes = [(op.offset, op.patch_word) for op in plan.sequence
              if isinstance(op, Dma) and op.buffer == "states" and op.direction is Direction.S2MM]
    assert writes == [(0, 4), (11, 5), (19, 6)]
    text_ = body.mlir
    assert set(op_names(text_)) <= ALLOWED_OPS
    patched = [int(word) for word in re.findall(r"// iron\.patch dma=\d+ word=(\d+)", text_)]
    assert {4, 5, 6} <= set(patched)


def test_the_emits_cpp_sends_every_state_write_to_the_sink_as_the_emulator_does(on_emulator, cache_dir, monkeypatch):
    """The Stamped body's Emit, in C++ and on the emulator, at the ends of int32 with and
    without its own flag: the same words, each state write's patch word its value (the clamped
    row, or 0) when nothing is flagged and its `sink` value otherwise."""
    if shutil.which("g++") is None:
        pytest.skip("the host C++ compiler g++ is not installed (apt-get install g++)")
    monkeypatch.delenv("CXX", raising=False)
    _, body = guarded(8, graph_class=Stamped)
    plan = body.plan
    emit = next(f for f in plan.functions if f.name == "emit")
    bind = compile_function(emit, numpy_call)
    sources = kernel_sources(plan)
    library = NativeLibrary.load({name: sources[name] for name in (HEADER, source_file("emit"))})
    for node, steps, flag in CASES:
        emulated = run_emit(lambda arrays: bind(arrays, 0).run(), plan, node, steps, flag)[:plan.emit.scratch]
        native = run_emit(lambda arrays: library.call("emit", arrays, ("ptr",) * 3), plan, node, steps, flag)
        assert native[:plan.emit.scratch].tolist() == emulated.tolist(), (node, steps, flag)
        flagged = flag + (not 0 <= node < 16) + (not 0 <= node < 8)
        row = min(max(node, 0), 7)
        assert emulated[4:7].tolist() == ([27, 16, 12] if flagged else [row, 0, 0]), (node, steps, flag)
        assert emulated[plan.emit.flag] == flagged


def test_the_states_sink_follows_the_users_states_and_only_state_writes_are_sent_there(on_emulator):
    """The sink holds the largest state (trail's 8 words) after trail and guard; trail[node]'s
    write has a patch word of its own whose `sink` value moves its first word (row 0 + 0) to
    the sink's first word (11); reads keep theirs."""
    _, body = guarded(8, graph_class=Scatter)
    plan = body.plan
    assert state_sink(plan.placements, plan.full_elf) == (11, 8)
    assert plan.host_buffer(HostRole.STATES).nwords == 19
    assert [(w.name, w.op, w.bound, w.sink) for w in plan.words] == [
        ("node", None, None, None), ("steps", None, None, None), ("node", WordOp.COPY, (0, 16), None),
        ("node", WordOp.COPY, (0, 8), None), ("node", WordOp.COPY, None, 11), ("steps + 1", WordOp.ADD, None, None)]
    writes = [op.patch_word for op in plan.sequence if getattr(op, "buffer", "") == "states"]
    assert writes == [4]


def test_the_next_step_is_checked_only_when_it_is_asked_for(on_emulator):
    graph, body = guarded()
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(5, node=3, steps=0)) == [0, 1, 2, 3, 4]     # the last run's Emit flags step 5
    walk = numpy_walk(SUCC, 3, 6)
    assert loop.transitions == 6 and dict(loop.carry) == {"node": int(walk[5]), "steps": 6}
    before = states(body)
    with pytest.raises(IndexOutOfRange) as e:
        list(loop.steps(2))
    assert str(e.value) == text(5, 0, by_host=True)
    np.testing.assert_array_equal(states(body), before)
    assert loop.transitions == 6


def test_a_stopped_loop_refuses_steps_until_it_is_started_again(on_emulator):
    graph, body = guarded()
    loop = iron.CarriedLoop(body, body, depth=2)
    with pytest.raises(IndexOutOfRange):
        list(loop.run(7, node=3, steps=0))
    with pytest.raises(LoopError) as e:
        loop.steps(1)
    quoted(e.value, "CarriedLoop.steps(n)", "step 5", "loop.start(...)")
    assert list(loop.run(3, node=1, steps=0)) == [0, 1, 2]
    np.testing.assert_array_equal(body.read(graph.trail)[:4], numpy_walk(SUCC, 1, 4))
    assert dict(loop.carry) == {"node": int(numpy_walk(SUCC, 1, 4)[-1]), "steps": 4}


def test_a_negative_carried_index_stops_the_loop_before_its_step(on_emulator):
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
    quoted(e.value, "CarriedLoop step 2", "trail[steps]", "steps = -1", "0..5", "'trail'")
    assert loop.transitions == 3 and dict(loop.carry)["steps"] == -1
    after = states(body)
    np.testing.assert_array_equal(after[:3].view(np.int32), numpy_walk(SUCC, 3, 3)[::-1])   # rows 2, 1, 0
    np.testing.assert_array_equal(after[3:], before[3:])      # trail[3:] and guard untouched


# ---- the Emit's arithmetic: exact at the ends of int32, the same in its C++ and on the emulator ----

EXTREMES = [-2**31, -2**31 + 1, -7, -1, 0, 1, 5, 6, 7, 15, 16, 2**31 - 2, 2**31 - 1]
CASES = [(node, steps, flag) for node in EXTREMES for steps in EXTREMES[::3] for flag in (0, 1)]
SINK = 9                                 # moves trail[steps]'s first word (0 + steps) to the sink's (6 + 3)


def run_emit(call, plan, node: int, steps: int, flag: int) -> np.ndarray:
    """The body's Emit on words whose next node is `node` (the element g0 computed), whose next
    steps is `steps` (this call's word 'steps + 1') and whose own flag is `flag`; the feedback
    words it writes."""
    emit_in = np.zeros(len(plan.words) + 1, np.int32)
    emit_in[next(w.index for w in plan.words if w.name == "steps + 1")] = steps
    emit_in[len(plan.words)] = flag
    element = np.array([node], np.int32)
    feedback = np.full(plan.emit.nwords, 12345, np.int32)
    call([emit_in.view(np.uint8), element.view(np.uint8), feedback.view(np.uint8)])
    return feedback


def expected_feedback(node: int, steps: int, flag: int) -> list[int]:
    """node, steps as they are; their copies clamped into successor's 0..15 and trail's 0..5; the
    trail write's patch word: steps clamped, or SINK once anything is flagged; steps + 1; the
    flag: this call's plus the copies that were clamped."""
    flag += (not 0 <= node < 16) + (not 0 <= steps < 6)
    row = min(max(steps, 0), 5)
    return [node, steps, min(max(node, 0), 15), row, SINK if flag else row, wrap_i32(steps + 1), flag]


def test_the_emit_clamps_and_flags_exactly_at_the_ends_of_int32_on_the_emulator(on_emulator):
    _, body = guarded()
    plan = body.plan
    emit = next(f for f in plan.functions if f.name == "emit")
    assert emit.params == (EMIT_IN, FifoId("g0", Stem.OUT), FEEDBACK)
    assert [w.sink for w in plan.words] == [None, None, None, None, SINK, None]
    bind = compile_function(emit, numpy_call)
    for node, steps, flag in CASES:
        feedback = run_emit(lambda arrays: bind(arrays, 0).run(), plan, node, steps, flag)
        assert feedback[:plan.emit.scratch].tolist() == expected_feedback(node, steps, flag), (node, steps, flag)


def test_the_emits_cpp_computes_the_same_words_as_the_emulator(on_emulator, cache_dir, monkeypatch):
    if shutil.which("g++") is None:
        pytest.skip("the host C++ compiler g++ is not installed (apt-get install g++)")
    monkeypatch.delenv("CXX", raising=False)
    _, body = guarded()
    plan = body.plan
    sources = kernel_sources(plan)
    library = NativeLibrary.load({name: sources[name] for name in (HEADER, source_file("emit"))})
    for node, steps, flag in CASES:
        feedback = run_emit(lambda arrays: library.call("emit", arrays, ("ptr",) * 3), plan, node, steps, flag)
        assert feedback[:plan.emit.scratch].tolist() == expected_feedback(node, steps, flag), (node, steps, flag)


# ---- the host-driven xclbin path: checked before patching, as before ----------------------------

def test_the_host_driven_xclbin_path_refuses_before_anything_runs(on_emulator):
    graph, body = guarded(device="npu1")
    assert body.plan.emit is None and body.plan.image == "xclbin"
    nxt = body(node=3, steps=5)
    before = states(body)
    with pytest.raises(IndexOutOfRange) as e:
        body(**nxt)
    quoted(e.value, "trail[steps]", "steps = 6", "0..5", "'trail'")
    np.testing.assert_array_equal(states(body), before)


# ---- through XRT: the flag read after each wait ----------------------------------------------------

def test_through_xrt_the_host_starts_no_run_for_a_step_it_computes_out_of_range(xrt):
    graph, body = guarded()
    before = states(body)
    loop = iron.CarriedLoop(body, body, depth=3)
    calls = xrt.fake_state.calls
    with pytest.raises(IndexOutOfRange) as e:
        list(loop.run(9, node=3, steps=0))
    assert str(e.value) == text(5, 0, by_host=True)
    walk = numpy_walk(SUCC, 3, 6)
    assert loop.transitions == 6 and dict(loop.carry) == {"node": int(walk[5]), "steps": 6}
    expect = before.copy()
    expect[:6] = walk
    np.testing.assert_array_equal(states(body).view(np.int32), expect.view(np.int32))
    starts = [k for k, c in enumerate(calls) if c.endswith(".start()")]
    waits = [k for k, c in enumerate(calls) if ".wait(" in c]
    assert len(starts) == 6 and len(waits) == 6 and starts[-1] < waits[-1]   # first and steps 0..4, no more


def test_through_xrt_the_flag_is_read_after_each_wait_and_the_loop_stops_there(xrt):
    graph, body = guarded(8, graph_class=Scatter)
    before = states(body)
    loop = iron.CarriedLoop(body, body, depth=2)
    calls = xrt.fake_state.calls
    with pytest.raises(IndexOutOfRange) as e:
        list(loop.run(9, node=3, steps=0))
    assert str(e.value) == text(2, 1, what="trail[node] with node", value=14, top=7, fix="node")
    assert loop.transitions == 3 and dict(loop.carry) == {"node": 14, "steps": 3}
    expect = before.copy()
    expect[:8] = scattered(before[:8].view(np.int32), 3, 3)   # step 2, in flight, wrote into the sink
    np.testing.assert_array_equal(states(body).view(np.int32), expect.view(np.int32))
    # the call order: run k's wait, then the next run's scratchpad synced from the device and read
    # (its flag); the ring's two runs alternate, so 3 waits in, the flagged read stops the loop:
    # the run in flight (step 2) is waited, and nothing starts after
    runs = [c.split(".")[0] for c in calls if c.endswith(".start()")]
    ring = list(dict.fromkeys(runs))
    assert len(ring) == 2 and runs == [ring[k % 2] for k in range(4)]   # first + steps 0..2 started
    waits = [k for k, c in enumerate(calls) if ".wait(" in c]
    flag_reads = [k for k, c in enumerate(calls) if c.endswith(".sync(XCL_BO_SYNC_BO_FROM_DEVICE)")]
    assert len(waits) == 4
    for k, wait in enumerate(waits[:3]):
        scratchpad = scratchpad_of(calls, ring[(k + 1) % 2])
        read = next(j for j in flag_reads if j > wait)
        assert calls[read] == f"{scratchpad}.sync(XCL_BO_SYNC_BO_FROM_DEVICE)"
        assert calls[read + 1].startswith(f"{scratchpad}.read(")
    last_start = max(k for k, c in enumerate(calls) if c.endswith(".start()"))
    flagged = next(j for j in flag_reads if j > waits[2])
    assert last_start < flagged < waits[3]


def test_through_xrt_a_drained_run_writes_no_state_either(xrt):
    graph, body = guarded(8, graph_class=Stamped)
    loop = iron.CarriedLoop(body, body, depth=3)
    with pytest.raises(IndexOutOfRange) as e:
        list(loop.run(9, node=3, steps=0))
    assert str(e.value) == text(2, 2, what="trail[node] with node", value=14, top=7, fix="node")
    assert loop.transitions == 3 and dict(loop.carry) == {"node": 14, "steps": 3}
    expect = stamped_reference(3)
    for name in STAMPED:
        np.testing.assert_array_equal(body.read(name), expect[name], err_msg=name)


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
    quoted(e.value, "CarriedLoop.steps(n)", "step 3", "DeviceTimeout", "loop.start(...)")


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
    assert [(w.name, str(w.kind), w.bound, w.sink) for w in body.plan.words] == [
        ("n", "carried", None, None), ("n", "core", (1, 9), None), ("0", "dma", None, 8),   # out's write: 0, or the sink
        ("n + 3", "next", None, None)]
    loop = iron.CarriedLoop(body, body, depth=2)
    with pytest.raises(IndexOutOfRange) as e:
        list(loop.run(5, n=1))
    quoted(e.value, "CarriedLoop step 2", "Softmax length=n", "n = 10", "1..8")
    assert loop.transitions == 3 and dict(loop.carry) == {"n": 10}
    reference = Lengths()
    reference.reference(n=7)             # step 1's length was the last that ran
    np.testing.assert_allclose(body.read(graph.out), reference.read(reference.out), rtol=1e-6)


# ---- a segmented body: the Emit of the last configuration sends every configuration's writes ----

class Hops(iron.Graph):
    """i -> i + 1 (gathered, so only the device sees it), writing c[(i + k) % 8] into seen[k] for
    k < 5 (fixed rows) and i into trail[i]: groups enough for three configurations on one column."""

    def __init__(self):
        self.succ = iron.weight(np.array([1, 2, 3, 4, 5, 6, 7, 0], np.int32))
        self.c = iron.weight((np.arange(8, dtype=np.int32) + 1) * 10)
        self.seen = iron.state((5,), np.int32, name="seen")
        self.trail = iron.state((6,), np.int32, name="trail")

    def body(self, *, i: Carried[np.int32]):
        for k in range(5):
            Copy.step(self.c[(i + k) % 8], out=self.seen[k])
        nxt = Copy.step(self.succ[i], dtype=np.int32)
        Copy.step(nxt, out=self.trail[i])
        return iron.carry(i=nxt)


@pytest.mark.parametrize("depth", [2, 4])
def test_a_segmented_bodys_drained_runs_write_no_state_in_any_configuration(on_emulator, depth):
    graph = Hops()
    body = graph.compile(device="npu2_1col")
    assert len(body.plan.segments) > 1 and body.plan.segments[-1].emit is not None
    at = {p.name: p.offset for p in body.plan.placements}
    sink, _ = state_sink(body.plan.placements, body.plan.full_elf)
    # seen's five writes at fixed rows share one word; trail[i]'s copies its clamped row
    words = body.plan.words
    assert [(w.name, w.a if isinstance(w.a, Const) else words[w.a.index].bound, w.sink) for w in words if w.sink] == [
        ("0", Const(0), sink - at["seen"]), ("i", (0, 6), sink - at["trail"])]
    loop = iron.CarriedLoop(body, body, depth=depth)
    seen, error = yielded_until(IndexOutOfRange, loop.run(12, i=0))
    assert str(error) == text(5, depth - 1, what="trail[i] with i", value=6, top=5, fix="i")
    assert seen == [0, 1, 2, 3, 4] and loop.transitions == 6 and dict(loop.carry) == {"i": 6}
    reference, carry = Hops(), {"i": 0}
    for _ in range(6):
        carry = dict(reference.reference(**carry))
    for name in ("seen", "trail"):
        np.testing.assert_array_equal(body.read(name), reference.read(name), err_msg=name)
    np.testing.assert_array_equal(body.read("seen"), [60, 70, 80, 10, 20])   # step 5's i = 5, not a drained run's


def test_the_emulators_batching_sees_each_state_write_where_its_index_or_the_sink_puts_it(on_emulator):
    """The host words each runtime-sequence op of the Stamped body may touch, which the batching
    orders acts by: trail[node]'s write its row 0..7 or the sink's first word; count's and
    last[1]'s their own words or where they lie in their state, shifted to the sink's start
    (27); a read of successor[node] its row 0..15 of the consts."""
    _, body = guarded(8, graph_class=Stamped)
    body.read("trail")                   # loads the design
    plan, runs = body.plan, body.session.emulator.sequence.host_words()
    patched = {op.patch_word: runs[k] for k, op in enumerate(plan.sequence) if isinstance(op, Dma) and op.patch_word}
    successor = plan.placement("successor").offset
    assert patched == {2: (("consts", successor, successor + 16),),
                       4: (("states", 0, 8), ("states", 27, 28)),
                       5: (("states", 11, 15), ("states", 27, 31)),
                       6: (("states", 19, 23), ("states", 31, 35))}   # last[1]: its row 1 of the sink
