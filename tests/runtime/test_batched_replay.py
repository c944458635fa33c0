"""Batched replay (iron/runtime/emulator/batch.py): the replayed launches run independent kernel
calls of one signature as one numpy call on stacked operands. Every design here runs with
batching and with each call replayed on its own, and every host buffer (or output, state and
carried value) must agree bit for bit, call after call; the batches must have happened. Then the
parts: which calls share a wave, the byte runs behind it, the strided views, the arenas, and
each batching kernel's compute on stacked operands against its calls one by one."""
import re
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import iron
import iron.runtime.emulator.machine as machine
from iron.kernels import (
    Add,
    Cast,
    Copy,
    Dequant,
    MatMul,
    MatMulAccumulate,
    MatVec,
    Mul,
    QMatVec,
    ReLU,
    Scale,
    Sub,
)
from iron.kernels.library import Accumulate
from iron.models.blocks import Q4_1, Q8_0
from iron.plan.plan import TileKind
from iron.plan.rules import Rule
from iron.runtime.emulator import Emulator, batch
from iron.runtime.emulator.acts import Copy as CopyAct
from iron.runtime.emulator.acts import Drain, Fill, Invoked
from iron.runtime.emulator.batch import Batch, Painted, scratch, strided, unread_outputs, waves_of
from iron.runtime.emulator.core import Step
from iron.runtime.emulator.lanes import Laned, laned
from iron.runtime.emulator.replay import Forwarded
from iron.runtime.emulator.tile import ALIGN, Buffer
from tests.compiler.designs import Head, Layer, random_blocks
from tests.compiler.test_segments import Hops
from tests.runtime.test_emulator_designs import call, load


@pytest.fixture
def batched(monkeypatch):
    """The kernel calls put in Batches so far (`batched.members`); `batched.off()` makes every
    Emulator loaded after it replay each call on its own."""
    real = machine.batched

    class Spy:
        members = calls = 0
        on = True

        def __call__(self, cycle, host_words):
            self.calls += sum(type(act) in (Invoked, Forwarded) for trace in cycle for act in trace)
            if not self.on:
                return list(cycle)
            out = real(cycle, host_words)
            self.members += sum(len(act.members) for trace in out for act in trace if type(act) is Batch)
            return out

        def off(self):
            self.on = False

    spy = Spy()
    monkeypatch.setattr(machine, "batched", spy)
    return spy


class Product(iron.Graph):
    """C = A @ B over the array's grid, A an input, B a param; `out` the result's dtype."""

    def __init__(self, dtype, out=None):
        rng = np.random.default_rng(3)
        self.b = iron.param((rng.integers(-9, 9, (512, 64))).astype(dtype))
        self.out = out

    def body(self, a):
        return MatMul.step(a, self.b, dtype=self.out)

    def example(self) -> dict[str, np.ndarray]:
        return {"a": np.ones((128, 512), self.b.dtype)}


@pytest.fixture
def written_into(monkeypatch):
    """Per call of MatMul's or MatMulAccumulate's compute from now on, whether it was given an
    array to write its result into (a batch's `Stacked.into`)."""
    given = []
    for kernel in (MatMul, MatMulAccumulate):
        def spy(*arrays, out=None, compute=kernel.compute):
            given.append(out is not None)
            return compute(*arrays, out=out)
        monkeypatch.setattr(kernel, "compute", staticmethod(spy))
    return given


@pytest.fixture(params=[1, 3], ids=["one_lane", "three_lanes"])
def lanes(request, monkeypatch):
    """Batches cut over up to `lanes.most` lanes however few bytes they take (batch._cut);
    `lanes.handed`: the Batches handed to lanes' threads in the cycles found so far (lanes.py)."""
    monkeypatch.setattr(batch, "LANES", request.param)
    monkeypatch.setattr(batch, "LANE_BYTES", 1)
    spy = SimpleNamespace(most=request.param, handed=0)

    def counted(cycle, host_words):
        out = laned(cycle, host_words)
        spy.handed += sum(type(act) is Laned for trace in out for act in trace)
        return out
    monkeypatch.setattr(machine, "laned", counted)
    return spy


