"""The `fit_compute_channels` routing rule (iron/compiler/route.py, applied before lowering): a core
that would take more FIFOs by DMA than its tile's 2 input channels gets the extra operands inside
an object it already receives, from a group that receives them itself (the MLP's residual through
the RMSNorm group) or loads them for it (a whole `_in`: tensors and per-call words), the Emit
included, or starts receiving an earlier group's result on a channel it has left; when no group
can, a PlacementError. Plans pinned, then run on the emulator against
reference()."""
from collections import Counter

import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron import Carried, Scratchpad
from iron.compiler import compile as compile_module
from iron.compiler.compile import compile_program
from iron.compiler.fuse import fuse
from iron.compiler.lower import lower
from iron.compiler.place import place
from iron.compiler.route import CoreInputs, Relay, choose_relays, core_inputs, route
from iron.errors import PlacementError
from iron.kernels import Add, Copy, Exp, MatVec, RMSNorm, Softmax
from iron.plan.fifos import FifoId, Stem
from iron.plan.plan import Cut, Imm, KernelStep, Load, Ptr, Tile, TileKind
from iron.plan.rules import Rule
from tests.compiler import designs
from tests.compiler.passes import outputs

F32 = np.float32
NPU1, NPU2 = from_name("npu1"), from_name("npu2")


