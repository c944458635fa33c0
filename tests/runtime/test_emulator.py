"""Tests of the emulator (iron.runtime.emulator) on hand-built Plans: add-one over 1024 int32
(numpy and native kernels), persistence of cores and Buffers across launches, FIFO depth, split
and join links, broadcasts, strided DMAs, runs in order with at most 4 in flight, bad command
state, the scratchpad and an Emit-like core, word bounds and patched offsets checked at launch,
plan rules left to check_plan, DeviceHang texts, the numpy kernel calls against Kernel.emulate
for every library kernel, loops unrolled or not, and replay: once launches repeat, replayed ones
leave every host buffer as launches run task by task do, fail alike, and launches that carry a
transfer over or repeat too late are never replayed. Integers are exact.
Real Plans from the compiler are tested in test_emulator_designs.py.
"""
import shutil

import ml_dtypes
import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron.errors import (
    ArgumentError,
    BackendUnavailable,
    DeviceHang,
    IndexOutOfRange,
    KernelTypeError,
    PlanError,
)
from iron.kernels import LIBRARY, Accumulate, Add, registry
from iron.plan.invariants import check_plan
from iron.plan.plan import (
    Acquire,
    Buffer,
    Core,
    Direction,
    Dma,
    Emit,
    Fifo,
    Function,
    HostBuffer,
    HostRole,
    Imm,
    Invoke,
    KernelStep,
    Link,
    Load,
    Loop,
    Plan,
    Port,
    Ptr,
    Release,
    ScalarStep,
    Tile,
    TileKind,
    Wait,
    WordDef,
    WordKind,
    WordOp,
    WordRef,
)
from iron.runtime.emulator import Emulator, tile
from iron.runtime.emulator.acts import Copy, Drain, Fill, Invoked
from iron.runtime.emulator.core import UNROLLED, Step
from iron.runtime.emulator.kernels import numpy_call
from iron.runtime.emulator.replay import RECORDED, Forwarded, forwarded, relayed
from tests.quotes import quoted

SHIM, MEM = Tile(0, 0, TileKind.SHIM), Tile(0, 1, TileKind.MEM)
CORE, CORE2 = Tile(0, 2, TileKind.COMPUTE), Tile(0, 3, TileKind.COMPUTE)
ROW = (0, 0, 256, 1)  # strides of 256-word rows
BF16 = np.dtype(ml_dtypes.bfloat16)


class PlusOne(iron.Kernel):
    """x + 1 elementwise (a test kernel, with C++ for the native mode)."""

    name = "plus_one"
    source = (
        "#include <cstdint>\n"
        'extern "C" void plus_one_i32(const int32_t* x, int32_t* out, int32_t n) {\n'
        "  for (int32_t i = 0; i < n; ++i) out[i] = x[i] + 1;\n}\n"
    )

    @staticmethod
    def compute(x):
        return x + x.dtype.type(1)


def plan_of(name, fifos, cores, functions, sequence, host_buffers, device="npu2", **parts):
    """A Plan with tiles and (unless given) a `words` buffer derived from
    its parts; `parts` are further Plan fields."""
    dev = from_name(device)
    ends = {t for f in fifos for t in (f.producer, *f.consumers)} | {c.tile for c in cores}
    words = parts.pop("words", ())
    if not any(b.role is HostRole.WORDS for b in host_buffers):
        host_buffers = [*host_buffers, HostBuffer("words", HostRole.WORDS, max(1, len(words)))]
    return Plan(
        device=dev, name=name, full_elf=dev.full_elf, image="elf" if dev.full_elf else "xclbin",
        tiles=tuple(sorted(ends, key=lambda t: (t.col, t.row))), host_buffers=tuple(host_buffers),
        placements=(), fifos=tuple(fifos), links=parts.pop("links", ()), buffers=parts.pop("buffers", ()),
        functions=tuple(functions), cores=tuple(cores), sequence=tuple(sequence),
        words=words, emit=parts.pop("emit", None), **parts,
    )


def stream(fifo, port, body=()):
    """Acquire `fifo` on `port`, then `body`, then release it."""
    return (Acquire(fifo, port), *body, Release(fifo, port))


def add_one_plan(objects_in=4, objects_out=4):
    """Section 1's add_one by hand: 1024 int32, 4 objects of 256 per launch, x + 1."""
    g0 = Function("g0", ("in", "out"), (KernelStep.of(PlusOne, np.int32, (Ptr("in"), Ptr("out"), Imm(256))),), blocked=True)
    step = (Acquire("in", Port.CONSUME), Acquire("out", Port.PRODUCE), Invoke("g0", ("in", "out")),
            Release("in", Port.CONSUME), Release("out", Port.PRODUCE))
    sequence = (
        Dma(Direction.S2MM, "out", "outputs", 0, (1, 1, objects_out, 256), ROW, 1, SHIM),
        Dma(Direction.MM2S, "in", "inputs", 0, (1, 1, objects_in, 256), ROW, 0, SHIM),
        Wait("out"),
    )
    return plan_of(
        "add_one", [Fifo("in", SHIM, (CORE,), 2, 1024), Fifo("out", CORE, (SHIM,), 2, 1024)],
        [Core(CORE, "g0", (Loop(4, step),))], [g0], sequence,
        [HostBuffer("inputs", HostRole.INPUTS, 1280), HostBuffer("outputs", HostRole.OUTPUTS, 1280)],
    )


def launch(emulator, **bindings):
    run = emulator.run(**bindings)
    emulator.start(run)
    emulator.wait(run)
    return run


def ints(words):
    return words.view(np.int32)


# ---- running -------------------------------------------------------------------------------------

def test_add_one_over_1024_int32_equals_numpy():
    emulator = Emulator(add_one_plan())
    for seed in (1, 2):
        x = np.random.default_rng(seed).integers(-2**31, 2**31 - 1, 1024, dtype=np.int32)
        ints(emulator.buffer("inputs"))[:1024] = x
        run = launch(emulator)
        assert run.completed
        np.testing.assert_array_equal(ints(emulator.buffer("outputs"))[:1024], x + np.int32(1))
    assert emulator.launches == 2


def test_add_one_with_native_kernels():
    if shutil.which("g++") is None:
        pytest.skip("the host C++ compiler g++ is not installed (apt-get install g++)")
    emulator = Emulator(add_one_plan(), kernels="native")
    ints(emulator.buffer("inputs"))[:1024] = np.arange(1024) * 3
    launch(emulator)
    np.testing.assert_array_equal(ints(emulator.buffer("outputs"))[:1024], np.arange(1024) * 3 + 1)


