"""Elementwise work larger than a tile is streamed in blocks, not refused (issue 10): calls over
views lying in one run of words (`stream_contiguous_views`), a last call writing a state
(`stream_into_state`, also as a CarriedLoop), an earlier result the host reads too
(`stream_every_result`), a Concat of host tensors end to end (`stream_joined`), shown by what
describe() says and by the emulator agreeing with reference() on npu2 and npu1 (floats within
1e-3); a group that cannot stream refused naming its calls, why, and a fix that applies
(`fix_for_tile`)."""
import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron import Carried
from iron.errors import DoesNotFit
from iron.kernels import Accumulate, Add, Concat, Copy, Exp, Mul, ReLU
from iron.plan.fifos import FifoId, Stem
from iron.plan.mlir import ALLOWED_OPS, print_mlir
from iron.plan.plan import Loop
from iron.plan.rules import Rule
from tests.plan.test_mlir import op_names
from tests.quotes import quoted

F32 = {"rtol": 1e-3, "atol": 1e-3}


def rule(plan, name):
    return [what for rule, what in plan.rules if rule == name]


def streamed(plan) -> tuple[int, int, int, int]:
    """(rows, columns) of the cores the one stream (group g0) runs on, the elements of its first
    input's blocks and how many blocks each core takes (its Loop's count)."""
    cores = [c for c in plan.cores if c.group == "g0"]
    (loop,) = [item for item in cores[0].program if isinstance(item, Loop)]
    fifo = plan.fifo(FifoId("g0", Stem.X, (0, 0, 0)))
    block = fifo.nbytes // fifo.dtype.itemsize
    return len({c.tile.row for c in cores}), len({c.tile.col for c in cores}), block, loop.count


def streams(plan, *names) -> str:
    """The one stream_elementwise decision, which quotes `names` (its views and sub-rules)."""
    (line,) = rule(plan, Rule.STREAM_ELEMENTWISE)
    return quoted(line, *names)


class ExpOfTail(iron.Graph):
    def body(self, x):
        return Exp.step(x[1:])


class ReluOfFlat(iron.Graph):
    def body(self, x):
        return ReLU.step(x.reshape(-1))


@pytest.mark.parametrize("device, cores", [("npu2", (4, 8, 2048, 1)), ("npu1", (4, 4, 2048, 2))])
def test_elementwise_over_an_offset_slice_streams_from_its_first_word(device, cores):
    x = np.random.default_rng(1).standard_normal(65537).astype(np.float32)
    body = ExpOfTail().compile(x=x, device=from_name(device))
    assert streamed(body.plan) == cores
    streams(body.plan, "x[1:]", "element 1 of x", "stream_contiguous_views")
    np.testing.assert_allclose(body(x=x), ExpOfTail().reference(x=x), **F32)


@pytest.mark.parametrize("device, cores", [("npu2", (4, 8, 3054, 3)), ("npu1", (4, 4, 3054, 6))])
def test_elementwise_over_a_reshape_streams(device, cores):
    x = np.random.default_rng(2).standard_normal((509, 576)).astype(np.float32)
    body = ReluOfFlat().compile(x=x, device=from_name(device))
    assert streamed(body.plan) == cores
    streams(body.plan, "x.reshape(293184,)", "stream_contiguous_views")
    np.testing.assert_array_equal(body(x=x), ReluOfFlat().reference(x=x))


class AccumulateLarge(iron.Graph):
    def __init__(self):
        self.acc = iron.state((20000,), np.float32, name="acc")

    def body(self, x):
        Accumulate.step(x, out=self.acc)


class AccumulateSteps(iron.Graph):
    def __init__(self, x):
        self.x = iron.param(x)
        self.acc = iron.state(x.shape, x.dtype, name="acc")

    def body(self, *, step: Carried[np.int32]):
        Accumulate.step(self.x, out=self.acc)
        return iron.carry(step=step + 1)


