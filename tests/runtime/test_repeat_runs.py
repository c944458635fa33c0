"""Repetition over time on the emulator (iron/compiler/repeat.py): a loop over layers whose
residual stream crosses from one iteration to the next through a DDR buffer of the compiler's,
as one configuration, host-driven on npu1 and npu2 and as a CarriedLoop at depth 2 on npu2 (a
full ELF with the Emit); launches replayed and batched agree with reference() call after call."""
import numpy as np
import pytest

import iron
from iron import Carried
from iron.kernels import Add, Argmax, Copy, MatVec, Mul, RMSNorm, Softmax, concat
from iron.plan.fifos import FifoId, Stem
from iron.plan.mlir import ALLOWED_OPS
from iron.plan.plan import Dma, Loop
from iron.plan.rules import Rule
from tests.plan.test_mlir import op_names

F32 = np.float32
N, V = 64, 16


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")


class Layers(iron.Graph):
    """x = x + w_l @ RMSNorm(x, g_l) for each of `count` layers with weights of their own."""

    def __init__(self, count: int):
        rng = np.random.default_rng(5)
        self.w = [iron.param((rng.standard_normal((N, N)) / 16).astype(F32)) for _ in range(count)]
        self.g = [iron.param((1 + rng.standard_normal(N) / 8).astype(F32)) for _ in range(count)]

    def layers(self, x):
        for w, g in zip(self.w, self.g):
            x = Add.step(x, MatVec.step(w, RMSNorm.step(x, g)))
        return x

    def body(self, x):
        return self.layers(x)


class Decoder(Layers):
    """A token's embedding through the layers, each layer recording its input in a cache of its
    own at the token's position, the next token the Argmax of a head, recorded."""

    def __init__(self, count: int):
        super().__init__(count)
        rng = np.random.default_rng(6)
        self.emb = iron.weight(rng.standard_normal((V, N)).astype(F32))
        self.head = iron.param(rng.standard_normal((V, N)).astype(F32))
        self.tokens = iron.state((8,), np.int32, name="tokens")
        self.caches = [iron.state((8, N), F32, name=f"cache{i}") for i in range(count)]

    def layers(self, x):
        for w, g, cache in zip(self.w, self.g, self.caches):
            Copy.step(x, out=cache[self.pos])
            x = Add.step(x, MatVec.step(w, RMSNorm.step(x, g)))
        return x

    def body(self, *, tok: Carried[np.int32], pos: Carried[np.int32]):
        self.pos = pos
        nxt = Argmax.step(MatVec.step(self.head, self.layers(Copy.step(self.emb[tok]))))
        Copy.step(nxt, out=self.tokens[pos])
        return iron.carry(tok=nxt, pos=pos + 1)


@pytest.mark.parametrize("device", ["npu1", "npu2"])
def test_thirty_layers_run_as_one_configuration_their_stream_through_ddr(device):
    graph = Layers(30)
    compiled = graph.compile(x=((N,), F32), device=device)
    plan = compiled.plan
    assert len(plan.configurations) == 1
    assert plan.repeat.groups == ("g0", "g1") and plan.repeat.count == 30
    assert plan.repeat.operands[3] == ("through.Add#8", "g.3", "w.3", "through.Add#11")
    looped = [c for c in plan.cores if c.group in plan.repeat.groups]
    assert len(looped) == 2 and all(c.program == (Loop(30, c.program[0].body),) for c in looped)
    crossing = [text for rule, text in plan.rules if rule is Rule.REPEAT_OVER_TIME][0]
    assert crossing.startswith("Add#2, Add#5, Add#8, ") and crossing.endswith(
        ", through.Add#86, through.Add#89), the last iteration's returned by a Copy of its buffer")
    assert plan.groups[-1] == ("g60", ("Copy#90",))   # the output, copied from the last layer's buffer
    x = np.random.default_rng(1).standard_normal(N).astype(F32)
    for _ in range(3):   # the first launch runs task by task, the later ones replay it
        np.testing.assert_array_equal(compiled(x), graph.reference(x))