def accumulate_plan():
    """Each launch: acc += in (a Buffer), out = acc, out[8] = number of launches so far."""
    tally = Function("tally", ("in", "acc", "count", "out"), (
        KernelStep.of(Accumulate, np.int32, (Ptr("in"), Ptr("acc"), Imm(8))),
        KernelStep.of(iron.kernels.Copy, np.int32, (Ptr("acc"), Ptr("out"), Imm(8))),
        ScalarStep(Ptr("count"), WordOp.ADD, Load("count"), Imm(1)),
        ScalarStep(Ptr("out", 32), WordOp.COPY, Load("count")),
    ))
    program = stream("in", Port.CONSUME, stream("out", Port.PRODUCE, (Invoke("tally", ("in", "acc", "count", "out")),)))
    sequence = (Dma(Direction.MM2S, "in", "inputs", 0, (1, 1, 1, 8), ROW, 0, SHIM),
                Dma(Direction.S2MM, "out", "outputs", 0, (1, 1, 1, 9), ROW, 1, SHIM), Wait("out"))
    return plan_of(
        "tally", [Fifo("in", SHIM, (CORE,), 2, 32), Fifo("out", CORE, (SHIM,), 2, 36)],
        [Core(CORE, "g0", program)], [tally], sequence,
        [HostBuffer("inputs", HostRole.INPUTS, 8), HostBuffer("outputs", HostRole.OUTPUTS, 9)],
        buffers=(Buffer("acc", CORE, 32), Buffer("count", CORE, 4)),
    )


def test_cores_and_buffers_persist_across_launches():
    emulator = Emulator(accumulate_plan())
    for k in range(1, 4):
        ints(emulator.buffer("inputs"))[:] = np.arange(8) * k
        launch(emulator)
    assert ints(emulator.buffer("outputs")).tolist() == [0, 6, 12, 18, 24, 30, 36, 42, 3]


def test_runs_execute_in_order_with_at_most_4_in_flight():
    emulator = Emulator(accumulate_plan())
    ints(emulator.buffer("inputs"))[:] = 1
    outputs = [np.zeros(9, np.uint32) for _ in range(6)]
    runs = [emulator.run(outputs=out) for out in outputs]
    for run in runs[:4]:
        emulator.start(run)
    assert emulator.launches == 0 and not any(r.completed for r in runs)
    emulator.start(runs[4])
    assert emulator.launches == 1 and [r.completed for r in runs] == [True] + [False] * 5
    emulator.wait(runs[2])
    assert emulator.launches == 3 and [r.completed for r in runs] == [True] * 3 + [False] * 3
    emulator.wait(runs[4])
    emulator.wait(runs[5])  # never started: nothing to do
    assert emulator.launches == 5
    assert [int(ints(out)[8]) for out in outputs] == [1, 2, 3, 4, 5, 0]
    assert [int(ints(out)[0]) for out in outputs] == [1, 2, 3, 4, 5, 0]


def test_restarting_a_run_in_flight_is_bad_command_state():
    emulator = Emulator(accumulate_plan())
    run = emulator.run()
    emulator.start(run)
    with pytest.raises(PlanError) as err:
        emulator.start(run)
    quoted(err.value, "bad command state", "run 1", "'tally'", "Wait for the run")
    emulator.wait(run)
    emulator.start(run)
    emulator.wait(run)
    assert emulator.launches == 2 and run.completed


def depth_plan(depth):
    """The core produces 3 objects of @a, then 1 of @b; the sequence drains @b before @a."""
    fill = Function("fill", ("o",), (ScalarStep(Ptr("o"), WordOp.ADD, Load("o"), Imm(1)),), blocked=True)
    program = (Loop(3, stream("a", Port.PRODUCE, (Invoke("fill", ("a",)),))), *stream("b", Port.PRODUCE))
    sequence = (Dma(Direction.S2MM, "b", "out", 3, (1, 1, 1, 1), ROW, 0, SHIM), Wait("b"),
                Dma(Direction.S2MM, "a", "out", 0, (1, 1, 1, 3), ROW, 1, SHIM), Wait("a"))
    return plan_of(
        "depth", [Fifo("a", CORE, (SHIM,), depth, 4), Fifo("b", CORE, (SHIM,), 1, 4)],
        [Core(CORE, "g0", program)], [fill], sequence, [HostBuffer("out", HostRole.OUTPUTS, 4)],
    )


def test_fifo_depth_blocks_the_producer():
    emulator = Emulator(depth_plan(3))
    launch(emulator)
    assert ints(emulator.buffer("out"))[:3].tolist() == [1, 1, 1]
    with pytest.raises(DeviceHang) as err:
        launch(Emulator(depth_plan(2)))
    assert hung(err.value, "'depth'", "op 1 (dma_wait @b)") == [
        "core tile_0_2 (group g0) waits to acquire @a (Produce, 1)",
        "dma op 0 (s2mm @b, bd 0 on shim_0_0): moved 0 of 1 words"]


def links_plan(split=(0, 1024), join=(0, 1024), objects=1):
    """shim -> mem splits `objects` objects of 512 words (one Dma op moving them all) at byte
    offsets `split` for two cores, one adding one, one doubling; their results join at `join`."""
    plus = Function("plus", ("x", "y"), (KernelStep.of(PlusOne, np.int32, (Ptr("x"), Ptr("y"), Imm(256))),), blocked=True)
    double = Function("double", ("x", "y"), (KernelStep.of(Add, np.int32, (Ptr("x"), Ptr("x"), Ptr("y"), Imm(256))),),
                      blocked=True)

    def worker(tile, fn, source, dest):
        body = (Invoke(fn.name, (source, dest)),)
        return Core(tile, fn.name, (Loop(objects, stream(source, Port.CONSUME, stream(dest, Port.PRODUCE, body))),))

    fifos = [Fifo("whole", SHIM, (MEM,), 2, 2048), Fifo("lo", MEM, (CORE,), 2, 1024),
             Fifo("hi", MEM, (CORE2,), 2, 1024), Fifo("r_lo", CORE, (MEM,), 2, 1024),
             Fifo("r_hi", CORE2, (MEM,), 2, 1024), Fifo("joined", MEM, (SHIM,), 2, 2048)]
    links = (Link(MEM, ("whole",), ("lo", "hi"), destination_offsets=split),
             Link(MEM, ("r_lo", "r_hi"), ("joined",), source_offsets=join))
    sequence = (Dma(Direction.MM2S, "whole", "x", 0, (1, 1, 2 * objects, 256), ROW, 0, SHIM),
                Dma(Direction.S2MM, "joined", "y", 0, (1, 1, 2 * objects, 256), ROW, 1, SHIM), Wait("joined"))
    words = 512 * objects
    return plan_of("links", fifos, [worker(CORE, plus, "lo", "r_lo"), worker(CORE2, double, "hi", "r_hi")],
                   [plus, double], sequence,
                   [HostBuffer("x", HostRole.INPUTS, words), HostBuffer("y", HostRole.OUTPUTS, words)], links=links)