@pytest.fixture(autouse=True)
def emulator(monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")


def out(group: str) -> FifoId:
    return FifoId(group, Stem.OUT)


def in_(group: str) -> FifoId:
    return FifoId(group, Stem.IN)


def w(group: str) -> FifoId:
    return FifoId(group, Stem.W)


def over(plan) -> dict[str, tuple[int, int]]:
    """Compute tiles moving more than 2 FIFOs in or out by DMA: name -> (in, out)."""
    cin, cout = Counter(), Counter()
    for f in plan.fifos:
        if f.shared_memory:
            continue
        if f.producer.kind is TileKind.COMPUTE:
            cout[f.producer.name] += 1
        for c in f.consumers:
            if c.kind is TileKind.COMPUTE:
                cin[c.name] += 1
    return {t: (cin[t], cout[t]) for t in set(cin) | set(cout) if cin[t] > 2 or cout[t] > 2}


def fits(plan) -> list[str]:
    return [what for rule, what in plan.rules if rule == Rule.FIT_COMPUTE_CHANNELS]


def consumers(plan, name: str) -> tuple[str, ...]:
    return tuple(t.name for t in plan.fifo(name).consumers)


# ---- the MLP: the residual comes with the normalized vector ------------------------------------------

def test_relays_are_decided_before_the_one_lowering(monkeypatch):
    lowered = []
    monkeypatch.setattr(compile_module, "lower", lambda *args: lowered.append(args[3]) or lower(*args))
    plan = compile_program(designs.trace(designs.mlp(4, 256)), NPU2)
    # one lowering per design: this one, then repeat_over_time's alternative (one layer placed, looping), which
    # its serial chain through DDR estimates slower
    assert len(lowered) == 2 and [r.reader for r in lowered[0].relays] == ["g3", "g5", "g7"]
    (choice,) = [c for _, c in plan.choices if c.rule is Rule.REPEAT_OVER_TIME]
    assert plan.repeat is None and choice.rejected == "over time: one iteration placed, its cores looping"
    assert choice.chosen_ns < choice.rejected_ns
    assert len(fits(plan)) == 3


def test_the_mlp_parts_take_the_residual_from_the_norm_group(monkeypatch):
    made = outputs(monkeypatch, compile_module, "fit_compute_channels")
    plan = compile_program(designs.trace(designs.mlp(4, 256)), NPU2, over_time=False)
    assert made[-1].relays == tuple(Relay(f"g{g - 1}", f"g{g}", (out(f"g{g - 2}"),)) for g in (3, 5, 7))
    assert len(fits(plan)) == 3
    assert consumers(plan, FifoId("g1", Stem.OUT)) == ("tile_1_4",)
    assert (consumers(plan, FifoId("g2", Stem.OUT)), plan.fifo(FifoId("g2", Stem.OUT)).nbytes) == (("tile_1_3", "tile_1_2", "tile_2_2", "tile_2_3"),
                                                                       2048)
    assert plan.holds[FifoId("g2", Stem.OUT)] == "RMSNorm#4, Add#3"
    assert plan.function("g2").steps[1] == KernelStep.of(Copy, np.float32, (Ptr(FifoId("g1", Stem.OUT)), Ptr(FifoId("g2", Stem.OUT), 1024), Imm(256)))
    residual = [step.args[0] for name in ("g3_p0", "g3_p1") for step in plan.function(name).steps
                if step.symbol == "add_f32"]
    assert residual == [Ptr(FifoId("g2", Stem.OUT), 1024), Ptr(FifoId("g2", Stem.OUT), 1024 + 64 * 4)]   # g3's 4 parts of 64 rows


@pytest.mark.parametrize("device", [NPU1, NPU2], ids=["npu1", "npu2"])
@pytest.mark.parametrize("dtype", [F32, iron.bfloat16], ids=["f32", "bf16"])
def test_the_mlp_keeps_every_compute_tile_within_its_channels(dtype, device):
    plan = compile_program(designs.trace(designs.mlp(4, 256, dtype)), device)
    assert over(plan) == {}
    assert len(fits(plan)) == (3 if dtype is F32 else 0)   # bf16 streams on one tile: already fits


# ---- a whole `_in` loaded by the group before ------------------------------------------------------

class Bias(iron.Graph):
    """RMSNorm, then a streamed MatVec plus a bias b; the normalized vector is also an output's input."""

    def __init__(self):
        rng = np.random.default_rng(3)
        self.w = iron.param((rng.standard_normal((128, 64)) / 8).astype(F32))
        self.g = iron.param(np.linspace(0.5, 1.5, 64).astype(F32))
        self.b = iron.param(np.linspace(-1, 1, 128).astype(F32))

    def body(self, x):
        h = RMSNorm.step(x, self.g)
        return Add.step(MatVec.step(self.w, h), self.b), Exp.step(h)


def test_a_bias_after_a_streamed_matrix_comes_with_the_normalized_vector(monkeypatch):
    made = outputs(monkeypatch, compile_module, "fit_compute_channels")
    compiled = Bias().compile(device="npu2", x=((64,), F32))
    plan = compiled.plan
    assert made[-1].relays == (Relay("g0", "g1", (in_("g1"),)),) and len(fits(plan)) == 1
    holds = plan.holds
    assert (holds[FifoId("g0", Stem.IN)], holds[FifoId("g0", Stem.OUT)]) == ("x, g, b", "RMSNorm#0, b")
    assert FifoId("g1", Stem.IN) not in holds and over(plan) == {}
    x = np.linspace(-2, 2, 64).astype(F32)
    for got, want in zip(compiled(x), Bias().reference(x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


class BiasTwice(Bias):
    """Bias, and exp(b) in a later group: g1 loads b first, so it forwards b to that group."""

    def body(self, x):
        h = RMSNorm.step(x, self.g)
        return Add.step(MatVec.step(self.w, h), self.b), Exp.step(h), Exp.step(self.b)


def test_a_group_whose_in_is_carried_still_forwards_what_it_loads_first():
    compiled = BiasTwice().compile(device="npu2", x=((64,), F32))
    plan = compiled.plan
    assert (Rule.FORWARD_SHARED_INPUT, "g1 forwards b to g3") in plan.rules and len(fits(plan)) == 1
    assert plan.function("g1").steps[-1] == KernelStep.of(Copy, np.float32, (Ptr(FifoId("g0", Stem.OUT), 256), Ptr(FifoId("g1", Stem.OUT)), Imm(128)))
    x = np.linspace(-2, 2, 64).astype(F32)
    for got, want in zip(compiled(x), BiasTwice().reference(x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


class NormedSoftmax(iron.Graph):
    """Softmax(exp(x) + RMSNorm(exp(y)), length=n), and exp of the normalized vector."""

    def __init__(self):
        self.g = iron.param(np.linspace(0.5, 1.5, 16).astype(F32))

    def body(self, x, y, *, n: Scratchpad[np.int32]):
        a = Exp.step(x)
        r = RMSNorm.step(Exp.step(y), self.g)
        return Softmax.step(Add.step(a, r), length=n), Exp.step(r)


def test_a_per_call_length_travels_in_the_carrier_object(monkeypatch):
    made = outputs(monkeypatch, compile_module, "fit_compute_channels")
    compiled = NormedSoftmax().compile(device="npu1", x=((16,), F32), y=((16,), F32))
    plan = compiled.plan
    assert made[-1].relays == (Relay("g0", "g2", (in_("g2"),)),) and len(fits(plan)) == 1
    assert plan.holds[FifoId("g0", Stem.OUT)] == "Exp#0, n"
    assert plan.function("g2").steps[-1].args[-1] == Load(FifoId("g0", Stem.OUT), 64)   # Softmax's length
    x, y = np.linspace(-1, 1, 16).astype(F32), np.linspace(0, 2, 16).astype(F32)
    for n in (3, 16):
        for got, want in zip(compiled(x, y, n=n), NormedSoftmax().reference(x, y, n=n)):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# ---- the Emit ----------------------------------------------------------------------------------------

class TwoTrails(iron.Graph):
    """i -> a[i], j -> b[j] + a[i]: two carried elements of two groups, and c[i] written to the
    state `seen` by a third (a holds 0..3 and b 0..4, so both stay within the 8 entries)."""

    def __init__(self):
        self.a = iron.weight(np.array([3, 0, 1, 2, 0, 1, 2, 3], np.int32))
        self.b = iron.weight(np.array([1, 2, 3, 0, 4, 2, 1, 0], np.int32))
        self.c = iron.weight(np.arange(8, dtype=np.int32) * 10)
        self.seen = iron.state((1,), np.int32, name="seen")

    def body(self, *, i: Carried[np.int32], j: Carried[np.int32]):
        y = Copy.step(self.a[i], dtype=np.int32)
        z = Add.step(Copy.step(self.b[j], dtype=np.int32), y)
        Copy.step(self.c[i], out=self.seen[0])
        return iron.carry(i=y, j=z)


def test_the_emit_takes_an_element_through_the_group_that_reads_it(monkeypatch):
    made = outputs(monkeypatch, compile_module, "fit_compute_channels")
    body = TwoTrails().compile(device="npu2")
    plan = body.plan
    assert made[-1].relays == (Relay("g1", "emit", (out("g0"),)),) and len(fits(plan)) == 1
    assert plan.emit.next_values == (("i", Load(FifoId("g1", Stem.OUT), 4)), ("j", Load(FifoId("g1", Stem.OUT), 0)))
    assert consumers(plan, FifoId("g0", Stem.OUT)) == ("tile_0_3",) and plan.fifo(FifoId("g0", Stem.OUT)).shared_memory
    loop = iron.CarriedLoop(body, body, depth=2)
    assert list(loop.run(5, i=1, j=2)) == list(range(5))
    reference, carry = TwoTrails(), {"i": 1, "j": 2}
    for _ in range(6):   # the first run, then 5 body runs
        carry = dict(reference.reference(**carry))
    assert dict(loop.carry) == carry
    np.testing.assert_array_equal(body.read("seen"), reference.read("seen"))


# ---- when no group can carry them ----------------------------------------------------------------

class StateBias(Bias):
    """Bias with a state s instead of the param b: only the group itself may load a state."""

    def __init__(self):
        super().__init__()
        self.s = iron.state((128,), F32, name="s")

    def body(self, x):
        h = RMSNorm.step(x, self.g)
        return Add.step(MatVec.step(self.w, h), self.s), Exp.step(h)


def test_a_state_after_a_streamed_matrix_that_does_not_fit_the_channels_runs_as_segments():
    # Whole, g1 on tile_0_3 would need 3 FIFOs by DMA (g0_out, g1_in, g1_w) and no group can
    # carry one; cut before g2, g0's result goes to DDR and g1 fits its 2 channels.
    compiled = StateBias().compile(x=((64,), F32))
    assert [[name for name, _ in s.groups] for s in compiled.plan.segments] == [["g0", "g1"], ["g2"]]
    assert compiled.plan.cuts == (Cut("g2", 256, ("RMSNorm#0",)),)
    x = np.linspace(-1, 1, 64, dtype=F32)
    for got, want in zip(compiled(x), StateBias().reference(x)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# ---- the rule on its own -----------------------------------------------------------------------------

def core(group, col, dma, received=(), carrier=None, own_in=None, movable=True, earlier=()) -> CoreInputs:
    return CoreInputs(group, Tile(col, 2, TileKind.COMPUTE), dma, (*dma, *received), carrier, own_in, movable,
                      earlier)


def test_a_carrier_with_a_spare_channel_gains_an_in_and_carries_two_readers():
    program = Bias().trace(x=((64,), F32))
    cores = [core("a", 0, (out("x"),), carrier=out("a")),    # one channel left: for the `_in` it gains
             core("r", 1, (out("a"), in_("r"), w("r")), own_in=in_("r")),
             core("q", 2, (out("a"), in_("q"), w("q")), own_in=in_("q"))]
    relays, rules = choose_relays(program, cores, NPU2)
    assert relays == [Relay("a", "r", (in_("r"),)), Relay("a", "q", (in_("q"),))]
    assert [rule for rule, _ in rules] == [Rule.FIT_COMPUTE_CHANNELS] * 2


def test_a_carrier_without_a_free_channel_loads_nothing_and_the_next_one_is_tried():
    program = Bias().trace(x=((64,), F32))
    full = core("a", 0, (out("x"), out("y")), carrier=out("a"))
    spare = core("b", 1, (in_("b"),), received=(out("y"),), carrier=out("b"))
    reader = core("r", 2, (out("a"), out("b"), out("y"), in_("r")), own_in=in_("r"))
    relays, _ = choose_relays(program, [full, spare, reader], NPU2)
    assert relays == [Relay("b", "r", (out("y"), in_("r")))]
    with pytest.raises(PlacementError) as err:
        choose_relays(program, [full, reader], NPU2)
    assert all(name in str(err.value) for name in ("Bias", "group r", "tile_2_2", "a_out, b_out, y_out, r_in"))


def test_a_fifo_a_carrier_no_longer_receives_is_not_carried():
    program = Bias().trace(x=((64,), F32))
    cores = [core("a", 0, (out("f"),), carrier=out("a")),
             core("b", 1, (out("f"), out("a"), w("b")), carrier=out("b")),   # takes f_out through a
             core("r", 2, (out("f"), out("b"), w("r")))]
    with pytest.raises(PlacementError):
        choose_relays(program, cores, NPU2)
    keeps = core("b", 1, (out("f"), w("b")), carrier=out("b"))
    relays, _ = choose_relays(program, [keeps, cores[2]], NPU2)
    assert relays == [Relay("b", "r", (out("f"),))]


# ---- a carrier with a spare channel starts receiving an earlier group's result ------------------------

class FourProducts(iron.Graph):
    """p + q + r + s for four MatVecs of four inputs: the sum's group reads four groups' results,
    three of them by DMA, and none of its senders receives another's."""

    def __init__(self):
        rng = np.random.default_rng(7)
        self.m = [iron.param(rng.standard_normal((16, 16)).astype(F32)) for _ in range(4)]

    def body(self, a, b, c, d):
        p, q, r, s = (MatVec.step(m, v) for m, v in zip(self.m, (a, b, c, d)))
        return Add.step(Add.step(Add.step(p, q), r), s)


def test_a_carrier_with_a_spare_channel_starts_receiving_an_earlier_result_to_forward_it(monkeypatch):
    made = outputs(monkeypatch, compile_module, "fit_compute_channels")
    graph, spec = FourProducts(), ((16,), F32)
    plan = compile_program(graph.trace(a=spec, b=spec, c=spec, d=spec), NPU2, over_time=False)
    assert plan.segments == ()
    assert made[-1].relays == (Relay("g1", "g4", (out("g0"),), gained=(out("g0"),)),) and len(fits(plan)) == 1
    assert consumers(plan, FifoId("g0", Stem.OUT)) == ("tile_0_3",) and plan.fifo(FifoId("g0", Stem.OUT)).shared_memory
    assert plan.holds[FifoId("g1", Stem.OUT)] == "MatVec#1, MatVec#0"
    assert over(plan) == {}
    xs = [np.linspace(-1, 1, 16).astype(F32) * (i + 1) for i in range(4)]
    np.testing.assert_allclose(graph.compile(a=spec, b=spec, c=spec, d=spec)(*xs), graph.reference(*xs),
                               rtol=1e-5, atol=1e-5)


def test_a_carrier_gains_only_results_made_before_it_and_only_on_spare_channels():
    program = Bias().trace(x=((64,), F32))
    reader = core("r", 2, (out("a"), out("b"), out("c")))
    later = core("b", 1, (in_("b"),), carrier=out("b"))                       # a_out is not made before b
    assert pytest.raises(PlacementError, choose_relays, program, [later, reader], NPU2)
    full = core("b", 1, (in_("b"), w("b")), carrier=out("b"), earlier=(out("a"),))   # no channel left
    assert pytest.raises(PlacementError, choose_relays, program, [full, reader], NPU2)
    spare = core("b", 1, (in_("b"),), carrier=out("b"), earlier=(out("a"),))
    relays, _ = choose_relays(program, [spare, reader], NPU2)
    assert relays == [Relay("b", "r", (out("a"),), gained=(out("a"),))]


class HeadsAndTwo(iron.Graph):
    """p + q + r + s: p and q two MatVecs of one streamed param (their cores take its 8 blocks in
    step), r and s two of params small enough to load whole; the sum's group would take three
    results by DMA."""

    def __init__(self):
        rng = np.random.default_rng(9)
        self.k = iron.param(rng.standard_normal((1024, 32)).astype(F32) / 32)
        self.m, self.n = (iron.param(rng.standard_normal((1024, 4)).astype(F32) / 4) for _ in range(2))

    def body(self, a, b, c, d):
        p, q = MatVec.step(self.k, a), MatVec.step(self.k, b)
        r, s = MatVec.step(self.m, c), MatVec.step(self.n, d)
        return Add.step(Add.step(Add.step(p, q), r), s)


def test_a_core_taking_blocks_in_step_with_another_gains_nothing_to_forward(monkeypatch):
    # g0 and g1 take k's blocks in step: waiting for an earlier result could stop both, so neither
    # may start receiving one; g2 and g3 may
    graph, small, wide = HeadsAndTwo(), ((4,), F32), ((32,), F32)
    program = graph.trace(a=wide, b=wide, c=small, d=small)
    layout = place(program, fuse(program), NPU2)
    assert [s.stream.owner for s in layout.sites[:2]] == [None, "g0"]
    earlier = {c.group: c.earlier for c in core_inputs(route(program, layout), layout)}
    assert earlier == {"g0": (), "g1": (), "g2": (out("g0"), out("g1")), "g3": (out("g0"), out("g1"), out("g2")),
                       "g4": (out("g0"), out("g1"), out("g2"), out("g3"))}
    made = outputs(monkeypatch, compile_module, "fit_compute_channels")
    plan = compile_program(program, NPU2)
    assert made[-1].relays == (Relay("g2", "g4", (out("g0"),), gained=(out("g0"),)),) and len(fits(plan)) == 1
    xs = [np.linspace(-1, 1, n).astype(F32) for n in (32, 32, 4, 4)]
    np.testing.assert_allclose(graph.compile(a=wide, b=wide, c=small, d=small)(*xs), graph.reference(*xs),
                               rtol=1e-5, atol=1e-5)
