"""Repetition over time (iron/compiler/repeat.py, the rule `repeat_over_time`): a Python loop over
row blocks or weight matrices traces alike groups; the compiler places one iteration, its cores
loop over the iterations and the runtime sequence moves each iteration's operands, when the cost
model estimates that faster than spreading the iterations in space. Plan facts pinned (the
Repeat, the Loop around each core's program, the configurations, the Choice, the moves), each
design run on the emulator against reference(), and the cases left in space with their reason."""
import dataclasses
import re

import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron import Scratchpad
from iron.compiler.compile import compile_program
from iron.compiler.fuse import fuse
from iron.compiler.priced import plan_ns
from iron.compiler.runs import Run, find_runs
from iron.kernels import Add, Copy, Exp, MatVec, Softmax
from iron.plan.mlir import ALLOWED_OPS, print_mlir
from iron.plan.plan import Direction, Dma, Loop, Repeat
from iron.plan.rules import Rule
from tests.compiler.test_segments import DECODER_SIZE, guide_decoder
from tests.plan.test_mlir import op_names

F32 = np.float32


@pytest.fixture(autouse=True)
def emulator(monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "emulator")


class Rows(iron.Graph):
    """out_i = x[i] + y[i] for each of `rows` row blocks: one Add group per row."""

    def __init__(self, rows: int):
        self.rows = rows

    def body(self, x, y):
        return tuple(Add.step(x[i], y[i]) for i in range(self.rows))


class Weights(iron.Graph):
    """out_i = w_i @ x for `count` weight matrices of one shape: one MatVec group each."""

    def __init__(self, count: int, m: int = 32, k: int = 64):
        rng = np.random.default_rng(3)
        self.w = [iron.param((rng.standard_normal((m, k)) / 8).astype(F32)) for _ in range(count)]

    def body(self, x):
        return tuple(MatVec.step(w, x) for w in self.w)


class Before(iron.Graph):
    """Each row block added to h, which a call before the loop makes."""

    def body(self, x, z):
        h = Exp.step(z)
        return tuple(Add.step(h, x[i]) for i in range(40))


class Hops(iron.Graph):
    """c[(i + k) % 8] copied into seen[k] for k < 40: each iteration picks through its own index."""

    def __init__(self):
        self.c = iron.weight((np.arange(8, dtype=np.int32) + 1) * 10)
        self.seen = iron.state((40,), np.int32, name="seen")

    def body(self, *, i: Scratchpad[np.int32]):
        for k in range(40):
            Copy.step(self.c[(i + k) % 8], out=self.seen[k])


class Residual(iron.Graph):
    """`count` layers of out_i = h + W_i h, h the layer before's out (a state): the MatVec a group
    of its own, reading only its matrix from DDR, as a SmolLM2 projection does."""

    def __init__(self, count: int, n: int = 256):
        rng = np.random.default_rng(4)
        self.w = [iron.param((rng.standard_normal((n, n)) / 16).astype(F32)) for _ in range(count)]
        self.out = [iron.state((n,), F32) for _ in range(count)]

    def body(self, x):
        for w, out in zip(self.w, self.out):
            y = MatVec.step(w, Copy.step(x))
            Add.step(Copy.step(x), y, out=out)   # the Copy closes the MatVec's group (smollm2_graph.residual)
            x = out
        return Copy.step(x)


def rows_inputs(rows: int):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((rows, 256)).astype(F32), rng.standard_normal((rows, 256)).astype(F32))


@pytest.mark.parametrize("device, least", [("npu1", 3), ("npu2", 2)])   # 40 groups on 16 or 32 tiles
def test_forty_row_blocks_run_on_one_core_looping_forty_times(device, least):
    graph = Rows(40)
    compiled = graph.compile(x=((40, 256), F32), y=((40, 256), F32), device=device)
    plan = compiled.plan
    assert plan.repeat == Repeat(("g0",), 40, tuple((f"out{i}", f"x[{i}]", f"y[{i}]") for i in range(40)))
    assert plan.configurations == (plan,)
    (core,) = plan.cores
    assert len(core.program) == 1 and isinstance(core.program[0], Loop) and core.program[0].count == 40
    # each iteration moves its own rows: x[i] and y[i] (256 words each) into g0_in, out_i from g0_host
    ins = [(op.buffer, op.offset) for op in plan.sequence if isinstance(op, Dma) and op.direction is Direction.MM2S]
    outs = [(op.buffer, op.offset) for op in plan.sequence if isinstance(op, Dma) and op.direction is Direction.S2MM]
    assert ins == [("inputs", i * 256 + j * 40 * 256) for i in range(40) for j in range(2)]
    assert outs == [("outputs", i * 256) for i in range(40)]
    (name, choice), = plan.choices
    assert (name, choice.rule, choice.chosen, choice.rejected) == (
        "g0", Rule.REPEAT_OVER_TIME, "over time: one iteration placed, its cores looping",
        f"in space: at least {least} configurations")
    assert choice.chosen_ns == pytest.approx(plan_ns(plan)) and choice.chosen_ns < choice.rejected_ns
    x, y = rows_inputs(40)
    for got, expected in zip(compiled(x, y), graph.reference(x, y)):
        np.testing.assert_array_equal(got, expected)