def split_and_joined(x):
    """What links_plan's cores make of x, object by object: its first half plus one, its second doubled."""
    halves = x.reshape(-1, 2, 256)
    return np.stack([halves[:, 0] + 1, halves[:, 1] * 2], axis=1).reshape(-1)


def test_split_and_join_links_on_the_mem_tile():
    """shim -> mem splits 512 words into halves for two cores; their results join."""
    plan = links_plan()
    check_plan(plan)
    emulator = Emulator(plan)
    x = np.arange(512, dtype=np.int32) * 5
    ints(emulator.buffer("x"))[:] = x
    launch(emulator)
    np.testing.assert_array_equal(ints(emulator.buffer("y")), split_and_joined(x))


def test_several_objects_in_one_dma_op_through_a_split_and_join():
    """One Dma op moves 6 objects through the mem tile's split and join: each part has its own
    locks, so a core's channel never takes a part of an object not yet written (with one lock
    pair counting parts, the first channel took the next buffer's count and sent stale words)."""
    emulator = Emulator(links_plan(objects=6))
    for k in (3, 7):
        x = np.arange(6 * 512, dtype=np.int32) * k
        ints(emulator.buffer("x"))[:] = x
        launch(emulator)
        np.testing.assert_array_equal(ints(emulator.buffer("y")), split_and_joined(x))


def test_a_step_calls_the_kernel_class_it_holds_whatever_the_name_table_says(monkeypatch):
    """The Plan carries the kernel class: pointing the name 'add' at Sub in the write-once table
    (which no class definition can do) changes neither what the emulator runs nor the symbol."""
    monkeypatch.setitem(registry._OWNERS, "add", iron.kernels.Sub)
    plan = links_plan()
    assert plan.function("double").steps[0].symbol == "add_i32"
    emulator = Emulator(plan)
    x = np.arange(512, dtype=np.int32) * 5
    ints(emulator.buffer("x"))[:] = x
    launch(emulator)
    np.testing.assert_array_equal(ints(emulator.buffer("y")), split_and_joined(x))


def test_links_lower_as_mlir_aie_lowers_them():
    """One set of buffers on the mem tile per link (the split one's, the joined one's) with a lock
    pair per part; each S2MM channel has acquired its part of a free buffer and waits for words."""
    emulator = Emulator(links_plan())
    mem, core = emulator.tiles[MEM], emulator.tiles[CORE]
    assert {n: b.data.size for n, b in mem.buffers.items()} == {
        "whole_cons_buff_0": 2048, "whole_cons_buff_1": 2048, "joined_buff_0": 2048, "joined_buff_1": 2048}
    at_rest = {"whole_cons_prod_lock_0": 1, "whole_cons_cons_lock_0": 0, "whole_cons_prod_lock_1": 2,
               "whole_cons_cons_lock_1": 0, "joined_prod_lock_0": 1, "joined_cons_lock_0": 0,
               "joined_prod_lock_1": 1, "joined_cons_lock_1": 0}
    assert {n: lock.value for n, lock in mem.locks.items()} == at_rest
    assert {n: lock.value for n, lock in core.locks.items()} == {
        "lo_cons_prod_lock_0": 1, "lo_cons_cons_lock_0": 0, "r_lo_prod_lock_0": 2, "r_lo_cons_lock_0": 0}
    assert [c.name for c in emulator.fifos.channels if "mem_0_1" in c.name] == [
        "s2mm 0 of mem_0_1 (@whole)", "mm2s 0 of mem_0_1 (@lo)", "mm2s 1 of mem_0_1 (@hi)",
        "s2mm 1 of mem_0_1 (@r_lo)", "s2mm 2 of mem_0_1 (@r_hi)", "mm2s 2 of mem_0_1 (@joined)"]
    assert [c.name for c in emulator.sequence.channels.values()] == [
        "mm2s 0 of shim_0_0 (@whole)", "s2mm 0 of shim_0_0 (@joined)"]
    launch(emulator)
    assert {n: lock.value for n, lock in mem.locks.items()} == at_rest


@pytest.mark.parametrize("split, join, text", [
    ((0, 512), (0, 1024), "the split whole -> ('lo', 'hi') puts parts of [1024, 1024] bytes at byte offsets "
                          "[0, 512] of 2048-byte objects"),
    ((0, 1024), (1024, 0), "the join ('r_lo', 'r_hi') -> joined puts parts of [1024, 1024] bytes at byte "
                           "offsets [1024, 0] of 2048-byte objects"),
], ids=["overlapping", "out_of_order"])
def test_split_or_join_parts_not_back_to_back_are_refused(split, join, text):
    """mlir-aie moves part i of a split or join from its offset up to the next one's."""
    with pytest.raises(PlanError) as err:
        check_plan(links_plan(split, join))
    quoted(err.value, "plan links on npu2", text, "back to back")


def fan_plan():
    """A core relays 3 objects to two cores (a broadcast), each copies them to the host."""
    copy = Function("copy", ("x", "y"), (KernelStep.of(iron.kernels.Copy, np.int32, (Ptr("x"), Ptr("y"), Imm(4))),), blocked=True)

    def copier(tile, source, dest):
        return Core(tile, dest, (Loop(3, stream(source, Port.CONSUME, stream(dest, Port.PRODUCE, (Invoke("copy", (source, dest)),)))),))

    core3 = Tile(0, 4, TileKind.COMPUTE)
    relay, first, second = copier(CORE, "in", "mid"), copier(CORE2, "mid", "o1"), copier(core3, "mid", "o2")
    fifos = [Fifo("in", SHIM, (CORE,), 2, 16), Fifo("mid", CORE, (CORE2, core3), 2, 16),
             Fifo("o1", CORE2, (SHIM,), 2, 16), Fifo("o2", core3, (SHIM,), 2, 16)]
    sequence = (Dma(Direction.MM2S, "in", "x", 0, (1, 1, 3, 4), (0, 0, 4, 1), 0, SHIM),
                Dma(Direction.S2MM, "o1", "y", 0, (1, 1, 3, 4), (0, 0, 4, 1), 1, SHIM),
                Dma(Direction.S2MM, "o2", "y", 12, (1, 1, 3, 4), (0, 0, 4, 1), 2, SHIM), Wait("o1"), Wait("o2"))
    return plan_of("fan", fifos, [relay, first, second], [copy], sequence,
                   [HostBuffer("x", HostRole.INPUTS, 12), HostBuffer("y", HostRole.OUTPUTS, 24)])


