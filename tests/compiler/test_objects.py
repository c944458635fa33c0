"""`pack` (iron/compiler/objects.py): what each FIFO object of a group holds, at which byte. A
group's `_in` holds its host tensors and per-call words in first-use order (each region whole
4-byte words, moved from its host buffer), its `_host` its outputs, carried elements and state
writes, its `_out` what other groups read (forwarded host tensors first); an intermediate no
one outside reads lives in a tile Buffer. A split group's parts each own rows of the result and
write them to their `_part<p>`; later groups find each result through `Context.results`.
`gather` copies a view of a computed result into a Buffer run by run (`gather_strided_view`),
and refuses one of more runs than MAX_GATHER_RUNS (PlacementError naming the view and the call)."""
import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron.compiler.objects import MAX_GATHER_RUNS, StateWrite, gather, pack
from iron.compiler.words import Access
from iron.errors import PlacementError
from iron.kernels import Add, Exp
from iron.plan.fifos import FifoId, Stem
from iron.plan.plan import Buffer, Output, Ptr, Tile, TileKind, WordKind
from iron.plan.rules import Rule
from tests.compiler import designs
from tests.compiler.passes import context

NPU2 = from_name("npu2")
I32, F32 = np.dtype(np.int32), np.dtype(np.float32)


def packed(graph, device=NPU2):
    """The Context and each group's parts, packed in program order."""
    program = designs.trace(graph) if not hasattr(graph, "calls") else graph
    ctx = context(program, device)
    return ctx, [pack(ctx, site) for site in ctx.layout.sites]


def regions(packing) -> list[tuple]:
    """(byte offset, what) of each region, in object order."""
    return list(zip(packing.offsets.values(), packing.what))


def test_add_one_packs_x_and_the_ones_into_its_in_and_the_output_into_its_host():
    ctx, [[part]] = packed(designs.add_one(1024))
    x, ones = ctx.program.inputs[0], ctx.program.memories[0]
    assert (part.prefix, part.tile, part.split) == ("g0", Tile(0, 2, TileKind.COMPUTE), False)
    assert part.ins.offsets == {x: 0, ones: 4096} and (part.ins.nbytes, part.ins.dtype) == (8192, I32)
    assert part.ins.moves == [("inputs", Access(0, ((1024, 1),))), ("consts", Access(0, ((1024, 1),)))]
    assert part.host.offsets == {Output("out0"): 0} and part.host.nbytes == 4096
    assert part.out.offsets == {} and part.buffers == []
    assert part.homes == {ctx.program.calls[0]: (FifoId("g0", Stem.HOST), 0)}


def test_a_forwarded_input_and_a_result_another_group_reads_go_into_the_out():
    """The MLP layer: g0's `_out` holds x (forwarded, copied from its `_in`) then RMSNorm#0's
    result, where g1 finds both; g1 keeps MatVec#1 and SiLU#2 in Buffers of its tile."""
    ctx, [[g0], [g1]] = packed(designs.mlp_layer(64))
    x, (norm, matvec, silu, add) = ctx.program.inputs[0], ctx.program.calls
    assert regions(g0.ins) == [(0, "x"), (256, "g")] and g0.ins.dtype == F32
    assert regions(g0.out) == [(0, "x"), (256, "RMSNorm#0")] and g0.out.nbytes == 512
    assert len(g0.copies) == 1 and g0.homes == {norm: (FifoId("g0", Stem.OUT), 256)}
    assert ctx.results == {x: (FifoId("g0", Stem.OUT), 0), norm: (FifoId("g0", Stem.OUT), 256)}
    assert regions(g1.ins) == [(0, "w")] and regions(g1.host) == [(0, "out0")]
    assert g1.buffers == [Buffer("g1_buf0", g1.tile, 256, F32), Buffer("g1_buf1", g1.tile, 256, F32)]
    assert g1.holds == {"g1_buf0": "MatVec#1", "g1_buf1": "SiLU#2"}
    assert g1.homes == {matvec: ("g1_buf0", 0), silu: ("g1_buf1", 0), add: (FifoId("g1", Stem.HOST), 0)}


