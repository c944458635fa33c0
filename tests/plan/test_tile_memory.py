"""Tile memory counted where mlir-aie allocates it (iron/compiler/allocate.py, docs/platform.md
section 4): the per-tile bytes of the Walk, the 4x256 MLP, a split MatVec, a forwarded stream, a
west-flowing shared-memory FIFO and the section-8 decoder, pinned to what mlir-aie's objectFifo
lowering allocates on each tile; a design that fits only under this count compiles and runs, and
one that does not fit is refused with its numbers."""

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron.compiler.compile import compile_program
from iron.errors import DoesNotFit
from iron.kernels import Add, Softmax
from iron.plan.fifos import FifoId, Stem
from iron.plan.invariants import check_plan
from iron.plan.memory import fifo_homes, tile_memory
from iron.plan.plan import Acquire, Tile, TileKind
from tests.compiler import designs
from tests.quotes import quoted

DECODER = Path(__file__).parents[2] / "programming_guide" / "section-8" / "decoder.py"


def compute(col: int, row: int) -> Tile:
    return Tile(col, row, TileKind.COMPUTE)


def mem(col: int) -> Tile:
    return Tile(col, 1, TileKind.MEM)


def plan_of(graph, device: str = "npu2"):
    return compile_program(designs.trace(graph), from_name(device))


def used(plan) -> dict[str, tuple[int, int]]:
    """Per tile: (bytes of FIFO objects and buffers, bytes of stack)."""
    return {tile.name: (sum(n for name, n in held if not name.startswith("stack@")),
                        sum(n for name, n in held if name.startswith("stack@")))
            for tile, held in tile_memory(plan).items()}


def fifo_bytes(plan) -> dict[str, int]:
    """Per tile: bytes of FIFO objects only."""
    buffers = {b.name for b in plan.buffers}
    return {tile.name: sum(n for name, n in held if not name.startswith("stack@") and name not in buffers)
            for tile, held in tile_memory(plan).items()}


def test_the_walks_shared_fifo_lives_on_its_producers_tile():
    plan = plan_of(designs.walk(8))          # g0_out: tile_0_2 -> tile_0_3, its north neighbour
    assert fifo_homes(plan)[FifoId("g0", Stem.OUT)] == ((compute(0, 2), 2),)
    assert used(plan) == {"tile_0_2": (32, 1024), "tile_0_3": (120, 1024)}   # emit_in 2 x 28, feedback 2 x 32


def test_the_mlps_mem_tiles_hold_each_link_once():
    plan = plan_of(designs.mlp(4, 256))
    assert {name: n for name, (n, _) in used(plan).items() if name.startswith("mem")} == {
        "mem_0_1": 67584, "mem_1_1": 67584, "mem_2_1": 67584, "mem_3_1": 196608, "mem_4_1": 133120}
    assert used(plan)["tile_0_3"] == (37888, 1024)
    assert fifo_homes(plan)[FifoId("g1", Stem.W, (0,), mem=True)] == ((mem(0), 2),)    # a lane's link source: 2 x 16384
    assert fifo_homes(plan)[FifoId("g1", Stem.W, (0,))] == ((compute(0, 3), 2),)  # a member: only on its consumer
    assert fifo_homes(plan)[FifoId("g1", Stem.OUT)] == ((mem(0), 2), (compute(1, 4), 2))   # the join's result


def test_a_split_matvec_holds_the_whole_matrix_object_once():
    # split over 4 tiles through 4 lanes, joined into g0_host, on npu1, whose grid reads the matrix through no more shim channels than the split, so the split is taken
    plan = plan_of(designs.big_matvec(512, 256), "npu1")
    assert used(plan) == {"mem_0_1": (2 * 16384 + 2 * 2048, 0), **{f"mem_{k}_1": (2 * 16384, 0) for k in (1, 2, 3)},
                          **{f"tile_0_{row}": (35840, 1024) for row in (2, 3, 4, 5)}}


def test_a_forwarded_stream_is_held_once_on_its_mem_tile():
    plan = plan_of(designs.mlp(1, 256, iron.bfloat16))   # the matrix streamed on one tile: a forward
    assert used(plan)["mem_0_1"] == (2 * 16384, 0)
    assert fifo_homes(plan)[FifoId("g1", Stem.W)] == ((compute(0, 3), 2),)


def relocated(plan, moves: dict[Tile, Tile]):
    """`plan` with its tiles moved: every FIFO end, core, buffer, the Emit and the tile list."""
    def at(tile):
        return moves.get(tile, tile)

    fifos = tuple(dataclasses.replace(f, producer=at(f.producer), consumers=tuple(map(at, f.consumers)))
                  for f in plan.fifos)
    return dataclasses.replace(
        plan, fifos=fifos, tiles=tuple(dict.fromkeys(map(at, plan.tiles))),
        cores=tuple(dataclasses.replace(c, tile=at(c.tile)) for c in plan.cores),
        buffers=tuple(dataclasses.replace(b, tile=at(b.tile)) for b in plan.buffers),
        emit=dataclasses.replace(plan.emit, tile=at(plan.emit.tile)))