def test_a_tile_to_tile_fifo_broadcasts_to_every_consumer():
    emulator = Emulator(fan_plan())
    ints(emulator.buffer("x"))[:] = np.arange(12) + 100
    launch(emulator)
    assert ints(emulator.buffer("y")).tolist() == list(range(100, 112)) * 2


def transpose_plan():
    """mm2s reads column-major (stride 4), s2mm writes back row-major with a repeat count."""
    copy = Function("copy", ("x", "y"), (KernelStep.of(iron.kernels.Copy, np.int32, (Ptr("x"), Ptr("y"), Imm(16))),))
    core = Core(CORE, "g0", stream("in", Port.CONSUME, stream("out", Port.PRODUCE, (Invoke("copy", ("in", "out")),))))
    sequence = (Dma(Direction.MM2S, "in", "x", 0, (1, 1, 4, 4), (0, 0, 1, 4), 0, SHIM),
                Dma(Direction.S2MM, "out", "y", 0, (2, 1, 2, 4), (8, 0, 4, 1), 1, SHIM), Wait("out"))
    return plan_of("transpose", [Fifo("in", SHIM, (CORE,), 1, 64), Fifo("out", CORE, (SHIM,), 1, 64)],
                   [core], [copy], sequence, [HostBuffer("x", HostRole.INPUTS, 16), HostBuffer("y", HostRole.OUTPUTS, 16)])


def test_a_strided_dma_reads_and_writes_columns():
    """mm2s reads column-major (stride 4), s2mm writes back row-major with a repeat count."""
    emulator = Emulator(transpose_plan())
    ints(emulator.buffer("x"))[:] = np.arange(16)
    launch(emulator)
    np.testing.assert_array_equal(ints(emulator.buffer("y")), np.arange(16).reshape(4, 4).T.reshape(-1))


def rows_plan():
    """Rows of 6 words (stride 8) travel in objects of 4 words, both ways."""
    copy = Function("copy", ("x", "y"), (KernelStep.of(iron.kernels.Copy, np.int32, (Ptr("x"), Ptr("y"), Imm(4))),), blocked=True)
    body = stream("in", Port.CONSUME, stream("out", Port.PRODUCE, (Invoke("copy", ("in", "out")),)))
    rows = {"sizes": (1, 1, 2, 6), "strides": (0, 0, 8, 1)}
    sequence = (Dma(Direction.MM2S, "in", "x", 1, **rows, bd_id=0, shim=SHIM),
                Dma(Direction.S2MM, "out", "y", 0, **rows, bd_id=1, shim=SHIM), Wait("out"))
    return plan_of("rows", [Fifo("in", SHIM, (CORE,), 2, 16), Fifo("out", CORE, (SHIM,), 2, 16)],
                   [Core(CORE, "g0", (Loop(3, body),))], [copy], sequence,
                   [HostBuffer("x", HostRole.INPUTS, 16), HostBuffer("y", HostRole.OUTPUTS, 16)])


def test_objects_that_cut_the_rows_of_a_strided_dma():
    """Rows of 6 words (stride 8) travel in objects of 4 words, both ways."""
    emulator = Emulator(rows_plan())
    ints(emulator.buffer("x"))[:] = np.arange(16) + 1
    launch(emulator)
    assert ints(emulator.buffer("y")).tolist() == [2, 3, 4, 5, 6, 7, 0, 0, 10, 11, 12, 13, 14, 15, 0, 0]


# ---- the scratchpad ------------------------------------------------------------------------------

def emit_plan(device):
    """An Emit-like core: from this run's words (n, step) it writes the next run's (n + step, step)."""
    emit = Function("emit", ("words", "fb"), (
        ScalarStep(Ptr("fb"), WordOp.ADD, Load("words"), Load("words", 4)),
        ScalarStep(Ptr("fb", 4), WordOp.COPY, Load("words", 4)),
    ))
    program = stream("emit_in", Port.CONSUME, stream("feedback", Port.PRODUCE, (Invoke("emit", ("emit_in", "feedback")),)))
    sequence = (Dma(Direction.MM2S, "emit_in", "words", 0, (1, 1, 1, 2), ROW, 0, SHIM),
                Dma(Direction.S2MM, "feedback", "feedback", 0, (1, 1, 1, 2), ROW, 1, SHIM), Wait("feedback"))
    words = (WordDef(0, "n", WordKind.CARRIED), WordDef(1, "step", WordKind.CARRIED))
    nexts = (("n", WordRef(0)), ("step", WordRef(1)))
    return plan_of(
        "emit", [Fifo("emit_in", SHIM, (CORE,), 2, 8), Fifo("feedback", CORE, (SHIM,), 2, 8)],
        [Core(CORE, "emit", program)], [emit], sequence,
        [HostBuffer("words", HostRole.WORDS, 2), HostBuffer("feedback", HostRole.FEEDBACK, 2)], device, words=words,
        carry=nexts, emit=Emit(CORE, nexts, words),
    )


def test_an_emit_core_feeds_the_next_runs_scratchpad_in_a_ring():
    emulator = Emulator(emit_plan("npu2"))
    ring = [np.zeros(2, np.uint32) for _ in range(2)]
    runs = [emulator.run(words=ring[k], feedback=ring[(k + 1) % 2]) for k in range(2)]
    ints(ring[0])[:] = [10, 3]
    for run in runs:
        emulator.start(run)
    seen = []
    for k in range(6):
        emulator.wait(runs[k % 2])
        seen.append(int(ints(runs[k % 2].buffers["feedback"])[0]))
        if k < 4:
            emulator.start(runs[k % 2])
    assert seen == [13, 16, 19, 22, 25, 28]
    assert ints(ring[0]).tolist() == [28, 3] and emulator.launches == 6


def trail_plan(device="npu2"):
    """Writes one word (1 + launches so far) into trail[steps]: a patched S2MM offset."""
    mark = Function("mark", ("o", "n"), (ScalarStep(Ptr("n"), WordOp.ADD, Load("n"), Imm(1)),
                                         ScalarStep(Ptr("o"), WordOp.COPY, Load("n"))))
    program = stream("out", Port.PRODUCE, (Invoke("mark", ("out", "n")),))
    sequence = (Dma(Direction.S2MM, "out", "states", 0, (1, 1, 1, 1), ROW, 0, SHIM, patch_word=0), Wait("out"))
    words = (WordDef(0, "steps", WordKind.SCRATCHPAD, bound=(0, 8), what="trail[steps]", tensor="trail"),)
    return plan_of("trail", [Fifo("out", CORE, (SHIM,), 2, 4)], [Core(CORE, "g0", program)], [mark],
                   sequence, [HostBuffer("states", HostRole.STATES, 8), HostBuffer("words", HostRole.WORDS, 1)], device,
                   words=words, buffers=(Buffer("n", CORE, 4),))


