"""`tile_before_state_write` (iron/compiler/through_ddr.py), on the Program before fusion: a MatVec
whose grid is estimated faster than one tile (`tiled`: fused with the state write, it would not
split) whose result only calls read, one of them writing a state, writes its result whole (out=) into a THROUGH declaration of the compiler's, `through.<label>`, which its readers
read instead; one `Rule.TILE_BEFORE_STATE_WRITE` decision per MatVec taken. A MatVec the host or
a carried value reads, one too small to tile, one of a view, or one no state writer reads is
left alone (the Program itself comes back). The pass refuses nothing. `through_between_groups`:
a result larger than a compute tile read by a call it does not stream with (either is not
elementwise) writes a THROUGH declaration its readers read, one `Rule.THROUGH_BETWEEN_GROUPS`
decision per result; results a tile holds, the host's, and elementwise chains stay as they are."""
import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron import Carried
from iron.compiler.through_ddr import through_between_groups, through_name, tile_before_state_write
from iron.ir import MemoryKind, Op
from iron.kernels import Accumulate, Add, Exp, MatMul, MatVec, Scale, Softmax
from iron.plan.rules import Rule

F32 = np.float32


class IntoState(iron.Graph):
    """acc += W @ x (or `then`: "bias", acc = W @ x + b; "host", also returned; "exp", Exp of it
    returned, no state written; "view", W[:rows] @ x)."""

    def __init__(self, rows: int, cols: int, then: str = ""):
        self.w, self.x = iron.param(np.ones((rows, cols), F32)), iron.param(np.ones(cols, F32))
        self.b = iron.param(np.ones(rows, F32))
        self.acc = iron.state((rows - (then == "view"),), F32, name="acc")
        self.then = then

    def body(self, *, step: Carried[np.int32]):
        w = self.w[1:] if self.then == "view" else self.w
        y = MatVec.step(w, self.x)
        if self.then == "exp":
            return Exp.step(y), iron.carry(step=step + 1)
        if self.then == "bias":
            Add.step(y, self.b, out=self.acc)
        else:
            Accumulate.step(y, out=self.acc)
        return (y, iron.carry(step=step + 1)) if self.then == "host" else iron.carry(step=step + 1)


@pytest.mark.parametrize("then, reader", [("", Accumulate), ("bias", Add)])
def test_a_large_matvec_read_by_a_state_write_writes_a_ddr_buffer_its_reader_reads(then, reader):
    program = IntoState(300, 4097, then).trace()
    rewritten, decisions = tile_before_state_write(program, from_name("npu2"))
    matvec, write = rewritten.calls
    (buffer,) = rewritten.memories[len(program.memories):]
    assert (matvec.arg.kernel, matvec.arg.writes, write.arg.kernel) == (MatVec, True, reader)
    assert matvec.src[2] is buffer and write.src[0] is buffer
    assert (buffer.op, buffer.arg.kind, buffer.arg.name, buffer.shape) == (Op.MEMORY, MemoryKind.THROUGH,
                                                                            "through.MatVec#0", (300,))
    added = rewritten.declarations[len(program.declarations):]
    assert [(d.kind, d.name, d.shape, d.dtype) for d in added] == [
        (MemoryKind.THROUGH, "through.MatVec#0", (300,), np.dtype(F32))]
    assert [rule for rule, _ in decisions] == [Rule.TILE_BEFORE_STATE_WRITE]
    assert through_name(program, program.calls[0]) == "through.MatVec#0"


@pytest.mark.parametrize("rows, cols, then", [
    (300, 4097, "host"),    # the host reads the product
    (300, 4097, "exp"),     # no reader writes a state
    (300, 4097, "view"),    # the matrix is a view
    (16, 16, ""),           # too small to split or tile
])
def test_a_matvec_the_rule_does_not_take_leaves_the_program_as_it_is(rows, cols, then):
    program = IntoState(rows, cols, then).trace()
    assert tile_before_state_write(program, from_name("npu2")) == (program, ())


# ---- through_between_groups ----------------------------------------------------------------------

class Scores(iron.Graph):
    """softmax(Scale(q @ k)) @ v, the attention of one head (`square` positions)."""

    def body(self, q, k, v):
        return MatMul.step(Softmax.step(Scale.step(MatMul.step(q, k), factor=0.5)), v)


def test_results_larger_than_a_tile_between_groups_that_do_not_stream_together_pass_through_ddr():
    """Scores (256, 256) float32 are 256 KiB: the product, its Scale and its Softmax each go into
    a DDR buffer of the compiler's their reader reads (a MatMul's result and a Softmax's never
    stream with their reader, nor an elementwise call's with a row reduction's); the last
    MatMul's result is the host's and stays as it is."""
    program = Scores().trace(q=((256, 16), F32), k=((16, 256), F32), v=((256, 16), F32))
    rewritten, decisions = through_between_groups(program, from_name("npu2"))
    names = ["through.MatMul#0", "through.Scale#1", "through.Softmax#2"]
    assert [m.arg.name for m in rewritten.memories[len(program.memories):]] == names
    product, scaled, soft, out = rewritten.calls
    assert [c.arg.writes for c in rewritten.calls] == [True, True, True, False]
    assert (scaled.src[0].arg.name, soft.src[0].arg.name, out.src[0].arg.name) == tuple(names)
    assert [rule for rule, _ in decisions] == [Rule.THROUGH_BETWEEN_GROUPS] * 3
    for (_, text), name, reader in zip(decisions, names, ("Scale#1", "Softmax#2", "MatMul#3"), strict=True):
        assert all(quote in text for quote in (name.removeprefix("through."), "262144 bytes", name, reader))


class Chain(iron.Graph):
    def body(self, x):
        return Exp.step(Add.step(x, x))


@pytest.mark.parametrize("graph, specs", [
    (Scores(), {"q": ((64, 16), F32), "k": ((16, 64), F32), "v": ((64, 16), F32)}),   # 16 KiB of scores: a tile holds them
    (Chain(), {"x": ((65536,), F32)}),   # elementwise into elementwise: one stream
])
def test_results_a_tile_holds_or_one_stream_passes_on_stay_as_they_are(graph, specs):
    program = graph.trace(**specs)
    assert through_between_groups(program, from_name("npu2")) == (program, ())