STATE_CORES = {"npu2": (2, 8, 1250, 1), "npu1": (2, 4, 2500, 1)}


@pytest.mark.parametrize("device", ["npu2", "npu1"])
def test_accumulating_into_a_state_larger_than_a_tile_streams_back_into_it(device):
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(20000).astype(np.float32) for _ in range(3)]
    graph = AccumulateLarge()
    body = graph.compile(x=xs[0], device=from_name(device))
    assert streamed(body.plan) == STATE_CORES[device]
    streams(body.plan, "into acc", "stream_into_state")
    for x in xs:
        body(x=x)
        graph.reference(x=x)
    np.testing.assert_allclose(body.read("acc"), graph.read("acc"), **F32)
    np.testing.assert_allclose(graph.read("acc"), xs[0] + xs[1] + xs[2], **F32)


def test_accumulating_into_a_large_state_runs_as_a_carried_loop_at_depth_two():
    x = np.random.default_rng(4).standard_normal(20000).astype(np.float32)
    body = AccumulateSteps(x).compile(device=from_name("npu2"))
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(5, step=0)) == list(range(5))
    assert dict(loop.carry) == {"step": 6} and loop.transitions == 6   # the first call and 5 more
    assert streamed(body.plan) == (2, 5, 2000, 1)   # the Emit's words take a shim channel: 7 columns at most
    streams(body.plan, "into acc", "stream_into_state")
    np.testing.assert_allclose(body.read("acc"), 6 * x, **F32)


class AccumulateIntoRun(iron.Graph):
    def __init__(self):
        self.acc = iron.state((20200,), np.int32, name="acc")

    def body(self, x):
        Accumulate.step(x, out=self.acc[100:20100])


class ReluIntoRow(iron.Graph):
    def __init__(self):
        self.rows = iron.state((2, 30000), iron.bfloat16, name="rows")

    def body(self, x):
        Copy.step(ReLU.step(x), out=self.rows[1])


@pytest.mark.parametrize("device", ["npu2", "npu1"])
@pytest.mark.parametrize("graph, n, dtype, into", [
    (AccumulateIntoRun, 20000, np.int32, "acc[100:20100]"), (ReluIntoRow, 30000, iron.bfloat16, "rows[1]")])
def test_a_stream_writes_a_run_of_a_state_and_leaves_the_rest(device, graph, n, dtype, into):
    rng = np.random.default_rng(6)
    xs = [rng.integers(-50, 50, n).astype(dtype) for _ in range(2)]
    design, reference = graph(), graph()
    body = design.compile(x=xs[0], device=from_name(device))
    streams(body.plan, f"into {into}", "stream_into_state")
    name = "acc" if graph is AccumulateIntoRun else "rows"
    for x in xs:
        body(x=x)
        reference.reference(x=x)
    np.testing.assert_array_equal(body.read(name), reference.read(name))   # small integers: exact in bfloat16


class SumAndExp(iron.Graph):
    def body(self, x, y):
        s = Add.step(x, y)
        return s, Exp.step(s)


@pytest.mark.parametrize("device, cores", [("npu2", (2, 8, 1250, 1)), ("npu1", (2, 4, 1250, 2))])
def test_a_result_returned_and_read_again_in_its_group_streams_both_results(device, cores):
    rng = np.random.default_rng(5)
    x, y = (rng.standard_normal(20000).astype(np.float32) for _ in range(2))
    body = SumAndExp().compile(x=x, y=y, device=from_name(device))
    assert streamed(body.plan) == cores
    columns = cores[1]
    assert [f.name for f in body.plan.fifos if f.name.group == "g0" and f.name.stem is Stem.HOST] == [
        FifoId("g0", Stem.HOST, (c,), result=k) for c in range(columns) for k in (0, 1)]   # a join per result and column
    streams(body.plan, "Add(x, y)", "stream_every_result")
    for got, want in zip(body(x=x, y=y), SumAndExp().reference(x=x, y=y)):
        np.testing.assert_allclose(got, want, **F32)