@pytest.mark.parametrize("device", ["npu2", "npu1"])
def test_patched_offsets_and_word_bounds(device):
    emulator = Emulator(trail_plan(device))
    for steps in (5, 2):
        ints(emulator.buffer("words"))[0] = steps
        launch(emulator)
    ints(emulator.buffer("words"))[0] = 8
    with pytest.raises(IndexOutOfRange) as err:
        launch(emulator)
    quoted(err.value, "trail[steps]", "steps = 8", "0..7", "nothing was written")
    ints(emulator.buffer("words"))[0] = 7
    launch(emulator)
    assert ints(emulator.buffer("states")).tolist() == [0, 0, 2, 0, 0, 1, 0, 3]
    assert emulator.launches == 3


# ---- what check_plan refuses -----------------------------------------------------------------

def with_dma(plan, index, **changes):
    """`plan` with the fields of its sequence op `index` changed."""
    ops = list(plan.sequence)
    ops[index] = Dma(**{**ops[index].__dict__, **changes})
    return Plan(**{**plan.__dict__, "sequence": tuple(ops)})


def test_the_emulator_leaves_plan_rules_to_check_plan():
    """A plan breaking a device rule is refused by check_plan (which the compiler runs on every
    Plan), not again by the emulator, which runs the hand-built plan as the device would."""
    plan = add_one_plan()
    unbalanced = Core(CORE, "g0", (Loop(4, plan.cores[0].program[0].body[:-1]),))
    plan = Plan(**{**plan.__dict__, "cores": (unbalanced,)})
    with pytest.raises(PlanError) as err:
        check_plan(plan)
    quoted(err.value, "plan add_one on npu2", "tile_0_2", "out (Produce)", "different number")
    with pytest.raises(DeviceHang) as err:  # it holds one @out object for good: the S2MM never gets it
        launch(Emulator(plan))
    assert str(err.value).splitlines()[1:3] == [
        "  core tile_0_2 (group g0) waits to acquire @in (Consume, 1)",
        "  dma op 0 (s2mm @out, bd 1 on shim_0_0): moved 0 of 1024 words",
    ]


def test_a_wait_no_token_can_satisfy_waits_forever():
    """On the device a dma_wait with no completion token to come never returns."""
    plan = add_one_plan()
    plan = Plan(**{**plan.__dict__, "sequence": (*plan.sequence, Wait("in"))})
    with pytest.raises(DeviceHang) as err:
        launch(Emulator(plan))
    assert hung(err.value, "'add_one'", "op 3 (dma_wait @in)") == [
        "core tile_0_2 (group g0) waits to acquire @in (Consume, 1)"]
    tokened = with_dma(plan, 1, issue_token=True)
    ints((emulator := Emulator(tokened)).buffer("inputs"))[:1024] = 7
    launch(emulator)
    assert ints(emulator.buffer("outputs"))[:1024].tolist() == [8] * 1024


def test_a_core_that_acquires_nothing_is_refused_at_load():
    """It would never wait, so the scheduler could never finish a launch."""
    plan = accumulate_plan()
    idle = Core(CORE, "g0", (Invoke("tally", ("in", "acc", "count", "out")),))
    with pytest.raises(PlanError) as err:
        Emulator(Plan(**{**plan.__dict__, "cores": (idle,)}))
    quoted(err.value, "tile_0_2 (group g0)", "acquires nothing", "Acquire")


def test_a_patched_offset_out_of_its_host_buffer_is_refused_at_launch():
    plan = trail_plan()
    plan = Plan(**{**plan.__dict__, "words": (WordDef(0, "steps", WordKind.SCRATCHPAD),)})
    emulator = Emulator(plan)
    ints(emulator.buffer("words"))[0] = 8
    with pytest.raises(PlanError) as err:
        launch(emulator)
    quoted(err.value, "'trail'", "op 0 (s2mm @out, bd 0 on shim_0_0)", "words 8..8", "'states'", "8 words")


# ---- hangs ---------------------------------------------------------------------------------------

def hung(error, plan: str, op: str) -> list[str]:
    """A DeviceHang of launch 1 naming `plan` and the sequence `op` it waits at: the lines saying
    what each blocked core and DMA op waits for (after the first, before the fix)."""
    text = quoted(error, plan, "launch 1 (run 1)", op, "DMA sizes and the acquire counts")
    return [line.strip() for line in text.splitlines()[1:-1]]


def test_a_sequence_moving_one_object_fewer_than_the_core_acquires_hangs():
    emulator = Emulator(add_one_plan(objects_in=3))  # check_plan refuses it
    with pytest.raises(DeviceHang) as err:
        launch(emulator)
    assert hung(err.value, "'add_one'", "op 2 (dma_wait @out)") == [
        "core tile_0_2 (group g0) waits to acquire @in (Consume, 1)",
        "dma op 0 (s2mm @out, bd 1 on shim_0_0): moved 768 of 1024 words"]
    with pytest.raises(PlanError) as again:
        launch(emulator)
    quoted(again.value, "'add_one'", "earlier launch", "new Emulator")


def test_a_sequence_moving_one_object_more_than_the_core_produces_hangs():
    with pytest.raises(DeviceHang) as err:
        launch(Emulator(add_one_plan(objects_out=5)))
    assert hung(err.value, "'add_one'", "op 2 (dma_wait @out)") == [
        "core tile_0_2 (group g0) waits to acquire @in (Consume, 1)",
        "dma op 0 (s2mm @out, bd 1 on shim_0_0): moved 1024 of 1280 words"]


def test_a_sequence_waiting_before_it_sends_the_input_hangs():
    plan = add_one_plan()
    early = Plan(**{**plan.__dict__, "sequence": (plan.sequence[0], plan.sequence[2], plan.sequence[1])})
    with pytest.raises(DeviceHang) as err:
        launch(Emulator(early))
    assert hung(err.value, "'add_one'", "op 1 (dma_wait @out)") == [
        "core tile_0_2 (group g0) waits to acquire @in (Consume, 1)",
        "dma op 0 (s2mm @out, bd 1 on shim_0_0): moved 0 of 1024 words"]


