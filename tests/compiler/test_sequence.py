"""The runtime sequence (iron/compiler/sequence.py): a group's Moves (`group_moves`: its `_in`
regions, its streamed matrix in split-link order, its `_host` regions, a split group's joined
result), the Waits a group reading a state an earlier group wrote takes first
(`with_state_waits`), and `finish_sequence` cutting Moves into Dma ops within the shim's limits
(only the outermost dimension repeating with stride 0), recycling BD ids only after a covering
Wait. The pass refuses nothing: every move is cut until it fits."""
import numpy as np

from aie_utils import from_name
from iron.compiler.objects import pack
from iron.compiler.sequence import (
    Move,
    dma_patterns,
    finish_sequence,
    group_moves,
    with_state_waits,
    written_fifos,
)
from iron.compiler.words import Access
from iron.plan.fifos import FifoId, Stem
from iron.plan.plan import Direction, Dma, Fifo, Moved, Tile, TileKind, Wait, dma_runs
from tests.compiler import designs
from tests.compiler.passes import context

NPU2 = from_name("npu2")
SHIM, T02 = Tile(0, 0, TileKind.SHIM), Tile(0, 2, TileKind.COMPUTE)
MM2S, S2MM = Direction.MM2S, Direction.S2MM
IN, OUT = FifoId("g0", Stem.IN), FifoId("g1", Stem.HOST)   # g0_in, g1_host


def moves_of(program, device=NPU2) -> tuple[list[list[Move]], object]:
    ctx = context(program, device)
    return [group_moves(ctx, site, pack(ctx, site)) for site in ctx.layout.sites], ctx


def test_a_group_fills_its_in_region_by_region_and_drains_its_host():
    [moves], _ = moves_of(designs.trace(designs.add_one(1024)))
    assert moves == [Move(MM2S, IN, "inputs", Access(0, ((1024, 1),))),
                     Move(MM2S, IN, "consts", Access(0, ((1024, 1),))),
                     Move(S2MM, FifoId("g0", Stem.HOST), "outputs", Access(0, ((1024, 1),)))]


def test_a_split_matrix_streams_in_split_link_order_and_the_joined_result_drains_once():
    """512 x 256 float32 over 4 parts, each part through a lane of its own: lane k moves part
    k's 128 rows, one run of 32768 words from the last's, then the joined 512 results drain; on
    npu1, whose grid reads the matrix through no more shim channels than the split, so the split is taken."""
    [moves], _ = moves_of(designs.trace(designs.big_matvec(512, 256)), from_name("npu1"))
    assert moves == [Move(MM2S, IN, "inputs", Access(0, ((256, 1),))),
                     *[Move(MM2S, FifoId("g0", Stem.W, (k,), mem=True), "consts", Access(k * 32768, ((32768, 1),)))
                       for k in range(4)],
                     Move(S2MM, FifoId("g0", Stem.HOST), "outputs", Access(0, ((512, 1),)))]


def test_a_lane_of_several_parts_moves_them_in_split_link_order():
    """One column's shim channels leave the split one lane (npu2_1col): per block, each part's
    16 rows, the parts 128 rows = 32768 words apart."""
    ctx = context(designs.trace(designs.big_matvec(512, 256)), from_name("npu2_1col"))
    [moves] = [group_moves(ctx, site, pack(ctx, site)) for site in ctx.layout.sites]
    assert moves[1] == Move(MM2S, FifoId("g0", Stem.W, mem=True), "consts",
                            Access(0, ((8, 4096), (4, 32768), (16, 256), (256, 1))))


def test_a_group_reading_a_state_an_earlier_group_wrote_waits_for_that_write():
    """Accumulate into s, then Exp of s: g1's moves come after a Wait on g0_host, and g1_in is
    a waiting input (shim sharing keeps it on its own channel)."""
    moves, ctx = moves_of(designs.WriteThenRead().trace(x=((8,), np.float32)))
    assert [written_fifos(site) for site in ctx.layout.sites] == [{FifoId("g0", Stem.HOST)}, {OUT}]
    entries, waiting = with_state_waits(ctx.layout.sites, moves)
    assert entries == [*moves[0], Wait(FifoId("g0", Stem.HOST)), *moves[1]]
    assert waiting == frozenset({FifoId("g1", Stem.IN)})


def test_every_s2mm_fifo_is_waited_for_at_the_end():
    fifos = {FifoId("g0", Stem.IN): Fifo(FifoId("g0", Stem.IN), SHIM, (T02,), 2, 4), FifoId("g1", Stem.HOST): Fifo(FifoId("g1", Stem.HOST), T02, (SHIM,), 2, 4)}
    ops = finish_sequence([Move(MM2S, IN, "inputs", Access(0, ((4, 1),))),
                           Move(S2MM, OUT, "outputs", Access(0, ((4, 1),)))], fifos, NPU2)
    assert ops == (Dma(MM2S, FifoId("g0", Stem.IN), "inputs", 0, (1, 1, 1, 4), (0, 0, 0, 1), 0, SHIM),
                   Dma(S2MM, FifoId("g1", Stem.HOST), "outputs", 0, (1, 1, 1, 4), (0, 0, 0, 1), 1, SHIM), Wait(FifoId("g1", Stem.HOST)))