def three_ways_alike(graph, inputs: list[dict]):
    """Each call of `inputs` run batched, replayed call by call and task by task: every host
    buffer agrees after each. Returns the Plan and the batching and unbatched Emulators."""
    plan, batching = load(graph)
    unbatched = Emulator(plan, replay=True, batch=False)
    tasks = Emulator(plan, replay=False)
    for name in batching._buffers:
        unbatched.buffer(name)[:] = tasks.buffer(name)[:] = batching.buffer(name)
    for tensors in inputs:
        for emulator in (batching, unbatched, tasks):
            call(plan, emulator, tensors)
        for b in plan.host_buffers:
            np.testing.assert_array_equal(batching.buffer(b.name), unbatched.buffer(b.name))
            np.testing.assert_array_equal(batching.buffer(b.name), tasks.buffer(b.name))
    return plan, batching, unbatched


@pytest.mark.parametrize("dtype, out", [(np.float32, None), (np.int8, np.int32), (ml_dtypes.bfloat16, None)],
                         ids=["f32", "i8_i32", "bf16"])
def test_a_tiled_matmul_leaves_every_host_buffer_as_each_call_on_its_own_does(batched, written_into, lanes, dtype, out):
    graph = Product(dtype, out)
    inputs = [{"a": (np.random.default_rng(k).standard_normal((128, 512)) * 9).astype(dtype)} for k in range(8)]
    plan, batching, unbatched = three_ways_alike(graph, inputs)
    assert batching.replayed == unbatched.replayed == 5
    # float32 and integer batches write their sums in place; bfloat16 computes in float32 and casts
    assert any(written_into) == (dtype is not ml_dtypes.bfloat16)
    assert (lanes.handed > 0) == (lanes.most > 1)
    # each k-block's calls on the 32 cores are one Batch: every call of the launches the replay
    # repeats is in one
    per_core = int(re.search(r"(\d+) kernel calls per core", dict(plan.rules)[Rule.TILE_MATMUL_OVER_ARRAY])[1])
    launches, casts = len(batching._replay.cycle), int(dtype is ml_dtypes.bfloat16)   # the float32 sum to bfloat16
    assert per_core > 1 and batched.members == batched.calls == launches * 32 * (per_core + casts)


def runs(make, calls, batched) -> list:
    """The results of `calls` on a fresh compiled graph (with batching as `batched` has it)."""
    graph, spec = make()
    compiled = graph.compile(**spec)
    return [compiled(*args) for args in calls]


@pytest.mark.parametrize("design, fmt, rows, cols", [(Head, Q4_1, 1024, 256), (Head, Q8_0, 512, 256),
                                                     (Layer, Q4_1, 528, 512), (Layer, Q8_0, 528, 512)])
def test_quantized_matvecs_give_the_results_of_each_call_on_its_own(on_emulator, batched, lanes, design, fmt, rows, cols):
    def make():
        return design(random_blocks(np.random.default_rng(2), rows, cols, fmt), fmt), {"x": ((cols,), np.float32)}
    calls = [(np.random.default_rng(k).standard_normal(cols).astype(np.float32),) for k in range(7)]
    on = runs(make, calls, batched)
    members = batched.members
    batched.off()
    off = runs(make, calls, batched)
    for got, want in zip(on, off):
        np.testing.assert_array_equal(got, want)
    assert members > 0 and batched.members == members
    assert (lanes.handed > 0) == (lanes.most > 1)


def test_a_carried_loop_at_depth_two_over_a_segmented_body_gives_the_carry_of_each_call_on_its_own(
        on_emulator, batched):
    def loop():
        body = Hops().compile(device="npu2_1col")
        assert len(body.plan.segments) == 3
        loop = iron.CarriedLoop(body, body, depth=2)
        return list(loop.run(12, i=1)), dict(loop.carry), body.read("seen").copy()
    on = loop()
    members = batched.members
    batched.off()
    off = loop()
    assert on[0] == off[0] and on[1] == off[1]
    np.testing.assert_array_equal(on[2], off[2])
    assert members > 0 and batched.members == members


# ---- the parts ---------------------------------------------------------------------------------