def test_a_west_flowing_shared_fifo_lives_on_its_consumers_tile():
    # g0 on tile_1_2, the Emit on its west neighbour tile_0_2: the producer's core reaches the
    # consumer's memory but not the other way round.
    plan = relocated(plan_of(designs.walk(8)), {compute(0, 2): compute(1, 2), compute(0, 3): compute(0, 2)})
    check_plan(plan)
    assert fifo_homes(plan)[FifoId("g0", Stem.OUT)] == ((compute(0, 2), 2),)
    assert used(plan) == {"tile_1_2": (24, 1024), "tile_0_2": (128, 1024)}


def test_the_two_layer_decoder_counts_its_shared_fifos_on_their_producers():
    spec = importlib.util.spec_from_file_location("decoder", DECODER)
    decoder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(decoder)
    plan = compile_program(decoder.Decoder(2).trace(), from_name("npu2"))
    held = fifo_bytes(plan)
    assert (held["tile_2_2"], held["tile_6_2"]) == (768, 16)
    assert fifo_homes(plan)[FifoId("g8", Stem.OUT)] == ((compute(2, 2), 2),)    # north, to tile_2_3
    assert fifo_homes(plan)[FifoId("g23", Stem.OUT)] == ((compute(5, 2), 2),)   # east, to tile_6_2
    # the shared FIFOs' two objects each: shared_in1 (824 bytes: g0_in, the Emit's words and four more),
    # shared_in2 (12288: g12_in .. g14_in), shared_in0 (4228: g16_in, g18_in, g19_in)
    assert [used(plan)[mem] for mem in ("mem_3_1", "mem_2_1", "mem_4_1")] == [(2 * 824, 0), (2 * 12288, 0), (2 * 4228, 0)]


def test_a_compute_end_holds_one_more_object_than_its_core_acquires_at_once():
    plan = plan_of(designs.add_one(1024))   # tile_0_2 acquires one g0_in object at a time
    deep = dataclasses.replace(plan, fifos=(dataclasses.replace(plan.fifos[0], depth=8), *plan.fifos[1:]))
    single = dataclasses.replace(plan, fifos=(dataclasses.replace(plan.fifos[0], depth=1), *plan.fifos[1:]))
    core = plan.cores[0]
    program = tuple(dataclasses.replace(s, count=2) if isinstance(s, Acquire) and s.fifo == FifoId("g0", Stem.IN) else s
                    for s in core.program)
    pairs = dataclasses.replace(plan, cores=(dataclasses.replace(core, program=program),))
    assert [fifo_homes(p)[FifoId("g0", Stem.IN)] for p in (plan, deep, single, pairs)] == [
        ((compute(0, 2), 2),), ((compute(0, 2), 2),), ((compute(0, 2), 1),), ((compute(0, 2), 3),)]


class Crowded(iron.Graph):
    """Softmax(x) + bias: the Softmax on tile_0_2 hands its result to the Add on tile_0_3 through
    shared memory, which mlir-aie keeps on tile_0_2."""

    def __init__(self, n: int):
        self.bias = iron.param(np.linspace(0, 1, n, dtype=np.float32))

    def body(self, x):
        return Add.step(Softmax.step(x), self.bias)


def test_a_design_that_fits_only_where_mlir_aie_puts_the_shared_fifo_compiles_and_runs():
    # Counted on the consumer, tile_0_3 would hold 3 x 24576 + 1024 bytes even at depth 1.
    compiled = Crowded(6144).compile(x=((6144,), np.float32))
    held = {tile.name: sorted(things) for tile, things in tile_memory(compiled.plan).items()}
    assert held == {   # the shared g0_out on its producer's tile only
        "tile_0_2": [("g0_in@tile_0_2", 24576), ("g0_out", 24576), ("stack@tile_0_2", 1024)],
        "tile_0_3": [("g1_host@tile_0_3", 24576), ("g1_in@tile_0_3", 24576), ("stack@tile_0_3", 1024)]}
    x = np.linspace(-3, 3, 6144, dtype=np.float32)
    e = np.exp(x - x.max())
    np.testing.assert_allclose(compiled(x), e / e.sum() + compiled.graph.bias.array, rtol=1e-6, atol=1e-7)


def test_a_design_over_the_exact_count_does_not_fit():
    with pytest.raises(DoesNotFit) as err:
        Crowded(8192).compile(x=((8192,), np.float32))
    # the row alone is over: refused by placement, before buffers are counted
    quoted(err.value, "Crowded", "npu2", "Softmax#0 (group g0)", "8192 float32", "65536 bytes", "64512",
           "at most 8064 elements")
