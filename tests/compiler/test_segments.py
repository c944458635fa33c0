"""Segments (iron/compiler/segment.py): a design that needs more compute tiles, DMA channels or
tile memory than the device has is cut in program order by `fewest_bytes_cut`; values crossing a
cut go through the compiler's DDR buffers (CUT placements), weights, params and states stay in
their host buffers. Plan facts pinned; every design run on the emulator (each segment loaded
afresh) against reference(); the npu2 full ELF's @main, the npu1 builds and XRT runs checked
against the fake toolchain and the pyxrt stand-in; and what cannot fit even as segments."""
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron import Carried
from iron.compiler.compile import compile_program, try_groups
from iron.compiler.fuse import fuse
from iron.compiler.place import place
from iron.compiler.route import route
from iron.compiler.segment import CUT_WINDOW, Flow, Segment, fewest_bytes_cut
from iron.compiler.shims import ShimShortfall, shim_shortfall
from iron.compiler.words import WordTable
from iron.errors import DoesNotFit, PlacementError
from iron.kernels import Add, Argmax, Copy, Exp, MatMul, MatVec, ReLU, Sigmoid, SiLU, Softmax, Tanh
from iron.plan.describe import describe
from iron.plan.fifos import FifoId, Stem
from iron.plan.mlir import ALLOWED_OPS, segment_modules
from iron.plan.plan import Choice, Cut, PlacementKind, Plan, TileKind
from iron.plan.rules import Rule
from iron.runtime.emulator import Configurations, Emulator
from tests.fake_toolchain import FLAGS_GET, install_fakes, make_hermetic, recorded_argv
from tests.plan.test_mlir import op_names
from tests.quotes import quoted

F32 = np.float32
N = 16


def fewest_cut(*args, **kwargs):
    """`fewest_bytes_cut`'s stop, its estimates on npu1."""
    return fewest_bytes_cut(*args, device=from_name("npu1"), **kwargs)[0]


@pytest.fixture(autouse=True)
def emulator(monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "emulator")


class Five(iron.Graph):
    """Five different kernels on x: five groups, nothing crossing, no two alike (alike ones would
    run over time on one core: repeat_over_time, tests/compiler/test_repeat.py)."""

    def body(self, x):
        return tuple(kernel.step(x) for kernel in (Exp, SiLU, Sigmoid, Tanh, ReLU))


class Ladder(iron.Graph):
    """a -> b -> c -> d (twice as long) -> MatVec(d) + a: cutting before g3 sends a and c across
    (128 bytes), before g4 a and d (192 bytes). b is a ReLU of its MatVec, so no two groups in a
    row are alike (alike ones would run over time on one core: repeat_over_time)."""

    def __init__(self):
        rng = np.random.default_rng(1)
        shapes = [(N, N), (N, N), (N, N), (2 * N, N), (N, 2 * N)]
        self.w = [iron.param(rng.standard_normal(s).astype(F32)) for s in shapes]

    def body(self, x):
        a = MatVec.step(self.w[0], x)
        d = MatVec.step(self.w[3], MatVec.step(self.w[2], ReLU.step(MatVec.step(self.w[1], a))))
        return Add.step(MatVec.step(self.w[4], d), a)


class Relay(iron.Graph):
    """x copied into state a, a's ReLU into b, b's Exp into c: each group reads the state the one
    before wrote (three different kernels: alike groups would run over time)."""

    def __init__(self):
        self.a, self.b, self.c = (iron.state((8,), F32, name=name) for name in "abc")

    def body(self, x):
        Copy.step(x, out=self.a)
        ReLU.step(self.a, out=self.b)
        Exp.step(self.b, out=self.c)


class Hops(iron.Graph):
    """i -> succ[i], writing c[(i + k) % 8] into seen[k] for k < 5: six groups, the carried
    element in the last."""

    def __init__(self):
        self.succ = iron.weight(np.array([3, 0, 1, 2, 7, 4, 5, 6], np.int32))
        self.c = iron.weight((np.arange(8, dtype=np.int32) + 1) * 10)
        self.seen = iron.state((5,), np.int32, name="seen")

    def body(self, *, i: Carried[np.int32]):
        for k in range(5):
            Copy.step(self.c[(i + k) % 8], out=self.seen[k])
        return iron.carry(i=Copy.step(self.succ[i], dtype=np.int32))