def test_the_repeated_design_prints_a_loop_within_the_mlir_subset():
    plan = compile_program(Rows(40).trace(x=((40, 256), F32), y=((40, 256), F32)), from_name("npu2"))
    text = print_mlir(plan)
    assert set(op_names(text)) <= ALLOWED_OPS
    assert re.search(r"scf\.for %block0 = %c0 to %c40 step %c1", text)
    assert text.count("aiex.npu.dma_memcpy_nd") == 120


@pytest.mark.parametrize("device", ["npu1", "npu2"])
def test_forty_weight_matrices_stream_through_one_core_in_turn(device):
    graph = Weights(40)
    compiled = graph.compile(x=((64,), F32), device=device)
    plan = compiled.plan
    assert plan.repeat is not None and plan.repeat.groups == ("g0",) and plan.repeat.count == 40
    assert plan.repeat.operands[7] == ("out7", "w.7", "x")
    assert len(plan.configurations) == 1 and len(plan.cores) == 1
    x = np.linspace(-1, 1, 64, dtype=F32)
    for got, expected in zip(compiled(x), graph.reference(x)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_each_layers_matrix_is_issued_before_the_wait_on_the_layer_before():
    """Prefetch: a group moving only a matrix's blocks moves iteration k's at the end of iteration
    k - 1's moves, before the Wait on k - 1's result that iteration k's first group needs, so the
    blocks fill its FIFOs while iteration k - 1 still runs."""
    graph = Residual(8)
    compiled = graph.compile(x=((256,), F32), device="npu2")
    plan = compiled.plan
    assert plan.repeat.groups == ("g0", "g1", "g2") and plan.repeat.count == 8
    ops = [(op.fifo.name, isinstance(op, Dma) and op.offset) for op in plan.sequence]
    lanes = [f"g1_w{k}_mem" for k in range(4)]   # the matrix split over 4 tiles, each part through its own lane
    rows = [ops.index((lane, 16384 * (4 * i + k))) for i in range(8) for k, lane in enumerate(lanes)]
    writes = [i for i, op in enumerate(plan.sequence) if not isinstance(op, Dma) and op.fifo.name == "g2_host"]
    assert len(writes) == 8 and rows == sorted(rows)
    # before the Wait on layer k's result: the rows of layers 0 .. k + 1
    assert [sum(r < w for r in rows) for w in writes] == [4 * min(k + 2, 8) for k in range(8)]
    x = np.linspace(-1, 1, 256, dtype=F32)
    np.testing.assert_allclose(compiled(x), graph.reference(x), rtol=1e-5, atol=1e-5)


def test_few_iterations_that_fit_side_by_side_stay_in_space_by_estimate():
    plan = compile_program(Rows(8).trace(x=((8, 256), F32), y=((8, 256), F32)), from_name("npu2"))
    assert plan.repeat is None and len(plan.cores) == 8
    (name, choice), = plan.choices
    assert choice.rule is Rule.REPEAT_OVER_TIME
    # the floor of the loop's estimate, read off the spread design, is above its estimate: not compiled twice
    assert (name, choice.chosen, choice.rejected) == (
        "g0", "in space: every iteration placed, one configuration",
        "over time: one iteration placed, its cores looping, at least")
    assert choice.chosen_ns == pytest.approx(plan_ns(plan)) and choice.chosen_ns < choice.rejected_ns


def test_a_value_made_before_the_block_crosses_to_every_iteration_through_ddr():
    graph = Before()
    compiled = graph.compile(x=((40, 256), F32), z=((256,), F32), device="npu2")
    plan = compiled.plan
    assert plan.repeat.groups == ("g1",) and plan.repeat.count == 40 and len(plan.configurations) == 1
    assert plan.repeat.operands[5] == ("out5", "through.Exp#0", "x[5]")
    assert "through.Exp#0" in next(text for rule, text in plan.rules if rule is Rule.REPEAT_OVER_TIME)
    x, z = rows_inputs(40)[0], np.linspace(-1, 1, 256, dtype=F32)
    for got, expected in zip(compiled(x, z), graph.reference(x, z)):
        np.testing.assert_array_equal(got, expected)


def test_iterations_picking_through_indices_of_their_own_stay_in_space_saying_why():
    plan = compile_program(Hops().trace(), from_name("npu2"))
    assert plan.repeat is None
    (why,) = [text for rule, text in plan.rules if rule is Rule.REPEAT_OVER_TIME]
    assert all(name in why for name in ("40 iterations", "g0", "c[(i + 0) % 8]", "c[(i + 1) % 8]"))


class Pairs(iron.Graph):
    """Exp(x), then for each of three weights a MatVec of x and an Exp of a row of y."""

    def __init__(self):
        rng = np.random.default_rng(4)
        self.w = [iron.param(rng.standard_normal((32, 64)).astype(F32)) for _ in range(3)]

    def body(self, x, y):
        outs = [Exp.step(x)]
        for i, w in enumerate(self.w):
            outs += [MatVec.step(w, x), Exp.step(y[i])]
        return tuple(outs)


def test_runs_cover_the_most_groups_with_the_shortest_period():
    assert find_runs(fuse(Weights(6).trace(x=((64,), F32))))[0] == Run(0, 1, 6)
    assert find_runs(fuse(Pairs().trace(x=((64,), F32), y=((3, 16), F32))))[0] == Run(1, 2, 3)


class Heads(iron.Graph):
    """Attention-like work per head over one KV state: scores of q[h] against k[h], their Softmax,
    the values vt[h] weighted by it."""

    def __init__(self, heads: int, positions: int = 64, dim: int = 32):
        rng = np.random.default_rng(7)
        self.heads = heads
        self.k = iron.state((heads, positions, dim), F32, name="k")
        self.vt = iron.state((heads, dim, positions), F32, name="vt")
        self.kv = (rng.standard_normal((heads, positions, dim)).astype(F32) / 4,
                   rng.standard_normal((heads, dim, positions)).astype(F32))

    def body(self, q):
        return tuple(MatVec.step(self.vt[h], Softmax.step(MatVec.step(self.k[h], q[h]))) for h in range(self.heads))


@pytest.mark.parametrize("heads, over_time", [(8, False), (16, True)])
def test_heads_run_side_by_side_or_over_time_by_estimate(heads, over_time):
    graph = Heads(heads)
    compiled = graph.compile(q=((heads, 32), F32), device="npu2")
    plan = compiled.plan
    (choice,) = [c for _, c in plan.choices if c.rule is Rule.REPEAT_OVER_TIME]
    if over_time:
        assert plan.repeat.count == heads and len(plan.repeat.groups) == 3 and len(plan.configurations) == 1
        assert plan.repeat.operands[5] == ("k[5]", "q[5]", "out5", "vt[5]")
        assert choice.chosen.startswith("over time") and choice.rejected == "in space: at least 2 configurations"
    else:
        assert plan.repeat is None and len(plan.cores) == 3 * heads and len(plan.configurations) == 1
        assert choice.chosen.startswith("in space") and choice.rejected.startswith("over time")
    assert choice.chosen_ns < choice.rejected_ns
    for name, value in zip(("k", "vt"), graph.kv):
        compiled.write(name, value)
        graph.write(name, value)
    q = np.random.default_rng(8).standard_normal((heads, 32)).astype(F32)
    for got, expected in zip(compiled(q), graph.reference(q)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_the_guide_decoder_loops_seven_of_its_eight_layers_in_two_configurations_not_five():
    program = guide_decoder().Decoder(8, **DECODER_SIZE).trace()
    plan = compile_program(program, from_name("npu2"))
    spread = compile_program(program, from_name("npu2"), over_time=False)
    assert (len(plan.configurations), len(spread.configurations)) == (2, 5)
    assert plan.repeat.count == 7 and plan.repeat.groups == tuple(f"g{i}" for i in range(1, 12))
    (choice,) = [c for _, c in plan.choices if c.rule is Rule.REPEAT_OVER_TIME]
    # the segments in space compiled only until they certainly take longer: a floor under their estimate
    assert choice.rejected == "in space: at least 5 configurations" and choice.rejected_ns <= plan_ns(spread)
    assert choice.chosen_ns == pytest.approx(plan_ns(plan)) and plan_ns(plan) < choice.rejected_ns


def test_a_smollm2_layer_larger_than_the_array_loops_with_its_heads_looping_inside_it(model):
    from iron.models.smollm2_graph import SmolLM2Graph
    three = dataclasses.replace(model, config=dataclasses.replace(model.config, layers=3),
                                weights=dataclasses.replace(model.weights, blocks=model.weights.blocks[:3]))
    plan = SmolLM2Graph(three, quantized=True).compile(device="npu2").plan
    # 42 groups a layer, each of its 9 heads two tiles at least (keys, values and the Softmax's
    # length take three input channels): placed whole it does not fit, so its heads loop inside it
    assert plan.repeat.count == 3 and len(plan.repeat.groups) == 42
    assert (plan.repeat.inner.groups, plan.repeat.inner.count) == (("g6", "g7", "g8"), 9)
    assert plan.repeat.inner.operands[4][:2] == ("layers.0.keys[1]", "through.RoPE#3[256:320]")   # head 4 reads its kv head 1
    looping = plan.configurations[0]
    heads = [c.program[0] for c in looping.cores if c.group in plan.repeat.inner.groups]
    assert [(loop.count, loop.body[0].count) for loop in heads] == [(3, 9)] * 3
    (line,) = [text for rule, text in plan.rules if rule is Rule.REPEAT_OVER_TIME and "placed once" in text]
    assert line.startswith("3 iterations of g1..g42 (9 iterations of g6..g8 within each): ")
    (nested,) = [fact for rule, fact in plan.rules if rule is Rule.REPEAT_WITHIN_ITERATION]
    assert (nested.outer, nested.inner, nested.count) == ("g1..g42", "g6..g8", 9)
    assert nested.refused.endswith("would take more FIFOs by DMA than a compute tile has channels")
