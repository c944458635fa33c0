"""FIFO identities (iron/compiler/fifos.py): each FIFO's MLIR name is printed from its FifoId,
one name per identity, and a compiled design's FIFOs carry exactly those names."""
import itertools

from aie_utils import from_name
from iron.compiler.compile import compile_program
from iron.compiler.fifos import EMIT, EMIT_IN, FEEDBACK, FifoId, FifoRole, Stem, fifo_id
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