def segments_of(plan) -> list[list[str]]:
    return [[name for name, _ in s.groups] for s in plan.segments]


def test_more_groups_than_tiles_run_as_segments():
    plan = compile_program(Five().trace(x=((8,), F32)), from_name("npu1_1col"))
    assert segments_of(plan) == [["g0", "g1", "g2", "g3"], ["g4"]]
    assert [len(s.cores) for s in plan.segments] == [4, 1]
    assert plan.cuts == (Cut("g4", 0, ()),)
    assert plan.rules[0] == (Rule.FEWEST_BYTES_CUT, "cut before g4: 0 bytes cross (nothing)")
    x = np.linspace(-1, 1, 8, dtype=F32)
    compiled = Five().compile(x=((8,), F32), device="npu1_1col")
    for got, expected in zip(compiled(x), Five().reference(x)):
        np.testing.assert_array_equal(got, expected)


def test_the_cut_with_fewer_bytes_crossing_wins_and_crossing_values_go_through_ddr():
    graph = Ladder()
    compiled = graph.compile(x=((N,), F32), device="npu1_1col")
    plan = compiled.plan
    assert segments_of(plan) == [["g0", "g1", "g2"], ["g3", "g4"]]
    assert plan.cuts == (Cut("g3", 128, ("MatVec#0", "MatVec#3")),)
    cuts = [(p.name, p.buffer, p.offset, p.shape) for p in plan.placements if p.kind is PlacementKind.CUT]
    assert cuts == [("cut.MatVec#0", "outputs", 16, (16,)), ("cut.MatVec#3", "outputs", 32, (16,))]
    x = np.linspace(-1, 1, N, dtype=F32)
    np.testing.assert_allclose(compiled(x), graph.reference(x), rtol=1e-6, atol=1e-5)


class Viewed(iron.Graph):
    """y = Exp(x), four MatVecs of x, then y[8:] + y[:8] + h[:8]: views of results made before the cut."""

    def __init__(self):
        rng = np.random.default_rng(2)
        self.w = [iron.param((rng.standard_normal((N, N)) / 4).astype(F32)) for _ in range(4)]

    def body(self, x):
        y, h = Exp.step(x), x
        for w in self.w:
            h = MatVec.step(w, h)
        return Add.step(Add.step(y[8:], y[:8]), h[:8])


def test_views_of_results_made_before_a_cut_read_their_ddr_buffer():
    graph = Viewed()
    compiled = graph.compile(x=((N,), F32), device="npu1_1col")
    assert segments_of(compiled.plan) == [["g0", "g1", "g2", "g3"], ["g4", "g5"]]
    assert compiled.plan.cuts == (Cut("g4", 128, ("Exp#0", "MatVec#3")),)
    x = np.linspace(-1, 1, N, dtype=F32)
    np.testing.assert_array_equal(compiled(x), graph.reference(x))


def test_what_a_segment_sends_on_is_shown_by_its_ddr_buffer_and_the_design_outputs_by_their_own_names():
    ladder = Ladder().compile(x=((N,), F32), device="npu1_1col").plan
    assert [(s.holds[FifoId("g0", Stem.HOST)], s.holds[FifoId("g2", Stem.HOST)]) for s in ladder.segments[:1]] == [("cut.MatVec#0", "cut.MatVec#3")]
    assert ladder.segments[1].holds[FifoId("g3", Stem.IN)] == "w.3, cut.MatVec#3"   # read from the buffer it was written to
    assert ladder.segments[1].holds[FifoId("g4", Stem.HOST)] == "out0"
    five = compile_program(Five().trace(x=((8,), F32)), from_name("npu1_1col"))
    assert five.segments[1].holds[FifoId("g4", Stem.HOST)] == "out4"   # the segment's only output is the design's out4


