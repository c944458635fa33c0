"""The Emit's shim MM2S channel (its words, `emit_in`) when a grid takes every MM2S channel of
npu2_1col's one shim: the rule `emit_in_shares` (iron/compiler/shims.py) lets the words share a
channel with a group's input through a mem-tile split (a MatVec: x and the streamed matrix), so
the design stays one configuration; when no input can take them (a MatMul streaming both
operands), the rule `emit_own_segment` (iron/compiler/segment.py) runs the Emit in a segment of
its own. Plans pinned, then run on the emulator against reference(), one call at a time and as
a CarriedLoop."""
import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron.compiler.channels import MemChannels, ShimRequest, share_shim_channels
from iron.errors import PlacementError
from iron.kernels import Add, MatMul, MatVec
from iron.plan.fifos import EMIT_IN, FifoId, Stem
from iron.plan.plan import Direction, FifoRole, Link, Tile, TileKind
from iron.plan.rules import Rule
from tests.quotes import quoted

F32 = np.float32


@pytest.fixture(autouse=True)
def emulator(monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")


class Counted(iron.Graph):
    """A MatVec tiled over the cores, and a count carried."""

    def __init__(self, rows: int, cols: int):
        self.w = iron.param(np.random.default_rng(0).standard_normal((rows, cols)).astype(F32))

    def body(self, x, *, n: iron.Carried[np.int32]):
        return MatVec.step(self.w, x), iron.carry(n=n + 1)


def rules(plan, name: str) -> list[str]:
    return [what for rule, what in plan.rules if rule == name]


def test_a_tiled_matvec_with_a_carry_on_one_column_shares_the_emit_words_and_equals_the_reference():
    graph = Counted(1536, 576)
    compiled = graph.compile(device="npu2_1col", x=((576,), F32))
    plan = compiled.plan
    assert plan.segments == ()
    assert len(rules(plan, Rule.EMIT_IN_SHARES)) == 1 and len(rules(plan, Rule.SHARE_SHIM_CHANNELS)) == 2
    shared = plan.fifo(FifoId(None, Stem.SHARED_IN, (0,)))
    assert (shared.role, shared.nbytes, shared.consumers) == (FifoRole.SHARED_IN, 2316, (Tile(0, 1, TileKind.MEM),))
    assert Link(Tile(0, 1, TileKind.MEM), (FifoId(None, Stem.SHARED_IN, (0,)),), (FifoId("g0", Stem.IN), EMIT_IN), destination_offsets=(0, 2304)) \
        in plan.links
    assert "emit_in_shares" in compiled.describe()
    x = np.random.default_rng(1).standard_normal(576).astype(F32)
    got, carry = compiled(x, n=3)
    want, want_carry = graph.reference(x, n=3)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert carry["n"] == want_carry["n"] == 4


W = np.random.default_rng(3).standard_normal((1536, 576)).astype(F32)
V = np.random.default_rng(4).standard_normal(576).astype(F32)


class Looped(iron.Graph):
    """Counted with the vector a param, so the body takes no tensor and runs as a CarriedLoop."""

    def __init__(self):
        self.w = iron.param(W)
        self.v = iron.param(V)
        self.y = iron.state((1536,), F32, name="y")

    def body(self, *, n: iron.Carried[np.int32]):
        MatVec.step(self.w, self.v, out=self.y)
        return iron.carry(n=n + 1)


def test_the_shared_emit_words_run_as_a_carried_loop_at_depth_2():
    graph = Looped()
    body = graph.compile(device="npu2_1col")
    assert len(rules(body.plan, Rule.EMIT_IN_SHARES)) == 1 and body.plan.segments == ()
    assert Link(Tile(0, 1, TileKind.MEM), (FifoId(None, Stem.SHARED_IN, (0,)),), (FifoId("g0", Stem.IN), EMIT_IN), destination_offsets=(0, 2304)) \
        in body.plan.links
    assert_loop_equals_reference(graph, body, W @ V, steps=5, n=3)


def assert_loop_equals_reference(graph, body, product, steps: int, n: int):
    """`body` run as a CarriedLoop at depth 2 for `steps` steps from n: its carry as reference()'s
    after the same calls (first and the steps), its state y as reference()'s and as `product`."""
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(steps, n=n)) == list(range(steps))
    carry = {"n": n}
    for _ in range(steps + 1):
        carry = dict(graph.reference(**carry))
    assert dict(loop.carry) == carry == {"n": n + steps + 1}
    np.testing.assert_allclose(body.read("y"), graph.read("y"), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(body.read("y"), product, rtol=1e-4, atol=1e-4)


def test_the_4096_square_matvec_on_one_column_shares_too():
    plan = Counted(4096, 4096).compile(device="npu2_1col", x=((4096,), F32)).plan
    assert plan.segments == ()
    assert plan.fifo(FifoId(None, Stem.SHARED_IN, (0,))).nbytes == 16396
    assert Link(Tile(0, 1, TileKind.MEM), (FifoId(None, Stem.SHARED_IN, (0,)),), (FifoId("g0", Stem.IN), EMIT_IN), destination_offsets=(0, 16384)) \
        in plan.links


@pytest.mark.parametrize("device", ["npu1_1col", "npu2"])
def test_devices_with_channels_to_spare_share_nothing(device):
    graph = Counted(1536, 576)
    compiled = graph.compile(device=device, x=((576,), F32))
    assert rules(compiled.plan, Rule.EMIT_IN_SHARES) == [] == rules(compiled.plan, Rule.SHARE_SHIM_CHANNELS)
    x = np.random.default_rng(2).standard_normal(576).astype(F32)
    got, carry = compiled(x, n=0)
    want, _ = graph.reference(x, n=0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert carry["n"] == 1


A = np.random.default_rng(5).standard_normal((64, 256)).astype(F32)
B = np.random.default_rng(6).standard_normal((256, 512)).astype(F32)


class Product(iron.Graph):
    """A MatMul streaming both operands (a grid of one core on npu2_1col), and a count carried."""

    def __init__(self):
        self.b = iron.param(B)

    def body(self, a, *, n: iron.Carried[np.int32]):
        return MatMul.step(a, self.b), iron.carry(n=n + 1)


def test_a_grid_matmul_with_a_carry_on_one_column_runs_the_emit_in_a_segment_of_its_own():
    graph = Product()
    compiled = graph.compile(device="npu2_1col", a=((64, 256), F32))
    plan = compiled.plan
    assert [[name for name, _ in s.groups] for s in plan.segments] == [["g0"], []]
    assert plan.segments[0].emit is None and plan.segments[1].emit is not None
    assert len(rules(plan, Rule.EMIT_OWN_SEGMENT)) == 1 and rules(plan, Rule.SHARE_SHIM_CHANNELS) == []
    assert [(c.nbytes, c.values) for c in plan.cuts] == [(0, ())]
    assert "segment 1  the Emit alone" in compiled.describe()
    got, carry = compiled(A, n=2)
    want, want_carry = graph.reference(A, n=2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert carry["n"] == want_carry["n"] == 3


class ProductLoop(iron.Graph):
    def __init__(self):
        self.a, self.b = iron.param(A), iron.param(B)
        self.y = iron.state((64, 512), F32, name="y")

    def body(self, *, n: iron.Carried[np.int32]):
        MatMul.step(self.a, self.b, out=self.y)
        return iron.carry(n=n + 1)


def test_the_emit_in_a_segment_of_its_own_runs_as_a_carried_loop_at_depth_2():
    graph = ProductLoop()
    body = graph.compile(device="npu2_1col")
    assert len(body.plan.segments) == 2 and len(rules(body.plan, Rule.EMIT_OWN_SEGMENT)) == 1
    assert_loop_equals_reference(graph, body, A @ B, steps=4, n=1)


def test_inputs_none_of_which_may_share_are_refused_naming_who_may():
    device = from_name("npu2_1col")
    wanted = [ShimRequest(name, Direction.MM2S, 0, 64) for name in (FifoId("g0", Stem.A, (0,), mem=True), FifoId("g0", Stem.B, (0,), mem=True), EMIT_IN)]
    with pytest.raises(PlacementError) as refused:
        share_shim_channels(Product().trace(a=((64, 256), F32)), wanted, device, MemChannels(device), 2)
    quoted(refused.value, "Product", "3 shim MM2S channels", "npu2_1col has 2", "saves only 0", "more columns")


class Sum(iron.Graph):
    def body(self, x, y, *, n: iron.Carried[np.int32]):
        return Add.step(x, y), iron.carry(n=n + 1)


def test_a_wide_stream_of_two_inputs_with_a_carry_on_one_column_runs_the_emit_in_a_segment_of_its_own():
    graph = Sum()
    compiled = graph.compile(device="npu2_1col", x=((1 << 16,), F32), y=((1 << 16,), F32))
    assert [[name for name, _ in s.groups] for s in compiled.plan.segments] == [["g0"], []]
    assert len(rules(compiled.plan, Rule.EMIT_OWN_SEGMENT)) == 1
    assert [(c.nbytes, c.values) for c in compiled.plan.cuts] == [(0, ())]
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal(1 << 16).astype(F32), rng.standard_normal(1 << 16).astype(F32)
    got, carry = compiled(x, y, n=5)
    np.testing.assert_array_equal(got, graph.reference(x, y, n=5)[0])
    assert carry["n"] == 6