def test_painted_bytes_order_reads_after_writes_and_writes_after_reads():
    memory = Painted()
    assert memory.earliest(0, 64, True) == 0
    memory.record(0, 64, 0, True)           # written in wave 0
    assert memory.earliest(64, 128, True) == 0    # other bytes: free
    assert memory.earliest(60, 70, False) == 1    # overlapping: after the write
    memory.record(0, 32, 3, False)          # read in wave 3
    assert memory.earliest(0, 8, False) == 1      # a read: after the write only
    assert memory.earliest(16, 48, True) == 4     # a write: after the read too
    assert memory.earliest(32, 64, True) == 1     # the bytes nobody read since the write
    memory.record(8, 40, 5, True)           # one run now
    assert memory.points == [0, 8, 40, 64] and memory.states == [(0, 3), (5, -1), (0, -1), None]


def invoked(source, out, core: str):
    """`core`'s call reading words 0..8 of tile buffer `source` into words 0..8 of `out`."""
    step = Step(lambda: None, object(), (source.shaped(0, (8,)), out.shaped(0, (8,))), (8,), ())   # a stand-in call
    return Invoked(step.run, (step,), (source, out), core)


def test_acts_share_a_wave_unless_they_conflict():
    a, b, c = (Buffer(name, 256) for name in "abc")
    calls = [invoked(a, b, "tile_0_2"), invoked(a, c, "tile_0_3"),   # both read a: wave 0
             invoked(b, a, "tile_0_4"),       # reads b the first wrote, writes a both read: 1
             invoked(c, b, "tile_0_3")]       # reads c the second wrote, writes b the third read: 2
    assert waves_of(calls, []) == [0, 0, 1, 2]
    calls[3] = invoked(Buffer("e", 256), Buffer("f", 256), "tile_0_3")
    assert waves_of(calls, []) == [0, 0, 1, 0]   # nothing shared: wave 0, though its core made the second
    # the Fill writes b, which the third call read (1); the Drain reads c the second call wrote
    # (0) into host words a Fill of that host buffer reads (2); the Copy reads words of a the
    # third call wrote (1) and writes words of c the Drain reads (2)
    fill, drain, copy = Fill(0, 0, 4, b, 0), Drain(1, 0, 4, c, 0), CopyAct(c, 0, a, 0, 4)
    hosts = [(("x", 0, 64),), (("x", 32, 36),)]   # per op, the runs of host words it may touch
    assert waves_of([*calls, fill, drain, copy], hosts) == [0, 0, 1, 0, 2, 3, 4]
    assert waves_of([*calls, fill, Drain(1, 0, 4, c, 0), copy], [(("x", 0, 32),), (("x", 32, 36),)])[4:] == [2, 1, 2]


def expands(blocks, scratch, out, core: str):
    """`core`'s call of two steps: words 0..8 of `blocks` into `scratch`, then `scratch` into `out`."""
    steps = [Step(lambda: None, object(), (source.shaped(0, (8,)), into.shaped(0, (8,))), (8,), ())
             for source, into in ((blocks, scratch), (scratch, out))]
    return Invoked(lambda: None, tuple(steps), (blocks, scratch, out), core)


def test_a_buffer_each_call_writes_before_reading_is_scratch_and_no_conflict():
    blocks, out, other = (Buffer(name, 256) for name in ("blocks", "out", "other"))
    expanded = Buffer("expanded", 256)
    calls = [expands(blocks, expanded, out, "tile_0_2"), expands(blocks, expanded, other, "tile_0_2")]
    assert scratch([calls]) == {expanded, out, other}   # out and other: never read at all
    assert waves_of(calls, [], scratch([calls])) == [0, 0]   # one wave though both write expanded
    assert waves_of(calls, []) == [0, 1]
    assert scratch([calls, [CopyAct(out, 0, expanded, 0, 4)]]) == {other}   # read by a Copy in another launch
    assert scratch([[*calls, invoked(expanded, other, "tile_0_3")]]) == {out, other}   # read before written