def test_the_rule_on_its_own_ends_a_segment_at_the_fewest_bytes_in_its_last_quarter():
    program = Ladder().trace(x=((N,), F32))
    flow = Flow(program, fuse(program))
    assert [flow.crossing_bytes(cut) for cut in range(1, 5)] == [64, 128, 128, 192]
    assert fewest_cut(flow, 0, lambda stop: stop <= 4) == 3     # 4 fit; 3 sends 128 bytes, 4 sends 192
    assert fewest_cut(flow, 0, lambda stop: stop <= 2) == 2     # a window of one: the most that fit
    assert fewest_cut(flow, 0, lambda stop: True) == 5          # the rest fits: one segment
    assert fewest_cut(flow, 1, lambda stop: stop <= 4, guess=3) == 4   # 3 groups fit: their last quarter is the last
    assert fewest_cut(flow, 0, lambda stop: False) is None      # group 0 alone does not fit
    assert fewest_bytes_cut(flow, 0, lambda stop: True, device=from_name("npu1")) == (5, None)   # no cut to choose
    stop, choice = fewest_bytes_cut(flow, 0, lambda stop: stop <= 4, device=from_name("npu1"))
    assert (stop, choice.chosen, choice.rejected) == (3, "before g3 (128 bytes cross)", "before g4 (192 bytes cross)")
    # compiled on one column, the first segment takes 4 groups: of the cuts in their last quarter, before g3
    # sends 128 bytes through DDR and back (written, then read: 256 bytes at 70 GB/s), before g4 192
    plan = Ladder().compile(x=((N,), F32), device="npu1_1col").plan
    assert plan.choices[:1] == (("cut before g3", Choice(Rule.FEWEST_BYTES_CUT, "cut", "before g3 (128 bytes cross)",
                                                     pytest.approx(256 / 70), "before g4 (192 bytes cross)",
                                                     pytest.approx(384 / 70))),)
    assert "  cut before g3: fewest_bytes_cut: cut chosen by estimated time" in describe(plan)


def test_states_written_in_one_segment_are_read_from_ddr_in_the_next():
    graph = Relay()
    compiled = graph.compile(x=((8,), F32), device="npu1_1col")
    assert segments_of(compiled.plan) == [["g0", "g1"], ["g2"]]
    x = np.arange(8, dtype=F32)
    compiled(x)
    graph.reference(x)
    for name in "abc":
        np.testing.assert_array_equal(compiled.read(name), graph.read(name))


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_a_carried_loop_over_a_segmented_body_follows_the_reference(depth):
    body = Hops().compile(device="npu2_1col")
    assert segments_of(body.plan) == [["g0", "g1"], ["g2", "g3"], ["g4", "g5"]]
    assert body.plan.segments[-1].emit is not None and all(s.emit is None for s in body.plan.segments[:-1])
    loop = iron.CarriedLoop(body, body, depth=depth)
    assert list(loop.run(5, i=1)) == list(range(5))
    reference, carry = Hops(), {"i": 1}
    for _ in range(6):
        carry = dict(reference.reference(**carry))
    assert dict(loop.carry) == carry == {"i": 3}
    np.testing.assert_array_equal(body.read("seen"), reference.read("seen"))
    np.testing.assert_array_equal(body.read("seen"), [10, 20, 30, 40, 50])


class Early(iron.Graph):
    """Hops with the carried i computed first: five Copy calls into `seen` after it."""

    def __init__(self, copied: bool):
        self.copied = copied
        self.succ = iron.weight(np.array([3, 0, 1, 2, 7, 4, 5, 6], np.int32))
        self.c = iron.weight((np.arange(8, dtype=np.int32) + 1) * 10)
        self.seen = iron.state((5,), np.int32, name="seen")

    def body(self, *, i: Carried[np.int32]):
        nxt = Copy.step(self.succ[i], dtype=np.int32)
        for k in range(5):
            Copy.step(self.c[(i + k) % 8], out=self.seen[k])
        return iron.carry(i=Copy.step(nxt) if self.copied else nxt)


def early_rule(label: str, made: str, name: str) -> tuple[str, str]:
    return (Rule.CARRY_FROM_EARLIER_SEGMENT,
            f"{label} copies {name}, the element {made} computes before the last segment, from its DDR buffer "
            f"cut.{made} into the last segment, where the next carried values are taken")