SIZES = {"matvec": (3, 4), "matmul": (2, 3, 4), "matmul_accumulate": (2, 3, 4), "concat": (2, 3, 4), "rmsnorm": (3, 6), "softmax": (3, 6),
         "argmax": (3, 6), "max": (3, 6), "min": (3, 6), "sum": (3, 6), "layer_norm": (3, 6), "layer_norm_affine": (3, 6),
         "dequant": (2, 40, 64), "conv2d": (5, 5, 2, 3, 3, 2, 2, 2),
         "max_pool2d": (6, 6, 2, 3, 3), "avg_pool2d": (6, 6, 2, 3, 3), "attention": (4, 2, 2, 5, 3),
         "strided": (6, 4), "scatter": (4, 6), "strided_rows": (2, 6, 4)}
ATTRS = {"factor": 1.5, "eps": 1e-5, "length": 4, "scale": 3, "shift": 2, "pos": 5, "head_dim": 2, "base": 100.0,
         "block_bytes": 20, "zero_point": -3, "size": 2, "stride": 2, "padding": 0, "alpha": 0.25, "value": -3,
         "fvalue": 2.5, "flip": 1,
         "offset": 1, "n0": 1, "n1": 1, "n2": 2, "n3": 2, "s0": 0, "s1": 0, "s2": 3, "s3": 1}
SIGNATURES = [(k, d, o) for k in LIBRARY for d, o in k.signatures()]


@pytest.mark.parametrize("kernel, dtype, out", SIGNATURES, ids=lambda v: getattr(v, "name", str(v)))
def test_numpy_kernel_calls_do_what_kernel_emulate_does(kernel, dtype, out):
    """kernels.numpy_call prepares once what Kernel.emulate does per call: same bits out, for
    every dtype pair (bfloat16 computes in float32 and rounds once, a saturating kernel clamps,
    both through Kernel.reference_fn)."""
    assert_numpy_call_is_emulate(kernel, dtype, out)


class Total(iron.Kernel):
    """2**33 + the sum of x, as a Python int: not an array of the output's shape and dtype."""

    name = "total"

    @staticmethod
    def compute(x):
        return 2**33 + int(x.astype(np.int64).sum())


def test_a_user_kernel_returning_a_python_int_is_refused_as_kernel_emulate_refuses_it():
    with pytest.raises(KernelTypeError) as emulated:
        Total.emulate(np.int32, [np.ones(6, np.int32), np.zeros(6, np.int32)], (6,), {})
    with pytest.raises(KernelTypeError) as called:
        numpy_call(KernelStep.of(Total, np.int32, ()), [], [])([np.ones(6, np.int32), np.zeros(6, np.int32)], (6,), ())
    assert str(emulated.value) == str(called.value)
    quoted(called.value, "Total.compute()", "returned int", "(6,) int32", "result.astype(np.int32)")


def random_values(rng, dtype, n):
    """Integers over the dtype's whole range (so conversions saturate); floats normal * 4."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, n, endpoint=True).astype(dtype)
    return (rng.standard_normal(n) * 4).astype(dtype)


def assert_numpy_call_is_emulate(kernel, dtype, out=None):
    """numpy_call's call and Kernel.emulate write the same bits into one output."""
    dtype = np.dtype(dtype)
    out = kernel.out_dtype(dtype) if out is None else out
    sizes = SIZES.get(kernel.name, (6,))
    in_shapes, out_shape = kernel.abi_shapes(sizes)
    rng = np.random.default_rng(3)
    inputs = [random_values(rng, dtype, int(np.prod(s))) for s in in_shapes]
    start = rng.standard_normal(int(np.prod(out_shape))).astype(out)
    names = [name for name, _ in kernel.c_attrs]
    attrs = [ATTRS[name] for name in names]
    expected, got = start.copy(), start.copy()
    kernel.emulate(dtype, [*inputs, expected], sizes, dict(zip(names, attrs)))
    call = numpy_call(KernelStep.of(kernel, dtype, (), out), names, [])
    call([*(x.reshape(s) for x, s in zip(inputs, in_shapes)), got.reshape(out_shape)], sizes, attrs)
    np.testing.assert_array_equal(got, expected)


# ---- the host's side -----------------------------------------------------------------------------

def test_bindings_and_buffers_are_checked():
    emulator = Emulator(add_one_plan())
    with pytest.raises(ArgumentError) as err:
        emulator.buffer("trail")
    quoted(err.value, "'add_one'", "'trail'", "inputs, outputs, words")
    with pytest.raises(ArgumentError) as err:
        emulator.run(outputs=np.zeros(1024, np.float64))
    quoted(err.value, "run(outputs=...)", "'add_one'", "float64 of shape (1024,)", "1280 words", "uint32")
    mine = np.zeros(1280, np.int32)
    ints(emulator.buffer("inputs"))[:1024] = 41
    launch(emulator, outputs=mine)
    assert mine[:1024].tolist() == [42] * 1024 and ints(emulator.buffer("outputs")).tolist() == [0] * 1280


@pytest.mark.parametrize("argument", ["verilog", None])
def test_an_unknown_kernel_mode_is_refused(argument, monkeypatch):
    monkeypatch.setenv("IRON_EMULATOR_KERNELS", "verilog")
    with pytest.raises(BackendUnavailable) as err:
        Emulator(add_one_plan(), kernels=argument)
    quoted(err.value, "'verilog'", "kernels='numpy'", "kernels='native'", "IRON_EMULATOR_KERNELS")


# ---- replay --------------------------------------------------------------------------------------

def randomize(emulators, plan, rng):
    """The same random inputs, and scratchpad words in their bounds, in each emulator."""
    for b in plan.host_buffers:
        if b.role is HostRole.INPUTS:
            values = rng.integers(-1000, 1000, b.nwords, dtype=np.int32)
        elif b.role is HostRole.WORDS and plan.words:
            values = np.array([rng.integers(*(w.bound or (0, 100))) for w in plan.words], np.int32)
        else:
            continue
        for emulator in emulators:
            ints(emulator.buffer(b.name))[: values.size] = values


@pytest.mark.parametrize("build, replayed", [
    (add_one_plan, 28),
    (accumulate_plan, 27),
    (links_plan, 27),
    (lambda: links_plan(objects=6), 28),
    (fan_plan, 27),
    (transpose_plan, 28),
    (rows_plan, 27),
    (trail_plan, 28),
], ids=["add_one", "tally", "split_join", "split_join_6_objects", "broadcast", "transpose", "rows", "patched"])
def test_replayed_launches_move_and_compute_what_launches_run_task_by_task_do(build, replayed):
    """Once the launches repeat, the replayed ones leave every host buffer as the scheduler does."""
    plan = build()
    replaying, stepping = Emulator(plan), Emulator(plan, replay=False)
    rng = np.random.default_rng(0)
    for _ in range(30):
        randomize((replaying, stepping), plan, rng)
        launch(replaying)
        launch(stepping)
        for b in plan.host_buffers:
            np.testing.assert_array_equal(replaying.buffer(b.name), stepping.buffer(b.name))
    assert (replaying.launches, replaying.replayed, stepping.launches, stepping.replayed) == (30, replayed, 30, 0)