def test_a_batch_leaves_a_scratch_output_unwritten_only_when_later_steps_read_just_that_view():
    blocks, expanded, out = (Buffer(name, 256) for name in ("blocks", "expanded", "out"))
    call = SimpleNamespace(operands=1)   # a stand-in kernel call of one input

    def two_steps(read: int):
        """words 0..8 of blocks into expanded, then `read` words of expanded into out."""
        steps = (Step(lambda: None, call, (blocks.shaped(0, (8,)), expanded.shaped(0, (8,))), (8,), ()),
                 Step(lambda: None, call, (expanded.shaped(0, (read,)), out.shaped(0, (read,))), (read,), ()))
        return Invoked(lambda: None, steps, (blocks, expanded, out), "tile_0_2")
    assert unread_outputs([two_steps(8)], {expanded}) == (True, False)
    assert unread_outputs([two_steps(4)], {expanded}) == (False, False)   # a part of it: read from the buffer
    assert unread_outputs([two_steps(8)], set()) == (False, False)


def test_operands_on_a_grid_are_one_strided_view_and_others_none():
    memory = np.arange(4096, dtype=np.float32)
    blocks = [memory[start: start + 16].reshape(4, 4) for start in (0, 64, 128, 1000, 1064, 1128)]
    view = strided(blocks, (2, 3))
    assert view.shape == (2, 3, 4, 4) and view.strides == (4000, 256, 16, 4)
    np.testing.assert_array_equal(view.reshape(6, 4, 4), np.stack(blocks))
    assert strided(blocks, (6,)) is None and strided(blocks, (3, 2)) is None
    assert strided([blocks[0]] * 4, (4,)).strides[0] == 0
    cube = [memory[start: start + 16].reshape(4, 4) for i in range(2) for j in range(3) for k in range(2)
            for start in (i * 1000 + j * 10 + k * 100,)]
    assert strided(cube, (2, 3, 2)).strides[:3] == (4000, 40, 400) and strided(cube, (2, 6)) is None
    transposed = [memory[:16].reshape(4, 4), memory[64:80].reshape(4, 4).T]
    assert strided(transposed, (2,)) is None


def test_the_buffers_of_one_role_lie_a_fixed_stride_apart_on_every_core(batched):
    plan, emulator = load(Product(np.float32))
    cores = [list(tile.buffers.values()) for at, tile in emulator.tiles.items() if at.kind is TileKind.COMPUTE]
    assert len(cores) == 32 and len({tuple(b.nbytes for b in buffers) for buffers in cores}) == 1
    for role in zip(*cores):   # the k-th buffer of each core
        addresses = [address(b.data) for b in role]
        assert len({b - a for a, b in zip(addresses, addresses[1:])}) == 1
    buffers = [b for t in emulator.tiles.values() for b in t.buffers.values()]
    assert all((address(b.data) - address(b.data.base)) % ALIGN == 0 for b in buffers)
    spans = sorted((address(b.data), b.data.nbytes) for b in buffers)
    assert all(start + n <= following for (start, n), (following, _) in zip(spans, spans[1:]))   # none overlap


def address(array) -> int:
    return array.__array_interface__["data"][0]