def loops_as_the_reference(body, reference: Decoder, steps: int) -> Decoder:
    """Run `body` as a CarriedLoop at depth 2 for `steps` - 1 steps from token 1; its carry and
    recorded tokens equal the reference's. Returns the reference, run alike."""
    carry, tokens = {"tok": 1, "pos": 0}, []
    for _ in range(steps):
        carry = dict(reference.reference(**carry))
        tokens.append(carry["tok"])
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(steps - 1, tok=1, pos=0)) == list(range(steps - 1))
    assert dict(loop.carry) == carry
    assert body.read("tokens").tolist()[:steps] == reference.read("tokens").tolist()[:steps] == tokens
    return reference


def test_a_decoder_over_twenty_layers_runs_as_a_carried_loop_at_depth_two_on_npu2():
    body = Decoder(20).compile(device="npu2")
    plan = body.plan
    assert plan.full_elf and plan.emit is not None and len(plan.configurations) == 1
    assert plan.repeat.groups == ("g1", "g2", "g3") and plan.repeat.count == 19
    assert plan.repeat.operands[2] == ("through.Add#8", "cache2[pos]", "g.2", "w.2", "through.Add#12")
    assert len([w for w in plan.words if w.sink is not None]) == 21   # every cache's write and the tokens'
    assert set(op_names(body.mlir)) <= ALLOWED_OPS
    reference = loops_as_the_reference(body, Decoder(20), 8)
    for i in (0, 7, 19):   # each layer's cache written at each position through its own sink patch word
        np.testing.assert_array_equal(body.read(f"cache{i}"), reference.read(f"cache{i}"))


def test_a_loop_too_big_for_one_configuration_runs_in_segments_kept_whole_around_it():
    body = Decoder(6).compile(device="npu2_2col")
    plan = body.plan
    assert plan.repeat.groups == ("g1", "g2", "g3") and plan.repeat.count == 5
    assert [[name for name, _ in s.groups] for s in plan.segments][0] == ["g0", "g1", "g2", "g3", "g16", "g17", "g18", "g19"]
    looping = [c for s in plan.segments for c in s.cores if c.group in plan.repeat.groups]
    assert [c.program[0].count for c in looping] == [5, 5, 5]
    (choice,) = [c for _, c in plan.choices if c.rule is Rule.REPEAT_OVER_TIME]
    assert choice.chosen == "over time: one iteration placed, its cores looping" and choice.chosen_ns < choice.rejected_ns
    assert set(op_names(body.mlir)) <= ALLOWED_OPS   # one module: a device per segment, @main configuring each
    loops_as_the_reference(body, Decoder(6), 6)


class Chain(iron.Graph):
    """`count` layers of `width` steps x + j * Softmax(x): each step one group reading only the
    one before, so a layer is more groups than npu2_2col has tiles."""

    def __init__(self, count: int, width: int):
        self.count, self.width = count, width

    def body(self, x):
        for _ in range(self.count):
            for j in range(self.width):
                x = Add.step(x, Mul.step(Softmax.step(x), float(j + 1)))
        return x


@pytest.mark.parametrize("width, shared", [
    (10, (("g1", "g2"), ("g3", "g4"), ("g5", "g6"), ("g7", "g8"))),
    (14, (("g1", "g2", "g3", "g4"), ("g5", "g6"), ("g7", "g8"), ("g9", "g10"), ("g11", "g12"), ("g13", "g14")))])