def test_an_emit_ring_replayed_feeds_each_run_the_next_scratchpad():
    emulator = Emulator(emit_plan("npu2"))
    ring = [np.zeros(2, np.uint32) for _ in range(3)]
    runs = [emulator.run(words=ring[k], feedback=ring[(k + 1) % 3]) for k in range(3)]
    ints(ring[0])[:] = [10, 3]
    for run in runs:
        emulator.start(run)
    seen = []
    for k in range(40):
        emulator.wait(runs[k % 3])
        seen.append(int(ints(runs[k % 3].buffers["feedback"])[0]))
        emulator.start(runs[k % 3])
    assert seen == [13 + 3 * k for k in range(40)] and emulator.launches == 40 and emulator.replayed == 37


def divide_plan():
    """out = 1000 // the per-call word d (delivered to the core from the scratchpad)."""
    divide = Function("divide", ("d", "out"), (ScalarStep(Ptr("out"), WordOp.FLOORDIV, Imm(1000), Load("d")),))
    program = stream("d", Port.CONSUME, stream("out", Port.PRODUCE, (Invoke("divide", ("d", "out")),)))
    sequence = (Dma(Direction.MM2S, "d", "words", 0, (1, 1, 1, 1), ROW, 0, SHIM),
                Dma(Direction.S2MM, "out", "outputs", 0, (1, 1, 1, 1), ROW, 1, SHIM), Wait("out"))
    return plan_of("divide", [Fifo("d", SHIM, (CORE,), 2, 4), Fifo("out", CORE, (SHIM,), 2, 4)],
                   [Core(CORE, "g0", program)], [divide], sequence, [HostBuffer("outputs", HostRole.OUTPUTS, 1)],
                   words=(WordDef(0, "d", WordKind.SCRATCHPAD),))


@pytest.mark.parametrize("replay, replayed", [(True, 7), (False, 0)])
def test_a_launch_failing_mid_way_fails_alike_replayed_or_not(replay, replayed):
    emulator = Emulator(divide_plan(), replay=replay)
    for d in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10):
        ints(emulator.buffer("words"))[0] = d
        launch(emulator)
        assert int(ints(emulator.buffer("outputs"))[0]) == 1000 // d
    assert emulator.replayed == replayed
    ints(emulator.buffer("words"))[0] = 0
    with pytest.raises(ArgumentError) as err:
        launch(emulator)
    why = quoted(err.value, "Function 'divide'", "step 0", "1000 floordiv 0", "divides by zero")
    with pytest.raises(PlanError) as again:
        launch(emulator)
    quoted(again.value, "'divide'", f"({why})", "new Emulator")