@given(st.lists(st.floats(-1e3, 1e3, width=32), min_size=1, max_size=1), st.integers(0, 2 ** 31))
def test_each_batching_kernel_computes_a_stack_as_its_calls_one_by_one(factor, seed):
    rng = np.random.default_rng(seed)
    cases = [
        (Add, [(5, 7), (5, 7)], np.float32), (Sub, [(5, 7), (5, 7)], np.int16), (Mul, [(5, 7), (5, 7)], np.float32),
        (ReLU, [(9,)], np.int8), (Copy, [(9,)], np.float32), (Accumulate, [(9,), (9,)], np.float32),
        (MatVec, [(6, 40), (40,)], np.float32), (MatVec, [(6, 40), (40,)], np.int8),
        (MatMul, [(6, 40), (40, 3)], np.float32), (MatMulAccumulate, [(6, 40), (40, 3), (6, 3)], np.float32),
        (MatMulAccumulate, [(6, 40), (40, 3), (6, 3)], np.int16),
    ]
    for kernel, shapes, dtype in cases:
        assert kernel.batches
        stacks = [(rng.standard_normal((2, 3, *s)) * 50).astype(dtype) for s in shapes]
        together = kernel.compute(*stacks)
        for i in range(2):
            for j in range(3):
                np.testing.assert_array_equal(together[i, j], kernel.compute(*(s[i, j] for s in stacks)))
    x = (rng.standard_normal((4, 2, 8)) * 300).astype(np.float32)
    together = Scale.compute(x, factor=factor[0])
    for i in range(4):
        np.testing.assert_array_equal(together[i], Scale.compute(x[i], factor=factor[0]))
    for source, out in ((np.float32, ml_dtypes.bfloat16), (np.float32, np.int8), (np.int32, np.int16)):
        cast = Cast.reference_fn(np.dtype(source), {}, np.dtype(out))
        together = cast(x.astype(source))
        for i in range(4):
            np.testing.assert_array_equal(together[i], cast(x[i].astype(source)))
    for fmt in (Q4_1, Q8_0):
        blocks = random_blocks(rng, 12, 64, fmt).reshape(3, 4, -1)
        together = Dequant.compute(blocks, block_bytes=fmt.nbytes)
        assert together.shape == (3, 4, 64)
        for i in range(3):
            np.testing.assert_array_equal(together[i], Dequant.compute(blocks[i], block_bytes=fmt.nbytes))
        x = rng.standard_normal((3, 64)).astype(np.float32)   # QMatVec: each stack's blocks times its own x
        together = QMatVec.compute(blocks, x, block_bytes=fmt.nbytes)
        assert QMatVec.batches and together.shape == (3, 4)
        for i in range(3):
            np.testing.assert_array_equal(together[i], QMatVec.compute(blocks[i], x[i], block_bytes=fmt.nbytes))


@given(st.integers(0, 2 ** 31))
def test_a_kernel_computing_into_an_array_writes_there_what_it_returns_otherwise(seed):
    """`Kernel.computes_into`: the result written into a strided view of blocks (every other one
    of an array, as a batch's output view may be), an accumulating kernel's destination being that view."""
    rng = np.random.default_rng(seed)
    for kernel, shapes, dtype, out in ((MatMul, [(6, 40), (40, 3)], np.float32, np.float32),
                                       (MatMul, [(6, 40), (40, 3)], np.int8, np.int32),
                                       (MatMul, [(6, 40), (40, 3)], np.uint8, np.uint8),
                                       (MatMulAccumulate, [(6, 40), (40, 3), (6, 3)], np.float32, np.float32),
                                       (MatMulAccumulate, [(6, 40), (40, 3), (6, 3)], np.int8, np.int32)):
        assert kernel.computes_into
        stacks = [(rng.standard_normal((2, 3, *s)) * 50).astype(d) for s, d in zip(shapes, (dtype, dtype, out))]
        want = np.asarray(kernel.compute(*stacks)).astype(out)
        view = np.full((2, 6, *shapes[0][:1], shapes[1][1]), 7, out)[:, ::2]
        if kernel.accumulates:
            view[...], stacks[-1] = stacks[-1], view
        assert kernel.compute(*stacks, out=view) is view
        np.testing.assert_array_equal(view, want)


class Blocks(iron.Graph):
    """out_i = w_i @ x[i] for 40 weight matrices and row blocks: one group run over time on one
    core looping 40 times (repeat_over_time), the sequence moving each iteration's operands."""

    def __init__(self):
        rng = np.random.default_rng(5)
        self.w = [iron.param(rng.integers(-9, 9, (32, 64)).astype(np.float32)) for _ in range(40)]

    def body(self, x):
        return tuple(MatVec.step(w, x[i]) for i, w in enumerate(self.w))

    def example(self) -> dict[str, np.ndarray]:
        return {"x": np.ones((40, 64), np.float32)}


def test_a_block_run_over_time_leaves_every_host_buffer_as_each_call_on_its_own_does(batched):
    inputs = [{"x": np.random.default_rng(k).integers(-9, 9, (40, 64)).astype(np.float32)} for k in range(4)]
    plan, batching, unbatched = three_ways_alike(Blocks(), inputs)
    assert plan.repeat is not None and plan.repeat.count == 40
    assert batching.replayed == unbatched.replayed == 2
    assert batched.members > 0   # the looping core's calls on the FIFO's two objects share waves