class Joined(iron.Graph):
    def body(self, x, y):
        return Concat.step(x, y)


JOINS = {   # (x shape, y shape, dtype, device): (rows, columns of cores, block, blocks per core)
    ((4097,), (4097,), np.float32, "npu2"): (1, 1, 241, 34),   # 4097 = 17 x 241: one core
    ((4097,), (4097,), np.float32, "npu1"): (1, 1, 241, 34),
    ((64, 1024), (32, 1024), np.int32, "npu2"): (4, 8, 1024, 3),
}


@pytest.mark.parametrize("x_shape, y_shape, dtype, device", list(JOINS))
def test_a_concat_end_to_end_larger_than_a_tile_is_copied_piece_by_piece(x_shape, y_shape, dtype, device):
    rng = np.random.default_rng(7)
    x, y = (rng.integers(-99, 99, shape).astype(dtype) for shape in (x_shape, y_shape))
    body = Joined().compile(x=x, y=y, device=from_name(device))
    assert streamed(body.plan) == JOINS[x_shape, y_shape, dtype, device]
    (line,) = rule(body.plan, Rule.STREAM_JOINED)
    quoted(line, "x then y", "stream_joined")
    np.testing.assert_array_equal(body(x=x, y=y), Joined().reference(x=x, y=y))


class Side(iron.Graph):
    def body(self, x, y):
        return Concat.step(x, y, axis=1)


class SideWithState(iron.Graph):
    def __init__(self):
        self.seen = iron.state((8,), np.float32, name="seen")

    def body(self, x, y):
        return Concat.step(x, y, axis=1)


NOT_STREAMED = ("stream_elementwise", "Concat#0 joins along axis 1", "stream_joined", "at least 3 calls", "64512 bytes")


@pytest.mark.parametrize("graph, smaller_states", [(Side, False), (SideWithState, True)])
def test_a_group_that_cannot_stream_is_refused_naming_its_calls_why_and_a_fix_that_applies(graph, smaller_states):
    spec = ((2, 4097), np.float32)
    with pytest.raises(DoesNotFit) as refused:
        graph().compile(x=spec, y=spec, device=from_name("npu2"))
    text = quoted(refused.value, graph.__name__, "tile_0_2", "Concat#0", "132128 bytes", "65536",
                  "g0_host@tile_0_2 65552 bytes (out0)", "g0_in@tile_0_2 65552 bytes (x, y)", *NOT_STREAMED)
    assert ("smaller states" in text) == smaller_states


class ThreeResults(iron.Graph):
    def body(self, x, y):
        s = Add.step(x, y)
        r = ReLU.step(s)
        return s, r, Mul.step(r, s)


def test_more_results_than_a_shim_has_s2mm_channels_are_refused_saying_so():
    spec = ((20000,), np.float32)
    with pytest.raises(DoesNotFit) as refused:
        ThreeResults().compile(x=spec, y=spec, device=from_name("npu2"))
    quoted(refused.value, "ThreeResults", "tile_0_2", "Add#0", "ReLU#1", "Mul#2", "401024 bytes", "65536",
           "3 results", "2 S2MM channels", "stream_every_result", "return fewer", "at least 7 calls")


def test_the_new_streams_print_only_allowed_mlir_ops():
    x = ((20000,), np.float32)
    plans = [ExpOfTail().compile(x=((65537,), np.float32), device=from_name("npu2")).plan,
             Joined().compile(x=((4097,), np.float32), y=((4097,), np.float32), device=from_name("npu2")).plan,
             AccumulateLarge().compile(x=x, device=from_name("npu2")).plan,
             SumAndExp().compile(x=x, y=x, device=from_name("npu1")).plan]
    for plan in plans:
        assert set(op_names(print_mlir(plan))) <= ALLOWED_OPS, plan.name