def loops_plan(inner):
    """Per launch, Loop(2, (Loop(inner, count at the inner index), count at the outer index)),
    then both counts to the host: `inner` counts, then 2."""
    def count(into):
        return Function(f"count_{into}", (into, "one"), (
            ScalarStep(Ptr("one"), WordOp.COPY, Imm(1)),
            KernelStep.of(Add, np.int32, (Ptr(into, 0, 4), Ptr("one"), Ptr(into, 0, 4), Imm(1))),
        ), blocked=True)
    report = Function("report", ("inner", "outer", "out"), (
        KernelStep.of(iron.kernels.Copy, np.int32, (Ptr("inner"), Ptr("out"), Imm(inner))),
        KernelStep.of(iron.kernels.Copy, np.int32, (Ptr("outer"), Ptr("out", 4 * inner), Imm(2))),
    ))
    program = (Loop(2, (Loop(inner, (Invoke("count_inner", ("inner", "one")),)), Invoke("count_outer", ("outer", "one")))),
               *stream("out", Port.PRODUCE, (Invoke("report", ("inner", "outer", "out")),)))
    rows = (4, (inner + 2) // 4) if inner > 1000 else (1, inner + 2)
    sequence = (Dma(Direction.S2MM, "out", "outputs", 0, (1, 1, *rows), (0, 0, rows[1], 1), 0, SHIM), Wait("out"))
    buffers = (Buffer("inner", CORE, 4 * inner), Buffer("outer", CORE, 8), Buffer("one", CORE, 4))
    return plan_of("loops", [Fifo("out", CORE, (SHIM,), 1, 4 * (inner + 2))], [Core(CORE, "g0", program)],
                   [count("inner"), count("outer"), report], sequence,
                   [HostBuffer("outputs", HostRole.OUTPUTS, inner + 2)], buffers=buffers)


@pytest.mark.parametrize("inner", [3, 3070])
def test_loops_unrolled_or_not_index_their_blocks(inner):
    """An inner Loop unrolled (3 x 2 steps) or not (3070 x 2 > UNROLLED): after it, the outer
    Loop's index is back."""
    assert (inner * 2 > UNROLLED) == (inner > 3)
    emulator = Emulator(loops_plan(inner))
    for k in range(1, 5):
        launch(emulator)
        assert ints(emulator.buffer("outputs")).tolist() == [2 * k] * inner + [k, k]
    assert emulator.replayed == 3


def test_launches_that_repeat_only_after_the_recorded_ones_all_run_task_by_task():
    """One object per launch through a FIFO of depth RECORDED + 1: the machine's state repeats
    every RECORDED + 1 launches, later than it looks, so no launch is replayed."""
    plus = Function("plus", ("x", "y"), (KernelStep.of(PlusOne, np.int32, (Ptr("x"), Ptr("y"), Imm(1))),))
    program = stream("in", Port.CONSUME, stream("out", Port.PRODUCE, (Invoke("plus", ("in", "out")),)))
    sequence = (Dma(Direction.MM2S, "in", "inputs", 0, (1, 1, 1, 1), ROW, 0, SHIM),
                Dma(Direction.S2MM, "out", "outputs", 0, (1, 1, 1, 1), ROW, 1, SHIM), Wait("out"))
    plan = plan_of("deep", [Fifo("in", SHIM, (CORE,), RECORDED + 1, 4), Fifo("out", CORE, (SHIM,), 2, 4)],
                   [Core(CORE, "g0", program)], [plus], sequence,
                   [HostBuffer("inputs", HostRole.INPUTS, 1), HostBuffer("outputs", HostRole.OUTPUTS, 1)])
    emulator = Emulator(plan)
    for k in range(RECORDED + 10):
        ints(emulator.buffer("inputs"))[0] = k
        launch(emulator)
        assert int(ints(emulator.buffer("outputs"))[0]) == k + 1
    assert (emulator.launches, emulator.replayed) == (RECORDED + 10, 0)


def test_a_core_halfway_through_its_program_is_part_of_the_state_that_repeats():
    """The core's program takes two launches (x + 1, then 2 x); its rings look the same after each."""
    plus = Function("plus", ("x", "y"), (KernelStep.of(PlusOne, np.int32, (Ptr("x"), Ptr("y"), Imm(1))),))
    double = Function("double", ("x", "y"), (KernelStep.of(Add, np.int32, (Ptr("x"), Ptr("x"), Ptr("y"), Imm(1))),))
    program = (*stream("in", Port.CONSUME, stream("out", Port.PRODUCE, (Invoke("plus", ("in", "out")),))),
               *stream("in", Port.CONSUME, stream("out", Port.PRODUCE, (Invoke("double", ("in", "out")),))))
    sequence = (Dma(Direction.MM2S, "in", "inputs", 0, (1, 1, 1, 1), ROW, 0, SHIM),
                Dma(Direction.S2MM, "out", "outputs", 0, (1, 1, 1, 1), ROW, 1, SHIM), Wait("out"))
    plan = plan_of("halves", [Fifo("in", SHIM, (CORE,), 1, 4), Fifo("out", CORE, (SHIM,), 1, 4)],
                   [Core(CORE, "g0", program)], [plus, double], sequence,
                   [HostBuffer("inputs", HostRole.INPUTS, 1), HostBuffer("outputs", HostRole.OUTPUTS, 1)])
    emulator = Emulator(plan)  # check_plan wants each launch to run the whole program
    seen = []
    for k in range(10):
        ints(emulator.buffer("inputs"))[0] = 10 + k
        launch(emulator)
        seen.append(int(ints(emulator.buffer("outputs"))[0]))
    assert seen == [11, 22, 13, 26, 15, 30, 17, 34, 19, 38] and emulator.replayed == 7


@pytest.mark.parametrize("replay", [True, False])
def test_launches_carrying_a_transfer_over_are_never_replayed(replay):
    """2 objects in per launch, 1 out: each launch leaves more of its MM2S for the next, and the
    words it moves late are the ones the host wrote by then (inputs 10 k, 10 k + 5 at launch k)."""
    plus = Function("plus", ("x", "y"), (KernelStep.of(PlusOne, np.int32, (Ptr("x"), Ptr("y"), Imm(1))),))
    program = stream("in", Port.CONSUME, stream("out", Port.PRODUCE, (Invoke("plus", ("in", "out")),)))
    sequence = (Dma(Direction.MM2S, "in", "inputs", 0, (1, 1, 1, 2), ROW, 0, SHIM),
                Dma(Direction.S2MM, "out", "outputs", 0, (1, 1, 1, 1), ROW, 1, SHIM), Wait("out"))
    plan = plan_of("backlog", [Fifo("in", SHIM, (CORE,), 2, 4), Fifo("out", CORE, (SHIM,), 2, 4)],
                   [Core(CORE, "g0", program)], [plus], sequence,
                   [HostBuffer("inputs", HostRole.INPUTS, 2), HostBuffer("outputs", HostRole.OUTPUTS, 1)])
    emulator = Emulator(plan, replay=replay)  # check_plan refuses the unequal counts
    seen = []
    for k in range(12):
        ints(emulator.buffer("inputs"))[:] = [10 * k, 10 * k + 5]
        launch(emulator)
        seen.append(int(ints(emulator.buffer("outputs"))[0]))
    assert seen == [1, 6, 11, 16, 21, 26, 31, 36, 41, 56, 61, 76] and emulator.replayed == 0
    assert [len(channel.queue) for channel in emulator.sequence.channels.values()] == [4, 0]


def test_a_mem_tile_buffer_that_only_relays_host_words_is_skipped_in_replay():
    """Copies out of a relay read the host words the Fill put there, unless a Drain into that
    host buffer came in between, the words came from an earlier launch, or a tile wrote it."""
    relay, core = tile.Buffer("w_cons_buff_0", 64), tile.Buffer("w0_cons_buff_0", 32)
    hosts = ["consts", "states", "consts"]
    fill = Fill(0, 16, 16, relay, 0)
    skipped = relayed([[fill, Copy(core, 0, relay, 8, 8), Drain(1, 0, 8, core, 0)]], {relay}, hosts)
    assert [(type(a).__name__, getattr(a, "op", None), getattr(a, "moved", None), getattr(a, "into", None))
            for a in skipped[0]] == [("Fill", 0, 24, core), ("Drain", 1, 0, None)]
    drained_between = [[fill, Drain(2, 0, 8, core, 0), Copy(core, 0, relay, 8, 8)]]
    assert relayed(drained_between, {relay}, hosts) == drained_between
    next_launch = [[fill], [Copy(core, 0, relay, 8, 8)]]
    assert relayed(next_launch, {relay}, hosts) == next_launch
    tile_written = [[Copy(relay, 0, core, 0, 8), Copy(core, 0, relay, 0, 8)]]
    assert relayed(tile_written, {relay}, hosts) == tile_written


class Reads:
    """A kernel call standing in for a real one: it takes strided inputs."""

    strided_inputs = True


def invoked(source, out, reads_out=False):
    """A call reading words 0..8 of tile buffer `source` into words 0..8 of `out`."""
    step = Step(lambda: None, Reads(), (source.shaped(0, (8,)), out.shaped(0, (8,))), (8,), (), reads_out)
    return Invoked(step.run, (step,), (source, out))


def test_a_core_buffer_only_read_by_kernels_from_host_words_is_not_filled_in_replay():
    """A kernel input whose words a Fill of the same launch put there reads the host words in
    place and the Fill goes; not when the buffer is also read otherwise (a Copy, a Drain, as an
    accumulating kernel's destination), when a Drain into that host buffer came in between, or
    when the words came from an earlier launch."""
    x, y = tile.Buffer("x_cons_buff_0", 32), tile.Buffer("y_buff_0", 32)
    hosts = ["consts", "outputs"]
    fill, call = Fill(0, 0, 8, x, 0), invoked(x, y)
    ((kept,),) = forwarded([[fill, call]], hosts)
    assert type(kept) is Forwarded and kept.invoked is call and kept.reads == {(0, 0): fill}
    unchanged = [
        [[fill, call, Copy(y, 0, x, 0, 8)]],
        [[fill, call, Drain(1, 0, 8, x, 0)]],
        [[fill, invoked(y, x, reads_out=True), call]],
        [[fill, Drain(0, 0, 8, y, 0), call]],
        [[fill], [call]],
    ]
    for cycle in unchanged:
        assert forwarded(cycle, ["consts", "consts"]) == cycle