def test_a_carried_element_computed_before_the_last_segment_is_copied_into_it():
    """Early carries Copy#0's element, made in segment 0: the compiler appends Copy#6 (group g6)
    to the last segment, reading it from its DDR buffer; run host-driven on npu1 (one xclbin
    per segment, the host takes the carry from the last one's outputs) and npu2, equal to reference()."""
    for device in ("npu1_1col", "npu2_1col"):
        body = Early(copied=False).compile(device=device)
        assert segments_of(body.plan) == [["g0", "g1", "g2"], ["g3", "g4"], ["g5", "g6"]]
        assert body.plan.groups[0] == ("g0", ("Copy#0",)) and body.plan.groups[-1] == ("g6", ("Copy#6",))
        assert early_rule("Copy#6", "Copy#0", "i") in body.plan.rules
        assert (Rule.CARRY_FROM_EARLIER_SEGMENT, "g5 closed before Copy#6") in body.plan.segments[-1].rules
        nxt, reference, carry = iron.Carry(i=1), Early(copied=False), {"i": 1}
        for _ in range(6):
            nxt, carry = body(**nxt), dict(reference.reference(**carry))
            assert dict(nxt) == carry
        np.testing.assert_array_equal(body.read("seen"), reference.read("seen"))
    mine = Early(copied=True).compile(device="npu2_1col").plan   # the user's own Copy is in the last segment
    assert not [r for r in mine.rules if r[0] == Rule.CARRY_FROM_EARLIER_SEGMENT]


class Greedy(iron.Graph):
    """R9 of issue 10: gather a row, MatVec, Argmax, record the token; the carried token is the
    Argmax (segment 0 on npu2_1col), its record and the next position the last segment. w picks
    the token PERM[tok], exactly in float32 and bfloat16."""

    PERM = [3, 5, 0, 7, 1, 6, 2, 4]

    def __init__(self, dt):
        emb, w = np.zeros((8, 16), dt), np.zeros((8, 16), dt)
        emb[np.arange(8), 2 * np.arange(8)] = 1
        w[self.PERM, 2 * np.arange(8)] = 1
        self.emb, self.w = iron.weight(emb), iron.param(w)
        self.tokens = iron.state((8,), np.int32, name="tokens")

    def body(self, *, tok: Carried[np.int32], pos: Carried[np.int32]):
        nxt = Argmax.step(MatVec.step(self.w, Copy.step(self.emb[tok])))
        Copy.step(nxt, out=self.tokens[pos])
        return iron.carry(tok=nxt, pos=pos + 1)


@pytest.mark.parametrize("dt", [F32, iron.bfloat16], ids=["float32", "bfloat16"])
def test_greedy_decoding_carrying_an_argmax_of_an_earlier_segment_runs_as_a_device_loop(dt):
    body = Greedy(dt).compile(device="npu2_1col")
    plan = body.plan
    assert segments_of(plan) == [["g0", "g1", "g2"], ["g3", "g4"]]
    assert plan.groups == (("g0", ("Copy#0",)), ("g1", ("MatVec#1",)), ("g2", ("Argmax#2",)),
                           ("g3", ("Copy#3",)), ("g4", ("Copy#4",)))
    assert plan.rules[:2] == ((Rule.FEWEST_BYTES_CUT, "cut before g3: 4 bytes cross (Argmax#2)"),
                              early_rule("Copy#4", "Argmax#2", "tok"))
    assert plan.closed_by["g3"] is Rule.CARRY_FROM_EARLIER_SEGMENT
    text = body.mlir
    assert set(op_names(text)) <= ALLOWED_OPS, sorted(set(op_names(text)) - ALLOWED_OPS)
    reference, carry, tokens = Greedy(dt), {"tok": 1, "pos": 0}, []
    for _ in range(8):
        carry = dict(reference.reference(**carry))
        tokens.append(carry["tok"])
    assert tokens == [5, 6, 2, 0, 3, 7, 4, 1]
    for depth in (1, 2, 3):
        loop = iron.CarriedLoop(body, body, depth=depth)
        body.write("tokens", np.zeros(8, np.int32))
        assert list(loop.run(7, tok=1, pos=0)) == list(range(7))
        assert dict(loop.carry) == carry
        assert body.read("tokens").tolist() == reference.read("tokens").tolist() == tokens


def test_a_segmented_full_elf_runs_through_xrt_host_driven_and_as_a_device_loop(xrt):
    body = Hops().compile(device="npu2_1col")
    nxt = iron.Carry(i=1)
    for _ in range(3):
        nxt = body(**nxt)
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(3, **nxt)) == [0, 1, 2]
    reference, carry = Hops(), {"i": 1}
    for _ in range(7):
        carry = dict(reference.reference(**carry))
    assert dict(loop.carry) == carry
    np.testing.assert_array_equal(body.read("seen"), reference.read("seen"))
    assert sum(c.startswith("hw_context(") for c in xrt.fake_state.calls) == 1   # one ELF, one context