def test_an_iteration_of_more_groups_than_tiles_loops_with_cores_running_groups_in_turn(width, shared):
    graph = Chain(3, width)
    compiled = graph.compile(x=((N,), F32), device="npu2_2col")
    plan = compiled.plan
    iteration = tuple(f"g{i}" for i in range(width + 1))   # more groups than npu2_2col's 8 tiles (7 beside an Emit)
    assert plan.repeat.groups == iteration and plan.repeat.count == 2 and plan.repeat.shared == shared
    (looping,) = [c for c in plan.configurations if any(core.group == "g0" for core in c.cores)]
    cores = {core.groups for core in looping.cores if isinstance(core.program[0], Loop)}
    assert cores == {*shared, *((g,) for g in iteration if not any(g in s for s in shared))} and len(cores) == 7
    one_core = [f for f in looping.fifos if f.consumers == (f.producer,)]
    assert [f.name for f in one_core] == [FifoId(g, Stem.OUT) for s in shared for g in s[:-1]]
    assert all(f.shared_memory for f in one_core)
    lines = [text for rule, text in plan.rules if rule is Rule.SHARE_CORE_IN_ITERATION]
    assert lines[0] == "g2 on tile_0_3 after g1, its core running them in turn"
    assert len(lines) == sum(len(s) - 1 for s in shared)
    (choice,) = [c for _, c in plan.choices if c.rule is Rule.REPEAT_OVER_TIME]
    assert choice.chosen == "over time: one iteration placed, its cores looping"
    row = next(line.split("  ") for line in compiled.describe().splitlines() if line.strip().startswith("tile_0_3"))
    assert [cell.strip() for cell in row if cell.strip()][1] == ", ".join(shared[0])   # the groups its core runs
    assert set(op_names(compiled.mlir)) <= ALLOWED_OPS
    x = np.random.default_rng(2).standard_normal(N).astype(F32)
    for _ in range(3):
        np.testing.assert_array_equal(compiled(x), graph.reference(x))


class Stack(iron.Graph):
    """`count` layers of four MatVecs over 32, 40, 48 and 56 rows, each layer's weights its own."""

    def __init__(self, count: int):
        rng = np.random.default_rng(5)
        dims = [(40, 32), (48, 40), (56, 48), (32, 56)]
        self.w = [[iron.param((rng.standard_normal(d) / 8).astype(F32)) for d in dims] for _ in range(count)]

    def body(self, x):
        for layer in self.w:
            for w in layer:
                x = MatVec.step(w, x)
        return x


def test_looped_inputs_share_a_shim_channel_round_by_round_on_one_column():
    graph = Stack(6)
    compiled = graph.compile(x=((32,), F32), device="npu2_1col")
    plan = compiled.plan
    assert plan.repeat.groups == ("g0", "g1", "g2", "g3") and plan.repeat.count == 6
    assert plan.repeat.shared == (("g0", "g1"),)   # four groups, four tiles, one of them left for an Emit
    merged = [text for rule, text in plan.rules if rule is Rule.SHARE_SHIM_CHANNELS]
    # g0_in too, though it reads what the iteration before wrote: its moves come after the same Waits
    assert merged == ["shared_in0 (MM2S, 30848 bytes) on mem_0_1 split into g0_in, g1_in, g2_in, g3_in at bytes 0, 5248, "
                      "12928, 23680", "5 MM2S FIFOs now take 2 of the 2 shim MM2S channels"]
    (looping,) = [c for c in plan.configurations if any(core.group == "g0" for core in c.cores)]
    dmas = [d.fifo for d in looping.sequence if isinstance(d, Dma)]
    runs = [f for k, f in enumerate(dmas) if k == 0 or dmas[k - 1] != f]
    assert runs == [FifoId(None, Stem.SHARED_IN, (0,)), FifoId("g3", Stem.HOST)] * 6 + [   # each iteration's inputs
        FifoId("g24", Stem.IN), FifoId("g24", Stem.HOST)]                                  # at its turn
    x = np.random.default_rng(3).standard_normal(32).astype(F32)
    for _ in range(3):
        np.testing.assert_array_equal(compiled(x), graph.reference(x))