# ---- cutting moves into Dma ops (finish_sequence, dma_patterns) -----------------------------------

def test_long_transfers_become_dmas_within_the_limits():
    assert dma_patterns(0, [(5000, 1)], NPU2) == [(0, (1, 1, 5, 1000), (0, 0, 1000, 1))]
    assert dma_patterns(0, [(2003, 1)], NPU2) == [
        (0, (1, 1, 1, 1023), (0, 0, 0, 1)), (1023, (1, 1, 1, 980), (0, 0, 0, 1))]
    assert dma_patterns(0, [(100, 40), (3, 10), (2, 5), (4, 1)], NPU2) == [
        (0, (64, 3, 2, 4), (40, 10, 5, 1)), (2560, (36, 3, 2, 4), (40, 10, 5, 1))]
    assert dma_patterns(7, [(2, 100), (2, 40), (3, 10), (2, 5), (4, 1)], NPU2) == [
        (7, (2, 3, 2, 4), (40, 10, 5, 1)), (107, (2, 3, 2, 4), (40, 10, 5, 1))]


def test_only_the_outermost_dimension_repeats_with_stride_0():
    """mlir-aie's verifier (docs/platform.md section 5): a stride-0 dimension is the repeat (at
    most 64), never an inner one; one further in is cut off by a Dma per index outside it."""
    assert dma_patterns(0, [(2, 0), (32, 1)], NPU2) == [(0, (2, 1, 1, 32), (0, 0, 0, 1))]
    assert dma_patterns(0, [(100, 0), (4, 8), (32, 1)], NPU2) == [
        (0, (64, 1, 4, 32), (0, 0, 8, 1)), (0, (36, 1, 4, 32), (0, 0, 8, 1))]
    assert dma_patterns(5, [(3, 40), (2, 0), (8, 1)], NPU2) == [
        (5, (2, 1, 1, 8), (0, 0, 0, 1)), (45, (2, 1, 1, 8), (0, 0, 0, 1)), (85, (2, 1, 1, 8), (0, 0, 0, 1))]
    assert dma_patterns(0, [(3, 0), (4, 2)], NPU2) == [(0, (3, 1, 1, 4), (0, 0, 0, 2))]


def test_a_wait_with_nothing_outstanding_on_its_fifo_is_left_out():
    """A Wait freeing a BD covered every op on its FIFO, so a later Wait on it (a flow's) would
    wait for no completion token: finish_sequence leaves it out."""
    fifos = {FifoId("g0", Stem.IN): Fifo(FifoId("g0", Stem.IN), SHIM, (T02,), 2, 4)}
    moves = [Move(MM2S, IN, "inputs", Access(i, ((1, 1),))) for i in range(17)]
    ops = finish_sequence([*moves, Wait(FifoId("g0", Stem.IN)), Wait(FifoId("g0", Stem.IN))], fifos, NPU2)
    assert [op for op in ops if isinstance(op, Wait)] == [Wait(FifoId("g0", Stem.IN)), Wait(FifoId("g0", Stem.IN))]
    assert ops[-1] == Wait(FifoId("g0", Stem.IN)) and not isinstance(ops[-2], Wait)


def test_bd_ids_are_reused_only_after_a_covering_wait():
    fifos = {FifoId("g0", Stem.IN): Fifo(FifoId("g0", Stem.IN), SHIM, (T02,), 2, 4)}
    moves = [Move(MM2S, IN, "inputs", Access(i, ((1, 1),))) for i in range(18)]
    ops = finish_sequence(moves, fifos, NPU2)
    assert [op.bd_id for op in ops[:16]] == list(range(16))
    assert all(op.issue_token for op in ops[:16])
    assert ops[16] == Wait(FifoId("g0", Stem.IN))
    assert [(op.offset, op.bd_id, op.issue_token) for op in ops[17:]] == [(16, 0, False), (17, 1, False)]


def test_a_sequence_reads_as_runs_of_dmas_a_move_cut_within_the_limits():
    """dma_runs: each run of Dmas on one FIFO in one direction (a move's) as the words it moves, Waits as they are."""
    fifos = {IN: Fifo(IN, SHIM, (T02,), 2, 4), OUT: Fifo(OUT, T02, (SHIM,), 2, 4)}
    ops = finish_sequence([Move(MM2S, IN, "inputs", Access(0, ((2003, 1),))), Wait(IN),
                           Move(S2MM, OUT, "outputs", Access(0, ((4, 1),))), Move(MM2S, IN, "inputs", Access(0, ((8, 1),)))],
                          fifos, NPU2)
    assert [op.nwords for op in ops[:2]] == [1023, 980]
    assert dma_runs(ops) == [Moved(IN, MM2S, 2003), Wait(IN), Moved(OUT, S2MM, 4), Moved(IN, MM2S, 8), Wait(OUT)]