def test_each_configuration_starts_with_its_tile_memory_cleared(monkeypatch):
    plan = Ladder().compile(x=((N,), F32), device="npu1_1col").plan
    loaded = Configurations(plan)
    seen = []
    start = Emulator.start

    def record(self, run):
        seen.append(all(not b.data.any() for t in self.tiles.values() for b in t.buffers.values()))
        start(self, run)

    monkeypatch.setattr(Emulator, "start", record)
    for _ in range(2):
        run = loaded.run()
        loaded.buffer("consts")[:] = 0x3F800000   # weights of 1.0: every tile computes non-zero values
        loaded.start(run)
        loaded.wait(run)
    assert seen == [True, True, True, True]
    assert loaded.launches == 2
    assert any(b.data.any() for s in loaded.segments for t in s.tiles.values() for b in t.buffers.values())


def test_replayed_configurations_equal_configurations_run_task_by_task(monkeypatch):
    """Once a segmented design's launches replay, each segment clears only the tile buffers its
    replayed actions touch (not a mem-tile buffer that only relays host words), and every host
    buffer stays bit for bit what launches run task by task (clearing all) leave, call after call."""
    plan = Ladder().compile(x=((N,), F32), device="npu1_1col").plan
    replaying, stepping = Configurations(plan), Configurations(plan, replay=False)
    cleared = []
    start = Emulator.start

    def record(self, run):
        replayed = self._replay is not None and self._replay.cycle is not None
        buffers = self._replay.touched if replayed else self._tile_buffers
        cleared.append((replayed, len(buffers), all(not b.data.any() for b in buffers)))
        start(self, run)

    monkeypatch.setattr(Emulator, "start", record)
    rng = np.random.default_rng(5)
    consts = rng.standard_normal(replaying.buffer("consts").size).astype(F32).view(np.uint32)
    for _ in range(8):
        inputs = rng.standard_normal(replaying.buffer("inputs").size).astype(F32).view(np.uint32)
        for loaded in (replaying, stepping):
            loaded.buffer("consts")[:], loaded.buffer("inputs")[:] = consts, inputs
            run = loaded.run()
            loaded.start(run)
            loaded.wait(run)
        for b in plan.host_buffers:
            np.testing.assert_array_equal(replaying.buffer(b.name), stepping.buffer(b.name))
    assert (len(plan.segments), replaying.replayed, stepping.replayed) == (2, 2 * 5, 0)
    # (replayed, buffers cleared, all zero when the launch starts): the replayed launches leave
    # out the buffers whose words the kernels read from the host in place
    assert sorted(set(cleared)) == [(False, 9, True), (False, 17, True), (True, 5, True), (True, 9, True)]
    assert sum(replayed for replayed, _, _ in cleared) == 10


def test_npu2_segments_are_one_module_whose_main_configures_and_runs_each():
    plan = compile_program(Five().trace(x=((8,), F32)), from_name("npu2_1col"))
    (text,) = segment_modules(plan)
    args = "%arg0, %arg1, %arg2, %arg3, %arg4"
    types = "memref<1xi32>, memref<1xi32>, memref<8xi32>, memref<40xi32>, memref<1xi32>"
    assert text.splitlines()[:9] == [
        "module {",
        "  aie.device(npu2_1col) @main {",
        "    aie.runtime_sequence @sequence(%arg0: memref<1xi32>, %arg1: memref<1xi32>, %arg2: memref<8xi32>, "
        "%arg3: memref<40xi32>, %arg4: memref<1xi32>) {",
        "      aiex.configure @seg0 {",
        f"        aiex.run @seg0_sequence({args}) : ({types})",
        "      }",
        "      aiex.configure @seg1 {",
        f"        aiex.run @seg1_sequence({args}) : ({types})",
        "      }",
    ]
    assert re.findall(r"aie\.device\(npu2_1col\) @(\w+)", text) == ["main", "seg0", "seg1"]
    assert re.findall(r"aie\.runtime_sequence @(\w+)", text) == ["sequence", "seg0_sequence", "seg1_sequence"]
    assert set(op_names(text)) <= ALLOWED_OPS, sorted(set(op_names(text)) - ALLOWED_OPS)