def test_a_split_groups_parts_own_rows_and_write_their_parts():
    ctx, [parts] = packed(designs.big_matvec(512, 256), from_name("npu1"))   # split on npu1, whose grid reads the matrix through no more shim channels than the split, so the split is taken
    (matvec,) = ctx.program.calls
    assert [(p.prefix, p.number, p.start, p.count) for p in parts] == [
        ("g0_p0", 0, 0, 128), ("g0_p1", 1, 128, 128), ("g0_p2", 2, 256, 128), ("g0_p3", 3, 384, 128)]
    assert [p.homes[matvec] for p in parts] == [(FifoId("g0", Stem.PART, (p,)), 0) for p in range(4)]
    assert all(regions(p.ins) == [(0, "x")] for p in parts)   # the matrix streams: not in `_in`
    assert ctx.results == {matvec: (FifoId("g0", Stem.HOST), 0)}


def test_a_state_write_through_an_index_reads_and_writes_its_row_by_patch_words():
    """acc[pos] += x: the row is loaded into `_in` after x and written back from `_host`, both
    moves patched by the same word of the scratchpad (lowering then gives the write a word of
    its own that a flagged run moves to the states' sink: `sink_writes`, test_emit.py)."""
    ctx, [[part]] = packed(designs.accumulate_at(64, 4))
    (call,) = ctx.program.calls
    assert regions(part.ins) == [(0, "x"), (256, "acc[pos]")]
    (_, read), = [m for m in part.ins.moves if m[0] == "states"]
    assert part.ins.moves[0] == ("inputs", Access(0, ((64, 1),)))
    assert part.host.offsets == {StateWrite(call): 0}
    [(buffer, write)] = part.host.moves
    assert (buffer, write) == ("states", read) and read.offset == 0 and read.dims == ((64, 1),)   # one word patches both
    word = ctx.table.words[read.patch_word]
    assert (word.name, word.kind) == ("pos * 64", WordKind.DMA)   # row pos, 64 words a row


class Columns(iron.Graph):
    """exp(x)[:, :cols] + y: a view of a computed result, `rows` runs of `cols`."""

    def __init__(self, cols: int):
        self.cols = cols

    def body(self, x, y):
        return Add.step(Exp.step(x)[:, :self.cols], y)


def test_a_view_of_a_computed_result_is_gathered_run_by_run_into_a_buffer():
    program = Columns(32).trace(x=((8, 64), F32), y=((8, 32), F32))
    ctx, [[part]] = packed(program)
    exp, add = program.calls
    view = add.src[0]
    steps = gather(ctx, part, view)
    assert len(steps) == 8 and part.homes[view] == ("g0_buf1", 0)
    assert [(s.args[0], s.args[1]) for s in steps] == [
        (Ptr(part.homes[exp][0], 256 * r), Ptr("g0_buf1", 128 * r)) for r in range(8)]
    assert part.buffers[-1] == Buffer("g0_buf1", part.tile, 1024, F32)
    assert [rule for rule, _ in ctx.rules] == [Rule.GATHER_STRIDED_VIEW]
    assert gather(ctx, part, view) == []   # gathered once


def test_a_view_of_more_runs_than_a_core_copies_is_refused_with_its_names():
    rows = MAX_GATHER_RUNS + 1
    program = Columns(1).trace(x=((rows, 2), F32), y=((rows, 1), F32))
    ctx, [[part]] = packed(program)
    with pytest.raises(PlacementError) as err:
        gather(ctx, part, program.calls[1].src[0])
    assert all(name in str(err.value) for name in ("Exp(x)[:, :1]", f"{rows} separate runs", "Exp#0",
                                                   str(MAX_GATHER_RUNS)))