class Attending(iron.Graph):
    """`count` layers, each x + the join of `heads` heads: head h weighs the rows of its values
    vt[h] by Softmax(k[h] @ x[h]), each layer's k and vt its own."""

    def __init__(self, count: int, heads: int, positions: int = 64, dim: int = 32):
        rng = np.random.default_rng(4)
        self.heads, self.dim = heads, dim
        self.k = [iron.param((rng.standard_normal((heads, positions, dim)) / 8).astype(F32)) for _ in range(count)]
        self.vt = [iron.param((rng.standard_normal((heads, dim, positions)) / 4).astype(F32)) for _ in range(count)]

    def body(self, x):
        d = self.dim
        for k, vt in zip(self.k, self.vt):
            heads = [MatVec.step(vt[h], Softmax.step(MatVec.step(k[h], x[h * d:(h + 1) * d]))) for h in range(self.heads)]
            x = Add.step(x, concat(*heads))
        return x


def test_a_loop_over_heads_runs_inside_the_loop_over_layers_on_the_same_cores():
    graph = Attending(3, 5)
    compiled = graph.compile(x=((5 * 32,), F32), device="npu2_2col")
    plan = compiled.plan
    # a layer is 17 groups, each head two tiles at least (its keys, values and vector take three
    # input channels): more than npu2_2col's 7 tiles beside an Emit, even sharing cores
    assert plan.repeat.count == 3 and plan.repeat.groups == tuple(f"g{i}" for i in range(17))
    inner = plan.repeat.inner
    assert (inner.groups, inner.count) == (("g0", "g1", "g2"), 5)
    assert inner.operands[1] == ("k.0[1]", "x[32:64]", "vt.0[1]", "through.MatVec#5")
    assert plan.repeat.operands[1][:4] == ("k.1[0]", "through.Add#19[:32]", "vt.1[0]", "through.MatVec#22")
    (looping,) = [c for c in plan.configurations if any(core.group == "g0" for core in c.cores)]
    loops = {core.group: core.program for core in looping.cores if isinstance(core.program[0], Loop)}
    assert sorted(loops) == ["g0", "g1", "g15", "g16", "g2"]
    for group, program in loops.items():   # the heads' cores loop 5 times within each of the 3 layers
        (outer,) = program
        assert outer.count == 3 and isinstance(outer.body[0], Loop) == (group in inner.groups)
        assert group not in inner.groups or outer.body[0].count == 5
    (nested,) = [fact for rule, fact in plan.rules if rule is Rule.REPEAT_WITHIN_ITERATION]
    assert (nested.outer, nested.inner, nested.count) == ("g0..g16", "g0..g2", 5)
    # placed whole, sharing cores, the join of the heads' results takes more input channels than a tile has
    assert nested.refused == "tile_1_4 (g15) would take more FIFOs by DMA than a compute tile has channels"
    (choice,) = [c for _, c in plan.choices if c.rule is Rule.REPEAT_OVER_TIME]
    assert choice.chosen == "over time: one iteration placed, its cores looping" and choice.chosen_ns < choice.rejected_ns
    assert set(op_names(compiled.mlir)) <= ALLOWED_OPS
    x = np.random.default_rng(2).standard_normal(5 * 32).astype(F32)
    for _ in range(3):
        np.testing.assert_array_equal(compiled(x), graph.reference(x))


def test_a_loop_carrying_a_value_is_not_cut_into_configurations_each_looping_its_part():
    graph = Attending(3, 4)
    compiled = graph.compile(x=((4 * 32,), F32), device="npu2_1col")
    plan = compiled.plan
    # one layer with its heads looping inside it takes 2 configurations on npu2_1col's 4 tiles; looping
    # each part over every layer would run layer 1's heads before layer 0's Add: the layers stay in space
    assert plan.repeat is None and len(plan.configurations) == 13
    (line,) = [text for rule, text in plan.rules if rule is Rule.REPEAT_OVER_TIME]
    assert line.startswith("3 iterations of g0..g13 not run over time: an iteration is 14 groups")
    x = np.random.default_rng(2).standard_normal(4 * 32).astype(F32)
    for _ in range(2):
        np.testing.assert_array_equal(compiled(x), graph.reference(x))