def test_npu1_builds_one_xclbin_per_segment(tmp_path, monkeypatch):
    make_hermetic(monkeypatch, tmp_path)
    bin_dir = install_fakes(monkeypatch, tmp_path, FLAGS_GET)
    monkeypatch.setenv("IRON_CACHE_DIR", str(tmp_path / "cache"))
    compiled = Five().compile(x=((8,), F32), device="npu1_1col")
    built = compiled.build(progress=lambda *_: None)
    assert [a.image for a in built] == ["xclbin", "xclbin"]
    assert built[0].directory != built[1].directory
    aiecc = [argv for argv in recorded_argv(tmp_path) if argv[0] == f"{bin_dir}/aiecc" and argv[1] != "--help"]
    assert [argv[-1].rsplit("/", 1)[1] for argv in aiecc] == ["design.mlir", "design.mlir"]
    for artifacts, segment in zip(built, compiled.plan.segments):
        assert (artifacts.directory / "design.mlir").read_text() == segment_modules(compiled.plan)[
            compiled.plan.segments.index(segment)]


def test_npu1_segments_run_in_order_through_xrt_within_one_call(xrt_npu1):
    graph = Ladder()
    compiled = graph.compile(x=((N,), F32), device="npu1_1col")
    x = np.linspace(-1, 1, N, dtype=F32)
    for _ in range(2):
        np.testing.assert_allclose(compiled(x), graph.reference(x), rtol=1e-6, atol=1e-5)
    assert xrt_npu1.ran == [0, 1, 0, 1]
    contexts = [c for c in xrt_npu1.fake.fake_state.calls if c.startswith("hw_context(")]
    assert len(contexts) == 2


def test_npu1_segments_patch_their_per_call_offsets_through_xrt(xrt_npu1):
    """Each segment's instruction stream gets this call's DMA offsets (c[(i + k) % 8], succ[i])
    patched in from the call's words."""
    body = Hops().compile(device="npu1_1col")
    nxt, reference, carry = iron.Carry(i=1), Hops(), {"i": 1}
    for _ in range(3):
        nxt, carry = body(**nxt), dict(reference.reference(**carry))
        assert dict(nxt) == carry
    np.testing.assert_array_equal(body.read("seen"), reference.read("seen"))
    assert xrt_npu1.ran == list(range(len(body.plan.segments))) * 3


class Swollen(iron.Graph):
    """A small Exp, then a Softmax of a 64 KiB row: the Softmax alone is more than a tile holds
    (an Add that large would stream in blocks: tests/compiler/test_tiling.py)."""

    def body(self, x, y):
        return Exp.step(x), Softmax.step(y)


