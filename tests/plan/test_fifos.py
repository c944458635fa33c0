"""FIFO identities (iron/plan/fifos.py): each FIFO's MLIR name is printed from its FifoId,
one name per identity, and a compiled design's FIFOs carry exactly those names."""
import itertools

from aie_utils import from_name
from iron.compiler.compile import compile_program
from iron.plan.fifos import EMIT, EMIT_IN, FEEDBACK, FifoId, FifoRole, Stem, fifo_id
from iron.plan.plan import Acquire, Invoke, KernelStep, Load, Loop, Ptr, Release
from tests.compiler import designs


def test_each_identity_prints_its_name():
    assert [str(f) for f in (
        fifo_id("g1", Stem.IN), fifo_id("g1", Stem.HOST, core=0), fifo_id("g0", Stem.A, 1, mem=True),
        fifo_id("g2", Stem.PART, 0, 1, result=1), fifo_id("g0", Stem.X, 0, 1, 2), fifo_id("g3", Stem.W, mem=True),
        fifo_id(None, Stem.SHARED_IN, 3), EMIT_IN, FEEDBACK)] == [
        "g1_in", "g1_p0_host", "g0_a1_mem", "g2_part0_1_r1", "g0_x0_1_2", "g3_w_mem", "shared_in3", "emit_in", "feedback"]
    assert str(FifoId("g1", Stem.OUT, core=2)) == "g1_p2_out"


def test_different_identities_print_different_names():
    ids = [FifoId(g, stem, at, core, mem, result)
           for g, stem, at, core, mem, result in itertools.product(
               ("g0", "g1", EMIT, None), Stem, ((), (0,), (1,), (0, 1), (1, 0), (0, 1, 2)), (None, 0, 1),
               (False, True), (0, 1))]
    assert len({i.name for i in ids}) == len(ids)


def test_each_identity_has_the_role_its_stem_and_group_say():
    assert [f.role for f in (fifo_id("g0", Stem.IN), EMIT_IN, fifo_id("g0", Stem.A, 1, mem=True),
                             fifo_id("g0", Stem.X, 0, 1), fifo_id(None, Stem.SHARED_HOST, 2))] == [
        FifoRole.INPUT, FifoRole.EMIT_IN, FifoRole.WEIGHTS, FifoRole.WEIGHTS, FifoRole.SHARED_HOST]


def test_a_design_with_an_emit_names_its_fifos_by_their_identities():
    plan = compile_program(designs.trace(designs.walk()), from_name("npu2"))
    assert [(f.name, f.role) for f in plan.fifos] == [
        (fifo_id("g0", Stem.IN), FifoRole.INPUT), (fifo_id("g0", Stem.HOST), FifoRole.HOST),
        (fifo_id("g0", Stem.OUT), FifoRole.OUTPUT), (EMIT_IN, FifoRole.EMIT_IN), (FEEDBACK, FifoRole.FEEDBACK)]
    assert [c.group for c in plan.cores] == ["g0", EMIT]


def fifo_references(plan) -> list:
    """Every value of the Plan naming a FIFO or a Buffer: link ends, sequence ops, acquires,
    releases and Invoke objects, Function parameters, pointer and load sources, the Emit's."""
    def program(items):
        for i in items:
            yield from program(i.body) if isinstance(i, Loop) else (
                i.objects if isinstance(i, Invoke) else (i.fifo,) if isinstance(i, (Acquire, Release)) else ())
    steps = [s for f in plan.functions for s in f.steps]
    args = [a for s in steps for a in (s.args if isinstance(s, KernelStep) else (s.dest, s.a, s.b))]
    emit = () if plan.emit is None else (FEEDBACK, *(
        v.source for _, v in plan.emit.next_values if isinstance(v, Load)))
    return [*(n for link in plan.links for n in (*link.sources, *link.destinations)),
            *(op.fifo for op in plan.sequence), *(n for c in plan.cores for n in program(c.program)),
            *(p for f in plan.functions for p in f.params), *(a.source for a in args if isinstance(a, (Ptr, Load))), *emit]


def test_a_compiled_plan_names_every_fifo_by_its_identity_and_only_buffers_by_name():
    for design, device in ((designs.walk, "npu2"), (designs.mlp, "npu1"), (designs.big_matvec, "npu2")):
        plan = compile_program(designs.trace(design()), from_name(device))
        fifos, buffers = {f.name for f in plan.fifos}, {b.name for b in plan.buffers}
        references = fifo_references(plan)
        assert references and all(r in fifos if isinstance(r, FifoId) else r in buffers for r in references)