def test_a_group_too_large_even_alone_does_not_fit_and_nothing_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("IRON_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(DoesNotFit) as err:
        Swollen().compile(x=((8,), F32), y=((16384,), F32))
    quoted(err.value, "Swollen", "npu2", "Softmax#1 (group g1)", "16384 float32", "131072 bytes", "64512",
           "at most 8064 elements")
    assert not (tmp_path / "cache").exists()


class OddRows(iron.Graph):
    """Five Exp calls, then a gather of one 2-byte bfloat16 element at a per-call index: the
    gather's group alone is refused for the index, whatever the cuts (a table of rows is not:
    tests/compiler/test_row_words.py)."""

    def __init__(self):
        self.table = iron.weight(np.ones(12, iron.bfloat16))

    def body(self, x, *, row: iron.Scratchpad[np.int32]):
        return (*(Exp.step(x) for _ in range(5)), Copy.step(self.table[row]))


def test_a_group_refused_alone_for_its_index_is_refused_for_that_not_for_the_tile_count():
    # the segmented search once raised the whole design's refusal: "needs 6 compute tiles but
    # npu2_1col has 4", though no device has tiles enough to mend a misaligned index
    with pytest.raises(PlacementError) as err:
        OddRows().compile(x=((8,), F32), device=from_name("npu2_1col"))
    text = quoted(err.value, "table[row]", "weight 'table'", "'row'", "2 bytes", "4-byte words", "Pad 'table'")
    assert "compute tiles" not in text


def guide_decoder():
    """Section 8's decoder module (guide folders are not packages)."""
    path = Path(__file__).resolve().parents[2] / "programming_guide" / "section-8" / "decoder.py"
    spec = importlib.util.spec_from_file_location("decoder", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DECODER_SIZE = {"vocab": 512, "width": 256, "hidden": 1024, "context": 128}   # bench/scale.py's


def test_the_8_layer_decoder_is_cut_in_five():
    # spread in space (over_time=False); by default 7 of its layers loop on one layer's tiles (test_repeat.py)
    plan = compile_program(guide_decoder().Decoder(8, **DECODER_SIZE).trace(), from_name("npu2"), over_time=False)
    assert [s.groups[0][0] for s in plan.segments] == ["g0", "g19", "g39", "g55", "g74"]
    computes = [len({c.tile for c in s.cores if c.tile.kind is TileKind.COMPUTE}) for s in plan.segments]
    assert computes == [23, 24, 17, 23, 23]   # each projection within its share of the tiles (`Left.tiles`)
    # the residual, 256 float32; once with the scores a Softmax's group sends on
    assert [(c.nbytes, len(c.values)) for c in plan.cuts] == [(1024, 1), (1536, 2), (1024, 1), (1024, 1)]
    assert plan.cuts[:2] == (Cut("g19", 1024, ("Add#29",)), Cut("g39", 1536, ("Add#51", "Softmax#60")))


def test_segments_of_the_same_structure_answer_for_each_other_and_leave_the_plan_as_it_was(monkeypatch):
    program = guide_decoder().Decoder(8, **DECODER_SIZE).trace()
    flow = Flow(program, fuse(program))
    # layer 0 reads the embedding's Add (group 0), a later layer the one before's last group
    assert flow.structures[15:26] == flow.structures[26:37] != flow.structures[4:15]
    assert flow.structures[26:37] == (4, 5, 6, 14, 8, 9, 10, 8, 11, 12, 13)
    # groups 17-19 of layer 1 (MatVec, MatVec + Add, RMSNorm) send Add#29 and RMSNorm#30 on
    assert flow.structure(Segment(17, 20)) == flow.structure(Segment(39, 42)) == ((6, 14, 8), ((1, 1), (2, 0)))
    assert flow.structure(Segment(17, 21)) == ((6, 14, 8, 9), ((1, 1), (3, 1)))   # Add#29 and SiLU#32
    assert flow.structure(Segment(6, 9)) == ((6, 7, 8), ((1, 1), (2, 0)))
    assert flow.structure(Segment(len(flow.groups) - 1, len(flow.groups))) is None   # the last carries

    compiled = []
    try_groups = iron.compiler.compile.try_groups
    monkeypatch.setattr(iron.compiler.compile, "try_groups",
                        lambda *a, **k: compiled.append(1) or try_groups(*a, **k))
    remembered = compile_program(program, from_name("npu2"), over_time=False)
    probes = len(compiled)
    monkeypatch.setattr(Flow, "structure", lambda self, segment: None)   # every probe compiled
    compiled.clear()
    every = compile_program(guide_decoder().Decoder(8, **DECODER_SIZE).trace(), from_name("npu2"), over_time=False)
    assert repr(remembered) == repr(every)
    assert (probes, len(compiled)) == (14, 14)   # whole design + probes + the kept segments


def test_the_search_settles_on_the_cut_the_rule_defines_whatever_it_is_told_and_probes_little():
    program = guide_decoder().Decoder(8, **DECODER_SIZE).trace()
    flow = Flow(program, fuse(program))
    count, tiles = len(flow.groups), 32

    def by_definition(start: int, most: int) -> int | None:   # the rule read literally
        if most == start:
            return None
        if most == count:
            return count
        window = range(most - (most - start) // CUT_WINDOW, most + 1)
        return min(window, key=lambda c: (flow.crossing_bytes(c), -c))

    for start in (0, 19, 33, 66, 85):
        for most in range(start, min(count, start + tiles) + 1):
            every = range(start + 1, count + 2)
            told = ({}, {s: most for s in every}, {s: start + 1 for s in every}, {s: s - 1 for s in every})
            for guess in (None, 1, 14, 19, 40):
                for likely in told:
                    probed = []
                    found = fewest_cut(flow, start, lambda s, probed=probed, most=most: probed.append(s) or s <= most,
                                             guess, tiles, dict(likely))
                    assert found == by_definition(start, most), (start, most, guess, likely.get(count))
                    assert all(start < s <= start + tiles for s in probed) and len(set(probed)) == len(probed)
    # the 2-layer decoder's first segment as compile_program searches it: the whole design (26
    # groups, answered at once: it was refused before the search) and 22 groups are refused, each
    # saying 21 likely fit; then 19 fit, the cut (1024 bytes cross there) for 19, 20 or 21 fitting
    program = guide_decoder().Decoder(2, **DECODER_SIZE).trace()
    probed = []
    found = fewest_cut(Flow(program, fuse(program)), 0, lambda s: probed.append(s) or s <= 21, None, tiles,
                             {26: 21, 22: 21})
    assert (found, probed) == (19, [26, 22, 19])


def test_compile_program_runs_the_passes_four_times_on_the_2_layer_decoder(monkeypatch):
    seen = []

    def recorded(program, groups, *args, **kw):
        outcome = try_groups(program, groups, *args, **kw)
        seen.append((len(groups), outcome if isinstance(outcome, ShimShortfall) else type(outcome)))
        return outcome

    monkeypatch.setattr(iron.compiler.compile, "try_groups", recorded)
    plan = compile_program(guide_decoder().Decoder(2, **DECODER_SIZE).trace(), from_name("npu2"))
    assert [s.groups[0][0] for s in plan.segments] == ["g0", "g19"]
    assert seen == [(26, ShimShortfall(21)), (22, ShimShortfall(21)), (19, Plan), (7, Plan)]


def test_shim_channels_bound_refuses_only_what_the_passes_refuse_for_lack_of_shim_channels():
    program, device = guide_decoder().Decoder(2, **DECODER_SIZE).trace(), from_name("npu2")
    groups = fuse(program)
    flow = Flow(program, groups)
    assert shim_shortfall(route(program, place(program, groups, device)), device) == ShimShortfall(21)
    refused = []
    for stop in range(1, len(groups)):
        sub = flow.segment_program(Segment(0, stop))
        placements = flow.segment_placements(Segment(0, stop), flow.placements(flow.crossing(stop)))
        bound, passes = (try_groups(*sub, device, None, WordTable(program), placements, bound=b) for b in (True, False))
        if isinstance(bound, ShimShortfall):
            refused.append(stop)
            assert isinstance(passes, PlacementError) and "shim MM2S channels but npu2 has 16" in str(passes)
        else:
            assert repr(bound) == repr(passes)
    assert refused == [22, 23, 24, 25]   # the passes refuse these too; 19 to 21 fit


class ProductAndActivation(iron.Graph):
    """Returns SiLU(A @ B) and A @ B: the product is a design output and a later group reads it."""

    def __init__(self, b):
        self.b = iron.weight(b)

    def body(self, a):
        product = MatMul.step(a, self.b)
        return SiLU.step(product), product


@pytest.mark.parametrize("device, side, tiles, padded", [
    ("npu2", 64, [32, 1], None), ("npu2", 509, [32, 32], (512, 512)), ("npu1", 509, [16, 16], (512, 512))])
def test_a_product_the_host_and_a_later_segment_read_is_written_once_to_its_outputs_bytes(device, side, tiles, padded):
    """The grid writes the product to out1 once; the next segment reads the cut from those same
    bytes (its CUT placement lies on out1's), so a tiled product may be an output and be read on
    (at 509 padded by pad_to_block: the host reads out1's user region, SiLU its padded layout)."""
    rng = np.random.default_rng(12)
    a, b = (rng.standard_normal((side, side)).astype(F32) / 8 for _ in range(2))
    graph = ProductAndActivation(b)
    body = graph.compile(a=a, device=from_name(device))
    assert [len(p.cores) for p in body.plan.configurations] == tiles
    out1, cut = (next(p for p in body.plan.placements if p.name == name) for name in ("out1", "cut.MatMul#0"))
    assert (cut.kind, cut.buffer, cut.offset, cut.padded) == (PlacementKind.CUT, out1.buffer, out1.offset, padded)
    for got, want in zip(body(a=a), graph.reference(a=a)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
